#!/usr/bin/env bash
# Mutation fuzzing of the request decoder, the /json parser and the config
# loader (integration/fuzz.rs) at 1,000,000 cases in release mode; prints
# the count of cases and panics, and exits non-zero on any panic. The test
# command runs the same harness at 100,000 cases. FUZZ_CASES overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_CASES=${FUZZ_CASES:-1000000} cargo test --release --locked --test fuzz
