#!/usr/bin/env bash
# Load test of one hot descriptor on a 6-node Redis Cluster (3 primaries,
# 3 replicas), against the in-memory store, in one run, on loopback only,
# bounded in time (about a minute). Starts its own cluster on free ports.
#
#   integration/load/hotkeys.sh [DURATION]        (default 5s)
#
# Every request carries the same descriptor (ratelimit-bench --keys
# uniform:1). Rows:
#   memory         the in-memory store (the ceiling leasing aims at)
#   cluster plain  the rule as the original has it: one key, one primary
#   cluster script the rule with `algorithm: fixed_window`: the script that
#                  sharded and leased rules use, on one key
#   cluster shards the rule with `shards: 8`
#   cluster lease  the rule with `lease: true`
# For each: req/s, p50, p99, script calls per decision (EVALSHA summed over
# the primaries from INFO commandstats, over the decisions the service
# counted, warm-up included), the calls per primary, and req/s as a share
# of the memory row.
#
# Then overload: one hot descriptor offered 5x its limit (--rps 10000
# against 2,000 per second, open loop), per leasable algorithm, plain
# against `lease: true` (bench_overload*.yaml): req/s, p50, p99, script
# calls per decision, and admitted (ok) against the model's limit ×
# duration (the warm-up spends a token bucket's burst).
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-5s}
CONNS=${CONNS:-2}
CONC=${CONC:-32}

. integration/load/redis_servers.sh
start_cluster
# The primaries: the nodes that own slots.
primaries=$(redis-cli -p "${cports[0]}" cluster nodes | awk 'NF >= 9 {split($2, a, "@"); split(a[1], b, ":"); print b[2]}')

root="$work/runtime"
mkdir -p "$root/ratelimit/config"
cp integration/load/config/bench.yaml integration/load/config/bench_sharded.yaml \
    integration/load/config/bench_leased.yaml integration/load/config/bench_fw.yaml \
    integration/load/config/bench_overload.yaml integration/load/config/bench_overload_leased.yaml \
    "$root/ratelimit/config/"
. integration/load/service.sh

script_calls() { # the EVALSHA calls of each primary, space-separated
    for p in $primaries; do
        redis-cli -p "$p" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p' | grep . || echo 0
    done | tr '\n' ' '
}

decisions() { # DOMAIN: the decisions the service counted for its rule
    local debug
    debug=$(sed -n "s/.*Listening for debug on '\([^']*\)'.*/\1/p" "$work/svc.log")
    curl -s "http://$debug/stats" | sed -n "s/^ratelimit.service.rate_limit.$1.key.total_hits: //p"
}

memory_rps=""
row() { # label domain
    local out rps
    out=$(target/release/ratelimit-bench run --target "$grpc" --connections "$CONNS" --concurrency "$CONC" \
        --duration "$DURATION" --warmup 1s --descriptors 1 --keys uniform:1 --domain "$2" | tail -1)
    rps=$(echo "$out" | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["rps"]))')
    [ -z "$memory_rps" ] && memory_rps=$rps
    local calls="" per=""
    if [ "$1" != memory ]; then
        calls=$(script_calls)
        local total; total=$(echo "$calls" | tr ' ' '\n' | awk '{s+=$1} END {print s}')
        per=$(python3 -c "print('%.4f' % ($total / max(1, $(decisions "$2"))))")
    fi
    echo "$1 $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps=%d p50_us=%d p99_us=%d errors=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["errors"]))') \
calls_per_decision=${per:-0} calls_per_primary=[${calls% }] vs_memory=$(python3 -c "print('%.2f' % ($rps / $memory_rps))")"
}

reset() { for p in $primaries; do redis-cli -p "$p" config resetstat >/dev/null; done; }

echo "=== one hot descriptor; $CONNS connections x $CONC in flight; $DURATION per row"
start_service BACKEND_TYPE=memory
row "memory        " bench
kill "$svc"; wait "$svc" 2>/dev/null || true

url=$(printf '127.0.0.1:%s,' "${cports[@]:0:3}" | sed 's/,$//')
for r in "plain bench" "script bench_fw" "shards bench_sharded" "lease bench_leased"; do
    set -- $r
    start_service BACKEND_TYPE=redis REDIS_TYPE=cluster REDIS_URL="$url"
    reset
    row "cluster $1" "$2"
    kill "$svc"; wait "$svc" 2>/dev/null || true
done

OVER_LIMIT=2000
OVER_RPS=$((5 * OVER_LIMIT))
echo "=== one hot descriptor offered 5x its limit: --rps $OVER_RPS against $OVER_LIMIT/s; $DURATION per row"
secs=$(python3 -c "import re,sys; s=sys.argv[1]; print(float(re.sub('s$','',s)) if s.endswith('s') and not s.endswith('ms') else 0)" "$DURATION")
for alg in fixed_window sliding_window token_bucket; do
    for r in "plain bench_overload" "lease bench_overload_leased"; do
        set -- $r
        start_service BACKEND_TYPE=redis REDIS_TYPE=cluster REDIS_URL="$url"
        reset
        out=$(target/release/ratelimit-bench run --target "$grpc" --connections "$CONNS" --concurrency "$CONC" \
            --duration "$DURATION" --warmup 1s --rps "$OVER_RPS" --descriptors 1 --entries "$alg" --keys hot \
            --domain "$2" | tail -1)
        debug=$(sed -n "s/.*Listening for debug on '\([^']*\)'.*/\1/p" "$work/svc.log")
        hits=$(curl -s "http://$debug/stats" | sed -n "s/^ratelimit.service.rate_limit.$2.$alg.total_hits: //p")
        total=$(script_calls | tr ' ' '\n' | awk '{s+=$1} END {print s}')
        echo "$alg $1 $(echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
model = float(sys.argv[1]) * float(sys.argv[2])
print("rps=%d p50_us=%d p99_us=%d errors=%d ok=%d model=%d ok_vs_model=%.3f" % (
    d["rps"], d["p50_us"], d["p99_us"], d["errors"], d["ok"], model, d["ok"] / model))' "$OVER_LIMIT" "$secs") \
calls_per_decision=$(python3 -c "print('%.4f' % ($total / max(1, ${hits:-0})))")"
        kill "$svc"; wait "$svc" 2>/dev/null || true
    done
done
