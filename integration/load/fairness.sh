#!/usr/bin/env bash
# Heavy callers beside a light one: how much a client sending large
# requests back to back slows a client sending small ones, on the memory
# store and on one Redis, on loopback only, bounded in time (about 3
# minutes with the defaults).
#
#   integration/load/fairness.sh [DURATION]        (default 5s)
#
# The light caller: one connection, one request in flight, an open loop of
# LIGHT_RPS (default 100) one-descriptor requests a second (a request every
# 10 ms), uniform over 1,000 values. Each heavy caller: a process of its own
# (ratelimit-bench), one connection, one request in flight, back to back
# (closed loop), HEAVY descriptors per request (100, 1,000 = the default
# REQUEST_MAX_DESCRIPTORS), uniform over 100,000 values each. Every limit
# is far above the load, so everything is admitted and each request does
# all its work. Rows: the light caller's p50 / p99 / p99.9 alone and beside
# 1, 2 and 4 heavy callers, the ratio of its p99 to its p99 alone, and the
# heavy callers' requests a second (each, and what one did alone). PIN=1
# pins the service to core 0 and the load tools and Redis to core 1.
# SIZES (default "100 1000"), COUNTS (default "1 2 4") and STORES (default
# "memory redis") narrow the rows. A heavy caller's "alone" figure is its
# second run alone, on keys the first one made.
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-5s}
LIGHT_RPS=${LIGHT_RPS:-100}

. integration/load/redis_servers.sh
read -r rport <<<"$(free_ports 1)"
start_redis "$rport"
root="$work/runtime"
mkdir -p "$root/ratelimit/config"
# The light caller's rule, and one for each of a heavy request's
# descriptors (ratelimit-bench names them heavy_0 .. heavy_999).
python3 - "$root/ratelimit/config/fair.yaml" <<'PY'
import sys
rule = "    rate_limit: {unit: minute, requests_per_unit: 4000000000}\n"
with open(sys.argv[1], "w") as f:
    f.write("domain: fair\ndescriptors:\n  - key: light\n" + rule)
    for i in range(1000):
        f.write(f"  - key: heavy_{i}\n" + rule)
PY
. integration/load/service.sh

bench() { "${other_cpu[@]}" target/release/ratelimit-bench run --target "$grpc" --domain fair "$@" | tail -1; }
light() { bench --connections 1 --concurrency 1 --rps "$LIGHT_RPS" --duration "$DURATION" --warmup 1s \
    --keys uniform:1000 --entries light; }
heavy() { # DESCRIPTORS SECONDS
    bench --connections 1 --concurrency 1 --duration "$2s" --warmup 0s --descriptors "$1" \
        --keys uniform:100000 --entries heavy
}
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d['$2'])" "$1"; }
seconds=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(ms|s|m)?', sys.argv[1]); v=int(m.group(1)); u=m.group(2) or 's'; print(max(1, v // 1000 if u == 'ms' else v * 60 if u == 'm' else v))" "$DURATION")

run_store() { # NAME extra env...
    local name=$1; shift
    start_service "$@"
    pids+=("$svc")
    local alone p99_alone
    alone=$(light)
    p99_alone=$(field "$alone" p99_us)
    printf '%-6s %-7s %-6s %8s %8s %8s %6s %14s %14s\n' store heavy size p50_us p99_us p999_us ratio heavy_rps_each heavy_rps_alone
    printf '%-6s %-7s %-6s %8d %8d %8d %6s %14s %14s\n' "$name" 0 - "$(field "$alone" p50_us)" "$p99_alone" \
        "$(field "$alone" p999_us)" 1.00 - -
    for size in ${SIZES:-100 1000}; do
        local solo
        heavy "$size" "$seconds" >/dev/null
        solo=$(field "$(heavy "$size" "$seconds")" rps)
        for n in ${COUNTS:-1 2 4}; do
            local out=() hp=() i
            for i in $(seq "$n"); do
                # Each heavy caller runs past the light one's warm-up and span.
                heavy "$size" $((seconds + 2)) >"$work/heavy.$i" &
                hp+=($!)
            done
            sleep 0.5
            local l
            l=$(light)
            for p in "${hp[@]}"; do wait "$p"; done
            local each
            each=$(python3 -c "
import json, sys
rps = [json.loads(open(f).read().strip().splitlines()[-1])['rps'] for f in sys.argv[1:]]
print('%.0f' % (sum(rps) / len(rps)))" $(for i in $(seq "$n"); do echo "$work/heavy.$i"; done))
            printf '%-6s %-7s %-6s %8d %8d %8d %6.2f %14s %14.0f\n' "$name" "$n" "$size" "$(field "$l" p50_us)" \
                "$(field "$l" p99_us)" "$(field "$l" p999_us)" \
                "$(python3 -c "print($(field "$l" p99_us) / max(1, $p99_alone))")" "$each" "$solo"
        done
    done
    kill "$svc" 2>/dev/null || true
    wait "$svc" 2>/dev/null || true
}

echo "=== a light caller at $LIGHT_RPS/s beside heavy callers; $DURATION per row; PIN=$PIN"
for store in ${STORES:-memory redis}; do
    case $store in
        memory) run_store memory BACKEND_TYPE=memory ${EXTRA_ENV:-} ;;
        redis) run_store redis BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$rport" ;;
    esac
done
