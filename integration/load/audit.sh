#!/usr/bin/env bash
# Load test of the decision audit's cost: the same load with
# DECISION_AUDIT_SAMPLE at 0 (off), 0.01 and 1, on the memory store and on
# one Redis, in alternating rounds, one run, loopback only, bounded in time
# (about a minute). Starts its own redis-server on a free port.
#
#   integration/load/audit.sh [DURATION]        (default 5s)
#
# The rule is the original's fixed window, 10,000 per hour (audited: at
# most DECISION_AUDIT_MAX_LIMIT); the load is uniform over 1,000 keys, so
# every key stays under its limit and each audited key's reference holds one
# entry per request. Reports req/s, p50 and p99 per row, req/s as a share of
# the unaudited row of the same store, and after the Redis rows the memory
# Redis gives one reference key (MEMORY USAGE over its entries).
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-5s}
CONNS=${CONNS:-2}
CONC=${CONC:-32}
ROUNDS=${ROUNDS:-2}

. integration/load/redis_servers.sh
read -r port <<<"$(free_ports 1)"
start_redis "$port"

root="$work/runtime"
mkdir -p "$root/ratelimit/config"
cp integration/load/config/bench_audit.yaml "$root/ratelimit/config/"
. integration/load/service.sh

declare -A base
row() { # store sample
    local out rps
    out=$(target/release/ratelimit-bench run --target "$grpc" --connections "$CONNS" --concurrency "$CONC" \
        --duration "$DURATION" --warmup 1s --descriptors 1 --keys uniform:1000 --domain sampled | tail -1)
    rps=$(echo "$out" | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["rps"]))')
    [ "$2" = 0 ] && base[$1]=$rps
    echo "$1 sample=$2 $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps=%d p50_us=%d p99_us=%d errors=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["errors"]))') \
vs_off=$(python3 -c "print('%.3f' % ($rps / ${base[$1]}))")"
}

echo "=== uniform over 1,000 keys; $CONNS connections x $CONC in flight; $DURATION per row; $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
    echo "--- round $round"
    for store in memory redis; do
        # "1,slow": every key audited, with STORE_TIMEOUT=1s: Redis saturates
        # at sample 1, and past the default 50 ms deadline the breaker turns
        # the queueing into errors; this row shows the throughput alone.
        for sample in 0 0.01 1 1,slow; do
            [ "$store" = memory ] && [ "$sample" = 1,slow ] && continue
            redis-cli -p "$port" flushall >/dev/null
            local_env=(DECISION_AUDIT_SAMPLE="${sample%,slow}")
            [ "$sample" = 1,slow ] && local_env+=(STORE_TIMEOUT=1s)
            if [ "$store" = memory ]; then
                start_service BACKEND_TYPE=memory "${local_env[@]}"
            else
                start_service BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$port" "${local_env[@]}"
            fi
            row "$store" "$sample"
            if [ "$store" = redis ] && [ "$sample" = 1,slow ] && [ "$round" = 1 ]; then
                key=$(redis-cli -p "$port" --scan --pattern '*:audit:*' | awk 'NR == 1')
                entries=$(redis-cli -p "$port" zcard "$key")
                bytes=$(redis-cli -p "$port" memory usage "$key")
                counters=$(redis-cli -p "$port" --scan --pattern 'sampled_key_*' | awk 'END {print NR}')
                references=$(redis-cli -p "$port" --scan --pattern '*:audit:*' | awk 'END {print NR}')
                echo "redis reference $key: $entries entries, $bytes B ($(python3 -c "print('%.1f' % ($bytes / max(1, $entries)))") B an entry); $references references for $counters counters"
            fi
            kill "$svc"; wait "$svc" 2>/dev/null || true
        done
    done
done
