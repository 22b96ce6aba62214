#!/usr/bin/env bash
# The measurements behind docs/sizing.md, per algorithm, on one Redis, on
# loopback only, bounded in time (about 2 minutes with the defaults).
#
#   integration/load/sizing.sh [DURATION]        (default 5s)
#
# For each algorithm (the original's window, fixed_window, sliding_window,
# token_bucket, sliding_log), ratelimit-bench drives the service on Redis
# at 4 connections x 16 in flight, one descriptor per request, uniform over
# KEYS (default 100,000) values, every request admitted, and reports:
# decisions/s, the service's CPU per decision, Redis's CPU per decision,
# script calls per second and decisions per call (INFO commandstats). The
# CPU times come from /proc, so they hold whatever else shares the cores;
# Redis's figure is what one primary spends per decision, the basis of how
# many primaries a load needs. PIN=1 pins the service to core 0 and the
# load tool and Redis to core 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-5s}
KEYS=${KEYS:-100000}

. integration/load/redis_servers.sh
read -r rport <<<"$(free_ports 1)"
start_redis "$rport"
root="$work/runtime"
mkdir -p "$root/ratelimit/config"
cat >"$root/ratelimit/config/size.yaml" <<'YAML'
domain: size
descriptors:
  - key: original
    rate_limit: {unit: minute, requests_per_unit: 4000000000}
  - key: fixed_window
    rate_limit: {algorithm: fixed_window, unit: minute, requests_per_unit: 4000000000}
  - key: sliding_window
    rate_limit: {algorithm: sliding_window, unit: minute, requests_per_unit: 4000000000}
  - key: token_bucket
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 4000000000}
  - key: sliding_log
    rate_limit: {algorithm: sliding_log, unit: minute, requests_per_unit: 1000}
YAML
. integration/load/service.sh

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
redis_pid=$(redis-cli -p "$rport" info server | tr -d '\r' | sed -n 's/^process_id://p')
calls() { redis-cli -p "$rport" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p'; }

start_service BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$rport"
pids+=("$svc")
echo "=== 4x16 in flight, 1 descriptor, uniform over $KEYS keys, $DURATION per algorithm; PIN=$PIN"
for algorithm in original fixed_window sliding_window token_bucket sliding_log; do
    s0=$(cpu_ticks "$svc"); r0=$(cpu_ticks "$redis_pid"); c0=$(calls); c0=${c0:-0}
    t0=$(date +%s.%N)
    out=$("${other_cpu[@]}" target/release/ratelimit-bench run --target "$grpc" --connections 4 --concurrency 16 \
        --duration "$DURATION" --warmup 1s --keys "uniform:$KEYS" --entries "$algorithm" --domain size | tail -1)
    t1=$(date +%s.%N)
    s1=$(cpu_ticks "$svc"); r1=$(cpu_ticks "$redis_pid"); c1=$(calls)
    echo "$out" | python3 -c "
import json, sys
d = json.load(sys.stdin)
wall = $t1 - $t0
# Every request of the run (warm-up included) against every tick.
n = d['rps'] * wall
calls = $c1 - $c0
print('%-15s rps=%d p99_us=%d ok=%d errors=%d service_us=%.2f redis_us=%.2f calls_per_s=%d decisions_per_call=%.1f' % (
    '$algorithm', d['rps'], d['p99_us'], d['ok'], d['errors'],
    ($s1 - $s0) * 1e4 / n, ($r1 - $r0) * 1e4 / n, calls / wall, n / max(calls, 1)))"
done
echo "redis used_memory: $(redis-cli -p "$rport" info memory | tr -d '\r' | sed -n 's/^used_memory_human://p'), keys: $(redis-cli -p "$rport" dbsize)"
