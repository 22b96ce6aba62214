#!/usr/bin/env bash
# One rule's flood of unique values against another rule's counts, on the
# memory store and on Redis under each eviction policy.
#
#   integration/load/key_flood.sh [FLOOD_SECONDS]   (default 20)
#
# Rules (integration/load/config/flood.yaml): `flood`, 1 an hour per value,
# flooded by the bench at its full closed-loop rate (2 connections x 32 in
# flight) with values from 10^7; `quiet`, 300 an hour over 10 values, sent
# at 200 requests/s from the bench in three phases:
#   before   5 s, before the flood (about 100 a value)
#   during   5 s, once the flood has filled the store (about 100 more)
#   after    7.5 s at 200/s once the flood ends (about 150 a value): if the
#            quiet counts were kept, about 100 a value are admitted and 50
#            refused (~1000 ok, ~500 over); if the flood reset them, all
# Each phase prints ok, over, errors and p99; each row then what the store
# held:
#   memory   MEMORY_MAX_KEYS=100000; /keys: keys per rule, evictions; RSS
#   redis    maxmemory 16mb, one policy a row (volatile-ttl, volatile-lru,
#            allkeys-lru, volatile-lfu, allkeys-lfu, noeviction):
#            used_memory, evicted_keys, the quiet keys left; and the
#            service's store failures (the quiet rule fails open to its
#            full limit, so a store that refuses writes shows as `ok`)
# The flooding rule's admissions are printed beside its bound on memory:
# at most one per value it touched plus one per eviction of its keys (with
# a limit of 1, admitted = its keys held + its keys evicted).
set -euo pipefail
cd "$(dirname "$0")/../.."
. integration/load/redis_servers.sh
flood_s=${1:-20}
root="$work/runtime"
mkdir -p "$root/current/ratelimit/config"
cp integration/load/config/flood.yaml "$root/current/ratelimit/config/"

bench() { # label, then bench arguments: one line of the JSON report's numbers
    local label=$1; shift
    "${other_cpu[@]}" target/release/ratelimit-bench run --target "$grpc" "$@" 2>/dev/null | tail -1 |
        python3 -c "import json,sys; r=json.load(sys.stdin); print('  %-8s ok %6d  over %6d  errors %5d  other %5d  p99 %6d us' % ('$label', r['ok'], r['over_limit'], r['errors'], r['other_code'], r['p99_us']))"
}
quiet() { bench "$1" --entries quiet --keys uniform:10 --rps 200 --warmup 0s --duration "$2"; }

start_service() { # env assignments for the service
    env -i PATH="$PATH" USE_STATSD=false EXPIRATION_JITTER_MAX_SECONDS=0 \
        RUNTIME_ROOT="$root/current" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
        HOST=127.0.0.1 PORT=0 DEBUG_HOST=127.0.0.1 DEBUG_PORT=0 GRPC_HOST=127.0.0.1 GRPC_PORT=0 "$@" \
        "${svc_cpu[@]}" target/release/ratelimit 2>"$work/svc.log" &
    svc=$!
    pids+=("$svc")
    grpc=""
    for _ in $(seq 100); do
        grpc=$(sed -n "s/.*Listening for gRPC on '\([^']*\)'.*/\1/p" "$work/svc.log")
        [ -n "$grpc" ] && break
        sleep 0.1
    done
    [ -n "$grpc" ] || { cat "$work/svc.log" >&2; exit 1; }
    debug=$(sed -n "s/.*debug on '\([^']*\)'.*/\1/p" "$work/svc.log" | head -1)
}

stat() { curl -s "http://$debug/stats" | sed -n "s/^$1: //p" | head -1; }

row() { # label, flood values, then the service's environment
    local label=$1 values=$2; shift 2
    echo "=== $label"
    start_service "$@"
    quiet before 5s
    "${other_cpu[@]}" target/release/ratelimit-bench run --target "$grpc" --entries flood \
        --keys "uniform:$values" --connections 2 --concurrency 32 --warmup 0s --duration "${flood_s}s" \
        2>/dev/null | tail -1 >"$work/flood.json" &
    local flood=$!
    sleep $((flood_s / 2))
    quiet during 5s
    rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$svc/status")
    wait "$flood"
    python3 -c "import json; r=json.load(open('$work/flood.json')); print('  flood    requests %d  ok %d  over %d  errors %d  %.0f req/s' % (r['requests'], r['ok'], r['over_limit'], r['errors'], r['rps']))"
    bench after --entries quiet --keys uniform:10 --rps 200 --warmup 0s --duration 7500ms
    echo "  service  RSS during the flood ${rss_kb} kB; store failures $(stat ratelimit.store.failure || true)"
    if [[ "$label" = memory* ]]; then
        curl -s "http://$debug/keys" | python3 -c "
import json, sys
k = json.load(sys.stdin)
print('  store    %d of %d keys' % (k['keys'], k['max_keys']))
for r in k['rules']:
    print('  rule     %-14s keys %7d  evictions %8d' % (r['rule'], r['keys'], r['evictions']))
fl = [r for r in k['rules'] if r['rule'] == 'bench.flood'] or [{'keys': 0, 'evictions': 0}]
f = json.load(open('$work/flood.json'))
# Limit 1 an hour: each key admits its first hit; an evicted value's key
# starts again. So admitted = keys created = held + evicted, and the
# over-admission beyond one per value is at most the evictions.
print('  bound    flood admitted %d; its keys held + evicted %d; over-admission at most %d (its evictions)' % (f['ok'], fl[0]['keys'] + fl[0]['evictions'], fl[0]['evictions']))
"
    fi
    kill "$svc" 2>/dev/null || true
    wait "$svc" 2>/dev/null || true
}

# The control: the same flood over 10^4 values, which never fill the store,
# so that what the machine's two cores lose to the flood alone shows.
row "memory, control: 10^4 flood values" 10000 BACKEND_TYPE=memory MEMORY_MAX_KEYS=100000
row memory 10000000 BACKEND_TYPE=memory MEMORY_MAX_KEYS=100000

for policy in volatile-ttl volatile-lru allkeys-lru volatile-lfu allkeys-lfu noeviction; do
    read -r port <<<"$(free_ports 1)"
    start_redis "$port" --maxmemory 16mb --maxmemory-policy "$policy"
    rpid=${pids[-1]}
    row "redis, $policy" 10000000 BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$port"
    info=$(redis-cli -p "$port" info | tr -d '\r')
    quiet_left=$(redis-cli -p "$port" --scan --pattern 'bench_quiet_*' | wc -l)
    echo "  redis    used_memory $(sed -n 's/^used_memory_human://p' <<<"$info"), keys $(redis-cli -p "$port" dbsize), evicted_keys $(sed -n 's/^evicted_keys://p' <<<"$info"), quiet keys left $quiet_left of 10"
    kill "$rpid" 2>/dev/null || true
done
