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
# Then refunds and in-flight slots, one decision per group, µs of Redis CPU
# per script call (a call is what one request costs one node):
#   counter take           the original's counter, a count-same group
#   counter take + refund  the same key taken, then given back
#                          (is_negative_hits) in a second group of the call
#   bucket take            a token bucket (GCRA) take, a commit group
#   bucket take + refund   taken, then given back in the same call
#   slot take              an in-flight slot (a sorted-set member) taken on
#                          a key of its own (10^7 keys: few repeat)
#   slot take + release    taken, then released in the same call, on one key
# (redis-benchmark draws each __rand_int__ apart, so a call that takes and
# gives back names one fixed key.)
# A refund's own cost is its row less the take's.
#
# Rows alternate over ROUNDS rounds (default 3); each prints µs of Redis
# CPU per counter or per call. Usage: integration/load/script_cost.sh
# [CALLS] (script calls per row, default 100,000).
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
per_unit() { # unit, label, units, keys, then the redis-benchmark arguments
    local unit=$1 label=$2 units=$3 keyspace=$4; shift 4
    local t0 t1
    t0=$(cpu)
    redis-benchmark -p "$port" -c 8 -r "$keyspace" -q "$@" >"$work/bench.out" 2>&1
    t1=$(cpu)
    grep -qi err "$work/bench.out" && { cat "$work/bench.out" >&2; exit 1; }
    python3 -c "print('%-22s %.2f us of Redis CPU per $unit' % ('$label', ($t1 - $t0) * 1e6 / $tick / $units))"
}
per_counter() { per_unit counter "$1" "$2" 10000 "${@:3}"; }
per_call() { # label, key (one for every item), items, then the script's groups
    local label=$1 key=$2 items=$3; shift 3
    local keys=()
    for _ in $(seq "$items"); do keys+=("$key"); done
    per_unit call "$label" "$calls" 10000000 -n "$calls" \
        evalsha "$sha" 1 "$key" "$items" "${keys[@]}" "$@"
}
hour_us=3600000000
many=1000000000
decisions() {
    # redis-benchmark draws each __rand_int__ on its own, so a call that
    # takes and gives back names one fixed key; a take alone names the same
    # (a bucket that never runs dry), except a slot's, on fresh keys.
    local hot=d:{hot}:k
    per_call "counter take" "$hot" 1 1 count-same 1 1 60 300
    per_call "counter take + refund" "$hot" 2 2 count-same 1 1 60 300 commit "" 0 1 oc 10 60 300 1 2
    per_call "bucket take" "$hot" 1 1 commit "" 0 1 tb "$many" "$hour_us" "$many" 1 1
    per_call "bucket take + refund" "$hot" 2 2 commit "" 0 1 tb "$many" "$hour_us" "$many" 1 1 commit "" 0 1 tb "$many" "$hour_us" "$many" 1 2
    per_call "slot take" "d:{__rand_int__}:k" 1 1 commit n 0 1 cc 3 "$hour_us" 3 1 1
    per_call "slot take + release" "$hot" 2 2 commit n 0 1 cc 3 "$hour_us" 3 1 1 commit "" 0 1 cc 3 "$hour_us" 3 1 2
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
    decisions
done
