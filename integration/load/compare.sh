#!/usr/bin/env bash
# Side-by-side benchmark of this service and another server that speaks the
# Envoy RLS v3 API, in one run, in alternating rounds, on loopback only,
# bounded in time (about 8 minutes with the defaults). Starts its own
# redis-server on a free port; both servers use it in their Redis mode.
#
#   integration/load/compare.sh [DURATION] [ROUNDS]      (default 5s, 2)
#
# The other server is given as commands, with placeholders filled in per
# run: {port} (the gRPC port to listen on), {http_port} (a second free
# port), {redis} (host:port of the Redis), {dir} (a directory holding
# ratelimit/config/*.yaml, the original's layout and ours, and
# limitador.yaml, Limitador's limits for the same descriptors):
#
#   PEER_NAME=original \
#   PEER_MEMORY_CMD='...' PEER_REDIS_CMD='docker run --network host -e REDIS_URL={redis} ...' \
#   integration/load/compare.sh
#
# or, for a Limitador built from Kuadrant/limitador with
# `cargo build --release -p limitador-server`, just
# LIMITADOR=/path/to/limitador-server. A mode whose command is empty is
# skipped. Ours also runs on a 3-primary Redis Cluster (CLUSTER=0 skips
# it; PEER_CLUSTER_CMD, with {redis} the seeds, adds the peer). PIN=1 pins each server to core 0 and the clients and Redis to
# core 1. OURS_ENV adds settings to this service (e.g. "GRPC_WORKERS=1").
#
# Same descriptors (domain bench, one entry `key`), same clients, same
# levels (connections x streams: 1x1, 4x16, 8x64):
#   h2load          one hot key (h2load sends one body): req/s, and the
#                   server's CPU time per request from /proc
#   ratelimit-bench uniform over 10,000 keys: req/s, p50, p99, p99.9
#   many            ratelimit-bench at 4x16 with 10 descriptors per request
#                   (domain many: ten key-only rules, uniform over 10,000
#                   keys each), beside the 1-descriptor bench row
#   paced           ratelimit-bench open loop at PACE requests/s (default
#                   4000, under every row's capacity) with 1 and with 10
#                   descriptors, at most 64 in flight: the latency a
#                   request's descriptors add, without the queueing that
#                   sets a closed loop's latency (PACE=0 skips it)
# and the no-op server (ratelimit-bench noop: the same gRPC stack, no
# decision; NOOP=0 skips it) as the ceiling of both,
# then a correctness run: 4x16 for 3 s on one key limited to 10,000 per
# hour (domain cmp): admitted against the limit, and errors. With MIXED=1,
# also mixed requests at 4x16 (domain mixed: an original window, a token
# bucket and a sliding window per request, uniform over 10,000 keys).
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-5s}
ROUNDS=${2:-2}
LEVELS=${LEVELS:-"1x1 4x16 8x64"}
PACE=${PACE:-4000}
command -v h2load >/dev/null || { echo "h2load is required (Debian: nghttp2-client)" >&2; exit 1; }

if [ -n "${LIMITADOR:-}" ]; then
    PEER_NAME=${PEER_NAME:-limitador}
    lim="$LIMITADOR -b 127.0.0.1 -p {port} -B 127.0.0.1 -P {http_port} {dir}/limitador.yaml"
    PEER_MEMORY_CMD=${PEER_MEMORY_CMD:-"$lim memory"}
    PEER_REDIS_CMD=${PEER_REDIS_CMD:-"$lim redis redis://{redis}"}
fi
PEER_NAME=${PEER_NAME:-peer}
PEER_MEMORY_CMD=${PEER_MEMORY_CMD:-}
PEER_REDIS_CMD=${PEER_REDIS_CMD:-}

. integration/load/redis_servers.sh
read -r rport <<<"$(free_ports 1)"
start_redis "$rport"

root="$work/runtime"
mkdir -p "$root/ratelimit/config"
cp integration/load/config/bench.yaml integration/load/config/mixed.yaml "$root/ratelimit/config/"
cat >"$root/ratelimit/config/cmp.yaml" <<'EOF'
domain: cmp
descriptors:
  - key: key
    rate_limit: {unit: hour, requests_per_unit: 10000}
EOF
# Ten rules, one per descriptor of a 10-descriptor request, for both.
{
    echo "domain: many"
    echo "descriptors:"
    for i in $(seq 0 9); do
        echo "  - key: key_$i"
        echo "    rate_limit: {unit: minute, requests_per_unit: 4000000000}"
    done
} >"$root/ratelimit/config/many.yaml"
for i in $(seq 0 9); do
    printf -- '- namespace: many\n  max_value: 4000000000\n  seconds: 60\n  conditions: []\n  variables: ["descriptors[%d].key_%d"]\n' "$i" "$i"
done >"$root/limitador-many.yaml"
cat >"$root/limitador.yaml" <<'EOF'
- namespace: bench
  max_value: 4000000000
  seconds: 60
  conditions: []
  variables: ["descriptors[0].key"]
- namespace: cmp
  max_value: 10000
  seconds: 3600
  conditions: []
  variables: ["descriptors[0].key"]
EOF
cat "$root/limitador-many.yaml" >>"$root/limitador.yaml"
CLUSTER=${CLUSTER:-1}
PEER_CLUSTER_CMD=${PEER_CLUSTER_CMD:-}
if [ "$CLUSTER" = 1 ]; then
    start_cluster
    seeds=$(printf '127.0.0.1:%s,' "${cports[@]:0:3}" | sed 's/,$//')
fi
. integration/load/service.sh

# One gRPC-framed ShouldRateLimit request (domain bench, key=h2load).
python3 integration/load/h2load_body.py "$work/body.bin"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
wait_port() { # port
    for _ in $(seq 100); do
        python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 0.2)" "$1" 2>/dev/null && return
        sleep 0.1
    done
    echo "nothing listens on $1" >&2; exit 1
}

start() { # server store: sets $pid and $target
    if [ "$1" = ours ]; then
        local extra=(BACKEND_TYPE=memory)
        [ "$2" = redis ] && extra=(BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$rport")
        [ "$2" = cluster ] && extra=(BACKEND_TYPE=redis REDIS_TYPE=cluster REDIS_URL="$seeds")
        # shellcheck disable=SC2206
        extra+=(${OURS_ENV:-})
        start_service "${extra[@]}"
        pid=$svc target=$grpc
        return
    fi
    local cmd redis=127.0.0.1:$rport
    cmd=$(peer_cmd "$2")
    [ "$2" = cluster ] && redis=$seeds
    read -r port http_port <<<"$(free_ports 2)"
    cmd=${cmd//\{port\}/$port}; cmd=${cmd//\{http_port\}/$http_port}
    cmd=${cmd//\{redis\}/$redis}; cmd=${cmd//\{dir\}/$root}
    # shellcheck disable=SC2086
    "${svc_cpu[@]}" $cmd >"$work/peer.log" 2>&1 &
    pid=$! target=127.0.0.1:$port
    wait_port "$port"
}

stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }

peer_cmd() { # store: the peer's command for it, or nothing
    case $1 in
        memory) echo "$PEER_MEMORY_CMD" ;;
        redis) echo "$PEER_REDIS_CMD" ;;
        cluster) echo "$PEER_CLUSTER_CMD" ;;
    esac
}

h2() { # label level
    local c=${2%x*} m=${2#*x} before after out rps
    before=$(cpu_ticks "$pid")
    out=$("${other_cpu[@]}" h2load -D "$DURATION" --warm-up-time 1s -c "$c" -m "$m" -t 1 -d "$work/body.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://$target/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" 2>&1)
    after=$(cpu_ticks "$pid")
    rps=$(echo "$out" | sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p')
    local done; done=$(echo "$out" | sed -n 's/^requests: .* \([0-9]*\) succeeded, \([0-9]*\) failed.*/\1 \2/p')
    printf '%-28s h2load %-5s rps=%s cpu_us_per_req=%s succeeded_failed=[%s]\n' "$1" "$2" "${rps%.*}" \
        "$(python3 -c "import sys; t=$after-$before; d=float('${DURATION%s}')+1; print('%.2f' % (t*1e6/100/max(1.0, float('${rps:-1}')*d)))")" "$done"
}

# The Redis side of a row on the store being measured ($store): its
# servers (a cluster's replicas too), their CPU ticks, and the script calls
# they ran.
store_ports() {
    case $store in
        redis) echo "$rport" ;;
        cluster) echo "${cports[@]}" ;;
    esac
}
redis_ticks() {
    local t=0 p rp
    for p in $(store_ports); do
        rp=$(redis-cli -p "$p" info server | tr -d '\r' | sed -n 's/^process_id://p')
        t=$((t + $(cpu_ticks "$rp")))
    done
    echo "$t"
}
script_calls() {
    local n=0 p c
    for p in $(store_ports); do
        c=$(redis-cli -p "$p" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
        n=$((n + ${c:-0}))
    done
    echo "$n"
}
# " redis_cpu_us_per_req=.. calls_per_req=.. calls_per_s_per_primary=.."
# over a run of ~rps x (DURATION + 1 s warm-up) requests; nothing on memory.
store_side() { # ticks_before calls_before rps
    [ -z "$(store_ports)" ] && return
    local primaries=1; [ "$store" = cluster ] && primaries=3
    python3 -c "
t=$(redis_ticks)-$1; n=$(script_calls)-$2; d=float('${DURATION%s}')+1; r=max(1.0, float('$3')*d)
print(' redis_cpu_us_per_req=%.2f calls_per_req=%.3f calls_per_s_per_primary=%d' % (t*1e6/100/r, n/r, n/d/$primaries))"
}

# The run over time: the p99.9 of the median and of the worst of its 60
# slices (ratelimit-bench --svg; the chart goes to $CHARTS/ when set).
slices() { # stderr file
    sed -n 's/^slices: p99.9 of the median slice \([0-9]*\) us, of the worst \([0-9]*\) us.*, \([0-9.]*\)x)$/ slice_p999_median_us=\1 slice_p999_worst_us=\2 worst_to_median=\3/p' "$1"
}

bench() { # label level
    local c=${2%x*} m=${2#*x} out ticks calls svg
    svg="${CHARTS:-$work}/$(echo "$1 $2" | tr ' ' '_').svg"
    [ -n "${CHARTS:-}" ] && mkdir -p "$CHARTS"
    ticks=$(redis_ticks); calls=$(script_calls)
    out=$("${other_cpu[@]}" target/release/ratelimit-bench run --target "$target" --connections "$c" --concurrency "$m" \
        --duration "$DURATION" --warmup 1s --keys uniform:10000 --domain bench --svg "$svg" 2>"$work/bench.err" | tail -1)
    local rps; rps=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rps"])')
    printf '%-28s bench  %-5s %s%s%s\n' "$1" "$2" "$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps=%d p50_us=%d p99_us=%d p999_us=%d errors=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["p999_us"], d["errors"]))')" \
        "$(store_side "$ticks" "$calls" "$rps")" "$(slices "$work/bench.err")"
}

many() { # label: 10 descriptors per request at 4x16
    local out ticks calls
    ticks=$(redis_ticks); calls=$(script_calls)
    out=$("${other_cpu[@]}" target/release/ratelimit-bench run --target "$target" --connections 4 --concurrency 16 \
        --duration "$DURATION" --warmup 1s --keys uniform:10000 --descriptors 10 --domain many | tail -1)
    local rps; rps=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rps"])')
    printf '%-28s many   4x16  %s%s\n' "$1" "$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps=%d p50_us=%d p99_us=%d p999_us=%d ok=%d errors=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["p999_us"], d["ok"], d["errors"]))')" \
        "$(store_side "$ticks" "$calls" "$rps")"
}

paced() { # label: 1 and 10 descriptors at PACE requests/s
    local d out domain
    for d in 1 10; do
        domain=bench; [ "$d" = 10 ] && domain=many
        out=$("${other_cpu[@]}" target/release/ratelimit-bench run --target "$target" --connections 4 --concurrency 16 \
            --rps "$PACE" --duration "$DURATION" --warmup 1s --keys uniform:10000 --descriptors "$d" --domain "$domain" | tail -1)
        printf '%-28s paced  %-5s %s\n' "$1" "${d}d" "$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps=%d p50_us=%d p99_us=%d p999_us=%d ok=%d errors=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["p999_us"], d["ok"], d["errors"]))')"
    done
}

mixed() { # label
    local out
    out=$("${other_cpu[@]}" target/release/ratelimit-bench run --target "$target" --connections 4 --concurrency 16 \
        --duration "$DURATION" --warmup 1s --keys uniform:10000 --descriptors 3 --domain mixed | tail -1)
    printf '%-28s mixed  4x16  %s\n' "$1" "$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps=%d p50_us=%d p99_us=%d p999_us=%d ok=%d errors=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["p999_us"], d["ok"], d["errors"]))')"
}

correctness() { # label
    local out
    out=$("${other_cpu[@]}" target/release/ratelimit-bench run --target "$target" --connections 4 --concurrency 16 \
        --duration 3s --warmup 0s --keys uniform:1 --domain cmp | tail -1)
    printf '%-28s limit  4x16  %s\n' "$1" "$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("admitted=%d of 10000 over_limit=%d other_code=%d errors=%d" % (d["ok"], d["over_limit"], d["other_code"], d["errors"]))')"
}

echo "=== $PEER_NAME vs ours; levels $LEVELS; $DURATION per row (+1s warm-up); $ROUNDS rounds; PIN=$PIN"
for round in $(seq "$ROUNDS"); do
    echo "--- round $round"
    # The ceiling: the no-op server on the same gRPC stack, same clients.
    if [ "${NOOP:-1}" = 1 ]; then
        store=memory
        read -r nport <<<"$(free_ports 1)"
        "${svc_cpu[@]}" target/release/ratelimit-bench noop --listen "127.0.0.1:$nport" >"$work/noop.log" 2>&1 &
        pid=$! target=127.0.0.1:$nport
        wait_port "$nport"
        for level in $LEVELS; do
            h2 "noop" "$level"
            bench "noop" "$level"
        done
        stop
    fi
    order="ours peer"; [ $((round % 2)) = 0 ] && order="peer ours"
    stores="memory redis"; [ "$CLUSTER" = 1 ] && stores="$stores cluster"
    for store in $stores; do
        for server in $order; do
            [ "$server" = peer ] && [ -z "$(peer_cmd "$store")" ] && continue
            name=$([ "$server" = ours ] && echo ratelimit || echo "$PEER_NAME")
            redis-cli -p "$rport" flushall >/dev/null
            if [ "$store" = cluster ]; then
                for p in "${cports[@]:0:3}"; do redis-cli -p "$p" flushall >/dev/null 2>&1 || true; done
            fi
            start "$server" "$store"
            for level in $LEVELS; do
                h2 "$name $store" "$level"
                bench "$name $store" "$level"
            done
            many "$name $store"
            [ "$PACE" != 0 ] && paced "$name $store"
            [ "${MIXED:-0}" = 1 ] && mixed "$name $store"
            [ "$round" = 1 ] && correctness "$name $store"
            stop
        done
    done
done
