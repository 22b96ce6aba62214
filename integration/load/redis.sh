#!/usr/bin/env bash
# Load test of the Redis store against the in-memory store and the no-op RLS
# ceiling, in one run, on loopback only, bounded in time (about 3 minutes).
# Starts its own redis-server and a 6-node Redis Cluster (3 primaries,
# 3 replicas) on free ports and removes them at the end.
#
#   integration/load/redis.sh [DURATION]
#
# PIN=1 pins the service to CPU 0 and the load tool and the Redis servers
# to CPU 1, so the service has the same CPU in every run (on a 2-core
# machine the unpinned runs also measure how Redis and the load tool
# crowd the service out).
#
# Reports, for 1 descriptor per request and the same client, connections
# and concurrency: no-op, memory, Redis, Redis Cluster (peak and ~half
# load), the Redis commands per decision from INFO commandstats, and
# redis-benchmark running the same Lua script directly against Redis.
# When h2load (Debian's nghttp2-client) is installed, the memory and Redis
# runs are repeated with it as an independent client (one hot key: h2load
# sends one fixed body).
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-5s}
CONNS=${CONNS:-2}
CONC=${CONC:-32}
D=${DESCRIPTORS:-1}


. integration/load/redis_servers.sh
read -r single <<<"$(free_ports 1)"
start_redis "$single"
start_cluster

root="$work/runtime"
mkdir -p "$root/ratelimit/config"
cp integration/load/config/bench.yaml integration/load/config/bench_token_bucket.yaml "$root/ratelimit/config/"

. integration/load/service.sh

bench() { # label target concurrency [domain]
    local out
    out=$("${other_cpu[@]}" target/release/ratelimit-bench run --target "$2" --connections "$CONNS" --concurrency "$3" \
        --duration "$DURATION" --warmup 1s --descriptors "$D" --keys uniform:10000 --domain "${4:-bench}" | tail -1)
    echo "$1 $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps=%d p50_us=%d p99_us=%d p999_us=%d errors=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["p999_us"], d["errors"]))')"
}

# One gRPC-framed ShouldRateLimit request (domain bench, key=h2load) for h2load.
python3 integration/load/h2load_body.py "$work/body.bin"

h2bench() { # label target
    command -v h2load >/dev/null && [ "$D" = 1 ] || return 0
    local out
    out=$("${other_cpu[@]}" h2load -D "$DURATION" --warm-up-time 1s -c "$CONNS" -m "$CONC" -t 1 -d "$work/body.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://$2/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" 2>&1)
    echo "$1 $(echo "$out" | sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/rps=\1/p') $(echo "$out" | grep -o '[0-9]* succeeded, [0-9]* failed, [0-9]* errored' | head -1)"
}

echo "=== $D descriptor(s) per request; peak: $CONNS connections x $CONC in flight; half load: $CONNS x 2"
"${svc_cpu[@]}" target/release/ratelimit-bench noop --listen 127.0.0.1:0 >"$work/noop.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do noop=$(sed -n 's/^listening on //p' "$work/noop.log"); [ -n "$noop" ] && break; sleep 0.1; done
bench "noop    peak" "$noop" "$CONC"

start_service BACKEND_TYPE=memory
bench "memory  peak" "$grpc" "$CONC"
bench "memory  half" "$grpc" 2
bench "memory  token_bucket peak" "$grpc" "$CONC" bench_tb
h2bench "memory  h2load hot key peak" "$grpc"
kill "$svc"; wait "$svc" 2>/dev/null || true

start_service BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$single"
redis-cli -p "$single" config resetstat >/dev/null
bench "redis   peak" "$grpc" "$CONC"
bench "redis   half" "$grpc" 2
calls=$(redis-cli -p "$single" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p')
other=$(redis-cli -p "$single" info commandstats | grep -E '^cmdstat_(incrby|expire|get|set):' | grep -v evalsha | tr '\n' ' ')
echo "redis   commands: evalsha=$calls (inside scripts: $other)"
bench "redis   token_bucket peak" "$grpc" "$CONC" bench_tb
if command -v h2load >/dev/null && [ "$D" = 1 ]; then
    h2bench "redis   h2load hot key peak" "$grpc"
    counted=0
    for k in $(redis-cli -p "$single" --scan --pattern 'bench_key_h2load_*'); do
        counted=$((counted + $(redis-cli -p "$single" get "$k")))
    done
    echo "redis   h2load hot key: $counted hits counted in Redis (warm-up included)"
fi
kill "$svc"; wait "$svc" 2>/dev/null || true

start_service BACKEND_TYPE=redis REDIS_TYPE=cluster REDIS_URL="$(printf '127.0.0.1:%s,' "${cports[@]:0:3}" | sed 's/,$//')"
bench "cluster peak" "$grpc" "$CONC"
bench "cluster half" "$grpc" 2
bench "cluster token_bucket peak" "$grpc" "$CONC" bench_tb
kill "$svc"; wait "$svc" 2>/dev/null || true

sha=$(redis-cli -p "$single" script load "$(cat src/store/redis/single_keys.lua src/store/redis/limits.lua)")
# One group of one original counter in the compact layout: count, n=1,
# then cost and TTL (see the script's header).
rb=$("${other_cpu[@]}" redis-benchmark -p "$single" -c 64 -n 300000 -r 10000 -q \
    evalsha "$sha" 1 "bench_key_v__rand_int___0" 1 count 1 1 60 | tr '\r' '\n' | tail -1)
echo "redis-benchmark (same script, 64 clients): $rb"
