#!/usr/bin/env bash
# The chaos soak: 3 instances of the release build on a 6-node Redis
# Cluster, clients in 3 processes, faults from a seeded schedule
# (soak/, a workspace member). Prints the report and exits 1 on any
# violation.
#
#   scripts/chaos.sh [DURATION] [SEED]    e.g. scripts/chaos.sh 30m 7
#
# DURATION defaults to 120s (the test command's short run), SEED to one
# drawn from the clock (printed: the same seed replays the same schedule
# of faults). The report (report.md, timeline.svg) and the logs are
# written to target/tmp/chaos-SEED, or to CHAOS_OUT. Needs root: the link
# faults use iptables (installed here from the OS packages if missing) and
# tc.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v iptables >/dev/null 2>&1; then
    echo "installing iptables from the OS packages (the link faults)" >&2
    sudo_cmd=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo_cmd=sudo; fi
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables >&2
fi

args=()
[ $# -ge 1 ] && args+=("$1")
[ $# -ge 2 ] && args+=("$2")
# The service's release build, which the soak runs, and then the soak.
cargo build --release --locked --bin ratelimit
exec cargo run --release --locked -p ratelimit-soak --bin chaos -- "${args[@]}"
