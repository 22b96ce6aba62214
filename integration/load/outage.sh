#!/usr/bin/env bash
# Load test of a Redis outage: the service under load while its Redis is
# paused (SIGSTOP) for a while, then resumed. Loopback only, bounded in time
# (about a minute). Starts its own redis-server on a free port.
#
#   integration/load/outage.sh [PAUSE]        (default 5s)
#
# For each service set-up, three back-to-back runs of the same load
# (2 connections x 32 in flight, uniform over 10,000 keys): before, during
# the pause, after. Reports req/s, p50 / p99 / max latency and errors.
#
#   breaker, open     STORE_FAILURE_MODE=open (every rule falls back to its
#                     local floor), the breaker on (the default)
#   no breaker, open  the same with STORE_BREAKER_FAILURES=0: every call
#                     waits out STORE_TIMEOUT (50 ms)
#   breaker, error    the default mode: calls fail as the original's do
#                     (errors), answered at once while the breaker is open
set -euo pipefail
cd "$(dirname "$0")/../.."
PAUSE=${1:-5s}
RUN=${RUN:-3s}
command -v redis-server >/dev/null || { echo "redis-server is required (scripts/test.sh installs it)" >&2; exit 1; }
cargo build --release --locked --workspace --bin ratelimit --bin ratelimit-bench >&2
work=$(mktemp -d)
pids=()
rpid=""
cleanup() {
    [ -n "$rpid" ] && kill -CONT "$rpid" 2>/dev/null || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
rpid=$!
pids+=("$rpid")
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

root="$work/runtime"
mkdir -p "$root/ratelimit/config"
cp integration/load/config/bench.yaml "$root/ratelimit/config/"

svc_cpu=()
. integration/load/service.sh

bench() { # label duration
    local out
    out=$(target/release/ratelimit-bench run --target "$grpc" --connections 2 --concurrency 32 \
        --duration "$2" --warmup 0s --keys uniform:10000 --domain bench --timeout 15s | tail -1)
    echo "$1 $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps=%d p50_us=%d p99_us=%d max_us=%d ok=%d errors=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["max_us"], d["ok"], d["errors"]))')"
}

scenario() { # label extra env...
    local label=$1; shift
    start_service BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$port" "$@"
    target/release/ratelimit-bench run --target "$grpc" --duration 1s --warmup 0s --keys uniform:10000 --domain bench >/dev/null
    bench "$label before" "$RUN"
    kill -STOP "$rpid"
    bench "$label during" "$PAUSE"
    kill -CONT "$rpid"
    bench "$label after " "$RUN"
    echo "$label log: $(grep -c 'circuit breaker opened' "$work/svc.log" || true) 'opened', $(grep -c 'circuit breaker closed' "$work/svc.log" || true) 'closed' lines"
    kill "$svc"; wait "$svc" 2>/dev/null || true
}

echo "=== Redis paused for $PAUSE under load (2 x 32 in flight); runs of $RUN before and after"
scenario "breaker, open   " STORE_FAILURE_MODE=open
scenario "no breaker, open" STORE_FAILURE_MODE=open STORE_BREAKER_FAILURES=0
scenario "breaker, error  "
