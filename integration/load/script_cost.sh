#!/usr/bin/env bash
# What Redis itself spends per counter, the service left out: one
# cluster-mode redis-server (no replica), driven by redis-benchmark at 8
# clients over 10,000 keys per counter, its CPU read from /proc.
#
#   INCRBY, pipelined      15 bare INCRBYs per round trip: the floor of any
#                          way to count one key (no expiry, no script)
#   script, G groups       one EVALSHA of the per-primary script
#                          (node_keys.lua + limits.lua) with 15 of the
#                          original's counters in G count-same groups: G = 1
#                          is a coalesced call of 10-descriptor requests
#                          whose counters share cost, TTL and jitter, G = 15
#                          one group per counter
#
# Rows alternate over ROUNDS rounds (default 3); each prints µs of Redis
# CPU per counter. Usage: integration/load/script_cost.sh [CALLS]
# (script calls per row, default 100,000).
set -euo pipefail
cd "$(dirname "$0")/../.."
. integration/load/redis_servers.sh
calls=${1:-100000}
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is required (redis-tools)" >&2; exit 1; }
read -r port <<<"$(free_ports 1 cluster)"
start_redis "$port" --cluster-enabled yes --cluster-config-file "$work/nodes-$port.conf"
redis-cli -p "$port" cluster addslotsrange 0 16383 >/dev/null
for _ in $(seq 100); do
    [ "$(redis-cli -p "$port" cluster info | tr -d '\r' | sed -n 's/^cluster_state://p')" = ok ] && break
    sleep 0.1
done
sha=$(redis-cli -p "$port" -x script load < <(cat src/store/redis/node_keys.lua src/store/redis/limits.lua))
pid=$(redis-cli -p "$port" info server | tr -d '\r' | sed -n 's/^process_id://p')
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
tick=$(getconf CLK_TCK)
per_counter() { # label, counters, then the redis-benchmark arguments
    local label=$1 counters=$2; shift 2
    local t0 t1
    t0=$(cpu)
    redis-benchmark -p "$port" -c 8 -r 10000 -q "$@" >"$work/bench.out" 2>&1
    t1=$(cpu)
    grep -qi err "$work/bench.out" && { cat "$work/bench.out" >&2; exit 1; }
    python3 -c "print('%-22s %.2f us of Redis CPU per counter' % ('$label', ($t1 - $t0) * 1e6 / $tick / $counters))"
}
# Fifteen keys on slots of their own, the original's form.
keys=()
for i in $(seq 1 15); do keys+=("many_key_${i}_v__rand_int___1733184000"); done
for round in $(seq 1 "${ROUNDS:-3}"); do
    echo "--- round $round"
    per_counter "INCRBY, pipelined" $((calls * 15)) -n $((calls * 15)) -P 15 incrby k___rand_int__ 1
    for groups in 1 5 15; do
        args=("$groups")
        for _ in $(seq 1 "$groups"); do args+=(count-same $((15 / groups)) 1 60 300); done
        per_counter "script, $groups groups" $((calls * 15)) -n "$calls" \
            evalsha "$sha" 1 "${keys[0]}" 15 "${keys[@]}" "${args[@]}"
    done
done
