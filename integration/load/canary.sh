#!/usr/bin/env bash
# A canary beside requests of many descriptors, on the memory store, on
# loopback, bounded in time (about 30 s): the canary's latency alone, then
# while two h2load clients send requests of N descriptors back to back.
#
#   integration/load/canary.sh [N] [SERVICE]    (default 1000, target/release/ratelimit)
#
# Prints the canary's p50/p99/p99.9 in both phases and the big requests'
# rate. SERVICE lets the same run measure another build.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-1000}
SERVICE=${2:-target/release/ratelimit}
command -v h2load >/dev/null || { echo "h2load is required (Debian: nghttp2-client)" >&2; exit 1; }
work=$(mktemp -d)
trap 'kill "$svc" 2>/dev/null || true; rm -rf "$work"' EXIT
root="$work/runtime"
mkdir -p "$root/ratelimit/config"
cp integration/load/config/bench.yaml "$root/ratelimit/config/"
svc_cpu=()
. integration/load/service.sh
start_service BACKEND_TYPE=memory
python3 integration/load/h2load_body.py "$work/big.bin" bench key big "$N"
canary() {
    target/release/ratelimit-bench run --target "$grpc" --connections 1 --concurrency 1 \
        --duration 8s --warmup 1s --keys uniform:1000 --domain bench | tail -1 |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print("canary rps=%d p50_us=%d p99_us=%d p999_us=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["p999_us"]))'
}
echo "alone:            $(canary)"
h2load -D 10s -c 2 -m 1 -t 1 -d "$work/big.bin" -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://$grpc/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" >"$work/h2load.log" 2>&1 &
big=$!
sleep 1
echo "beside $N-descriptor requests: $(canary)"
wait "$big" || true
echo "big requests: $(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1 req\/s/p' "$work/h2load.log")"
