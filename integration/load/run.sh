#!/usr/bin/env bash
# Load test of the service on the in-memory store against the no-op RLS
# ceiling, on loopback only, bounded in time (about 2 minutes).
#
#   integration/load/run.sh [DURATION] [ROUNDS]
#
# Prints, per descriptor count (1 and 5): the compare report (no-op vs
# ratelimit, same client, connections and concurrency), then the latency at
# about half of that peak: closed loop with 2 requests in flight per
# connection (an open loop on this 2-core machine measures the load tool's
# millisecond timer bursts more than the service).
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-5s}
ROUNDS=${2:-3}
CONNS=${CONNS:-2}
CONC=${CONC:-32}

cargo build --release --locked --workspace --bin ratelimit --bin ratelimit-bench >&2
root=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$root"' EXIT
mkdir -p "$root/current/ratelimit/config"
cp integration/load/config/bench.yaml "$root/current/ratelimit/config/"

env -i PATH="$PATH" BACKEND_TYPE=memory USE_STATSD=false \
    RUNTIME_ROOT="$root/current" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
    HOST=127.0.0.1 PORT=0 DEBUG_HOST=127.0.0.1 DEBUG_PORT=0 GRPC_HOST=127.0.0.1 GRPC_PORT=0 \
    target/release/ratelimit 2>"$root/log" &
pid=$!
for _ in $(seq 100); do
    grpc=$(sed -n "s/.*Listening for gRPC on '\([^']*\)'.*/\1/p" "$root/log")
    [ -n "$grpc" ] && break
    sleep 0.1
done
[ -n "$grpc" ] || { cat "$root/log" >&2; exit 1; }

for d in 1 5; do
    echo "=== $d descriptor(s) per request, $CONNS connections x $CONC in flight, uniform over 10000 keys"
    out=$(target/release/ratelimit-bench compare --target "$grpc" --connections "$CONNS" \
        --concurrency "$CONC" --duration "$DURATION" --warmup 1s --rounds "$ROUNDS" \
        --descriptors "$d" --keys uniform:10000)
    echo "$out"
    peak=$(echo "$out" | tail -1 | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["target"]["rps"]))')
    echo "=== about half load: $CONNS connections x 2 in flight (peak was $peak requests/s)"
    target/release/ratelimit-bench run --target "$grpc" --connections "$CONNS" \
        --concurrency 2 --duration "$DURATION" --warmup 1s \
        --descriptors "$d" --keys uniform:10000 | tail -1
done
