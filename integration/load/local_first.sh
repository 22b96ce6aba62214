#!/usr/bin/env bash
# Load test of local-first windows (docs/local-first.md) against the memory
# store and the synchronous Redis path, in one run, on loopback only,
# bounded in time (about 2 minutes).
#
#   integration/load/local_first.sh [DURATION]
#
# ratelimit-bench over 10,000 keys far from their limits (1 descriptor per
# request), the same client, connections and concurrency for each row:
# memory; Redis (one server) synchronous; Redis with
# LOCAL_FIRST_SYNC_INTERVAL=50ms; then the same two on the 6-node Cluster.
# Each Redis row prints the script calls per decision (INFO commandstats
# of the primaries). Then 3 local-first instances on the Cluster, 100,000
# keys, an open loop of 10,000 requests a second in all: script calls per
# decision, and the resident memory per view. PIN=1 pins the service to
# CPU 0 and the rest to CPU 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-5s}
CONNS=${CONNS:-2}
CONC=${CONC:-32}

. integration/load/redis_servers.sh
read -r single <<<"$(free_ports 1)"
start_redis "$single"
start_cluster
primaries=("${cports[@]:0:3}")
seeds=$(printf '127.0.0.1:%s,' "${primaries[@]}" | sed 's/,$//')

root="$work/runtime"
mkdir -p "$root/ratelimit/config"
cp integration/load/config/bench.yaml "$root/ratelimit/config/"

. integration/load/service.sh

script_calls() { # ports...
    local total=0 p n
    for p in "$@"; do
        n=$(redis-cli -p "$p" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\).*/\1/p')
        total=$((total + ${n:-0}))
    done
    echo "$total"
}

bench() { # label target keys [extra flags...]
    local label=$1 target=$2 keys=$3
    shift 3
    "${other_cpu[@]}" target/release/ratelimit-bench run --target "$target" --connections "$CONNS" \
        --concurrency "$CONC" --duration "$DURATION" --warmup 1s --keys "uniform:$keys" "$@" | tail -1 >"$work/last.json"
    echo "$label $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("rps=%d p50_us=%d p99_us=%d errors=%d requests=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["errors"], d["requests"]))' "$work/last.json")"
}

requests() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["requests"])' "$work/last.json"; }
rps() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["rps"])' "$work/last.json"; }

echo "=== 10,000 keys, $CONNS connections x $CONC in flight, $DURATION a row"
start_service BACKEND_TYPE=memory
bench "memory                  " "$grpc" 10000
memory_rps=$(rps)
kill "$svc"; wait "$svc" 2>/dev/null || true

row() { # label ports... -- env...
    local label=$1 ports=() before after n
    shift
    while [ "$1" != "--" ]; do ports+=("$1"); shift; done
    shift
    start_service "$@"
    sleep 2.5 # the instance count
    before=$(script_calls "${ports[@]}")
    bench "$label" "$grpc" 10000
    sleep 0.2
    after=$(script_calls "${ports[@]}")
    n=$(requests)
    echo "$label script calls: $((after - before)) for $n decisions ($(python3 -c "print('%.4f' % (($after - $before) / max($n, 1)))") a decision); rps $(python3 -c "print('%.2f' % ($(rps) / $memory_rps))") x memory"
    kill "$svc"; wait "$svc" 2>/dev/null || true
}

row "redis synchronous       " "$single" -- BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$single"
row "redis local-first 50ms  " "$single" -- BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$single" LOCAL_FIRST_SYNC_INTERVAL=50ms
row "cluster synchronous     " "${primaries[@]}" -- BACKEND_TYPE=redis REDIS_TYPE=cluster REDIS_URL="$seeds"
row "cluster local-first 50ms" "${primaries[@]}" -- BACKEND_TYPE=redis REDIS_TYPE=cluster REDIS_URL="$seeds" LOCAL_FIRST_SYNC_INTERVAL=50ms

echo "=== 3 local-first instances on the Cluster, 100,000 keys, 10,000 requests/s in all"
targets=()
svcs=()
for i in 0 1 2; do
    start_service BACKEND_TYPE=redis REDIS_TYPE=cluster REDIS_URL="$seeds" LOCAL_FIRST_SYNC_INTERVAL=50ms
    svcs+=("$svc")
    targets+=("$grpc")
    cp "$work/svc.log" "$work/svc$i.log"
done
sleep 2.5
rss_before=0
for s in "${svcs[@]}"; do rss_before=$((rss_before + $(awk '/VmRSS/ {print $2}' "/proc/$s/status"))); done
before=$(script_calls "${primaries[@]}")
outs=()
for i in 0 1 2; do
    "${other_cpu[@]}" target/release/ratelimit-bench run --target "${targets[$i]}" --connections 1 --concurrency 16 \
        --duration "${FLEET_DURATION:-20s}" --warmup 0s --keys uniform:100000 --seed "$((i + 1))" --rps 3333 | tail -1 >"$work/fleet$i.json" &
    outs+=($!)
done
for p in "${outs[@]}"; do wait "$p"; done
sleep 0.2
after=$(script_calls "${primaries[@]}")
rss_after=0
for s in "${svcs[@]}"; do rss_after=$((rss_after + $(awk '/VmRSS/ {print $2}' "/proc/$s/status"))); done
python3 - "$work" "$before" "$after" "$rss_before" "$rss_after" <<'EOF'
import json, sys
work, before, after, rss0, rss1 = sys.argv[1], *map(int, sys.argv[2:])
runs = [json.load(open(f"{work}/fleet{i}.json")) for i in range(3)]
n = sum(r["requests"] for r in runs)
rps = sum(r["rps"] for r in runs)
p99 = max(r["p99_us"] for r in runs)
calls = after - before
print(f"fleet: {n} decisions at {rps:.0f}/s in all, p99 {p99} us (worst instance); "
      f"{calls} script calls = {calls / max(n, 1):.4f} a decision")
import math
# Distinct keys an instance drew: K (1 - e^(-n/K)) for n uniform draws of K.
per = n / 3
keys = 100_000 * (1 - math.exp(-per / 100_000))
print(f"fleet: resident memory grew {(rss1 - rss0) / 1024:.1f} MiB over 3 instances, about {keys:.0f} distinct keys each "
      f"= {(rss1 - rss0) * 1024 / max(keys * 3, 1):.0f} bytes a view (allocator slack included)")
EOF
for s in "${svcs[@]}"; do kill "$s" 2>/dev/null || true; done
