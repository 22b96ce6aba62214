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
# skipped. PIN=1 pins each server to core 0 and the clients and Redis to
# core 1. OURS_ENV adds settings to this service (e.g. "GRPC_WORKERS=1").
#
# Same descriptors (domain bench, one entry `key`), same clients, same
# levels (connections x streams: 1x1, 4x16, 8x64):
#   h2load          one hot key (h2load sends one body): req/s, and the
#                   server's CPU time per request from /proc
#   ratelimit-bench uniform over 10,000 keys: req/s, p50, p99, p99.9
# then a correctness run: 4x16 for 3 s on one key limited to 10,000 per
# hour (domain cmp): admitted against the limit, and errors. With MIXED=1,
# also mixed requests at 4x16 (domain mixed: an original window, a token
# bucket and a sliding window per request, uniform over 10,000 keys).
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-5s}
ROUNDS=${2:-2}
LEVELS=${LEVELS:-"1x1 4x16 8x64"}
command -v h2load >/dev/null || { echo "h2load is required (Debian: nghttp2-client)" >&2; exit 1; }
PIN=${PIN:-0}
svc_cpu=(); other_cpu=()
if [ "$PIN" = 1 ]; then svc_cpu=(taskset -c 0); other_cpu=(taskset -c 1); fi

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
        # shellcheck disable=SC2206
        extra+=(${OURS_ENV:-})
        start_service "${extra[@]}"
        pid=$svc target=$grpc
        return
    fi
    local cmd
    [ "$2" = memory ] && cmd=$PEER_MEMORY_CMD || cmd=$PEER_REDIS_CMD
    read -r port http_port <<<"$(free_ports 2)"
    cmd=${cmd//\{port\}/$port}; cmd=${cmd//\{http_port\}/$http_port}
    cmd=${cmd//\{redis\}/127.0.0.1:$rport}; cmd=${cmd//\{dir\}/$root}
    # shellcheck disable=SC2086
    "${svc_cpu[@]}" $cmd >"$work/peer.log" 2>&1 &
    pid=$! target=127.0.0.1:$port
    wait_port "$port"
}

stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }

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

bench() { # label level
    local c=${2%x*} m=${2#*x} out
    out=$("${other_cpu[@]}" target/release/ratelimit-bench run --target "$target" --connections "$c" --concurrency "$m" \
        --duration "$DURATION" --warmup 1s --keys uniform:10000 --domain bench | tail -1)
    printf '%-28s bench  %-5s %s\n' "$1" "$2" "$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps=%d p50_us=%d p99_us=%d p999_us=%d errors=%d" % (d["rps"], d["p50_us"], d["p99_us"], d["p999_us"], d["errors"]))')"
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
    order="ours peer"; [ $((round % 2)) = 0 ] && order="peer ours"
    for store in memory redis; do
        for server in $order; do
            [ "$server" = peer ] && [ -z "$([ "$store" = memory ] && echo "$PEER_MEMORY_CMD" || echo "$PEER_REDIS_CMD")" ] && continue
            name=$([ "$server" = ours ] && echo ratelimit || echo "$PEER_NAME")
            redis-cli -p "$rport" flushall >/dev/null
            start "$server" "$store"
            for level in $LEVELS; do
                h2 "$name $store" "$level"
                bench "$name $store" "$level"
            done
            [ "${MIXED:-0}" = 1 ] && mixed "$name $store"
            [ "$round" = 1 ] && correctness "$name $store"
            stop
        done
    done
done
