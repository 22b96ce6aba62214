#!/usr/bin/env bash
# What the limiter adds to a request through Envoy, as a new user would see
# it: HTTP at a fixed rate through one Envoy (one worker thread) to a route
# without the rate limit filter, and to routes whose filter calls
#   - noop:   the bench's no-op rate limit service (Envoy's own round trip),
#   - memory: ratelimit on the memory store,
#   - redis:  ratelimit on a single Redis,
#   - redis_lf: ratelimit on the same Redis with local-first windows
#             (LOCAL_FIRST_SYNC_INTERVAL=50ms, docs/local-first.md),
#   - rlqs:   Envoy's rate limit quota filter, reporting to ratelimit (the
#             decision is Envoy's own, from its assignment),
# each filter on Envoy's defaults (a 20 ms timeout). In each round every
# row runs at once, each at its share of RPS, so that a noisy spell of the
# shared machine hits them alike; the added latency of a row is its p50 and
# p99 less the unfiltered route's in the same round, and the table gives
# the median over the rounds.
#
# Usage: integration/load/envoy.sh [DURATION] [ROUNDS]
#   DURATION  measured time per row and round (default 5s), after 2 s warm-up
#   ROUNDS    rounds (default 6)
# Environment: RPS (default 2000), IN_FLIGHT (HTTP/1.1 connections to
# Envoy, default 32), RATELIMIT_TEST_ENVOY (default: the test cache's Envoy,
# which scripts/test.sh installs), ROWS (default "plain noop memory redis
# redis_lf rlqs"; plain is required), SERVICE_ENV (extra NAME=value settings of both
# services), ENVOY_PREFIX and LOAD_PREFIX (a command prefix for Envoy and
# the load client, e.g. "taskset -c 0").
# Everything listens on 127.0.0.1 and stops with the script.
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-5s}
rounds=${2:-6}
rps=${RPS:-2000}
in_flight=${IN_FLIGHT:-32}
cache=${RATELIMIT_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ratelimit-test}
envoy=${RATELIMIT_TEST_ENVOY:-$cache/envoy/bin/envoy}
[ -x "$envoy" ] || { echo "no Envoy at $envoy: run scripts/test.sh first, or set RATELIMIT_TEST_ENVOY" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is required" >&2; exit 1; }

cargo build --release --locked --workspace --bin ratelimit --bin ratelimit-bench >&2
bench=target/release/ratelimit-bench

work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

root=$work/rt
mkdir -p "$root/ratelimit/config"
cat >"$root/ratelimit/config/load.yaml" <<'EOF'
# Every request is admitted: the rows measure the call, not refusals.
domain: envoy_load
descriptors:
  - key: route
    value: limited
    rate_limit: {unit: second, requests_per_unit: 1000000000}
EOF
cat >"$root/ratelimit/config/rlqs.yaml" <<'EOF'
domain: rlqs_load
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000000000}
EOF

svc_cpu=()
# shellcheck source=integration/load/service.sh
. integration/load/service.sh

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

# shellcheck disable=SC2086 # SERVICE_ENV is a list of NAME=value words
start_service BACKEND_TYPE=memory ${SERVICE_ENV:-}
pids+=("$svc"); memory=$grpc; cp "$work/svc.log" "$work/memory.log"
# shellcheck disable=SC2086
start_service BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$redis_port" ${SERVICE_ENV:-}
pids+=("$svc"); redis=$grpc
# shellcheck disable=SC2086
start_service BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$redis_port" LOCAL_FIRST_SYNC_INTERVAL=50ms ${SERVICE_ENV:-}
pids+=("$svc"); redis_lf=$grpc

"$bench" noop --listen 127.0.0.1:0 >"$work/noop.out" 2>&1 &
pids+=($!)
noop=""
for _ in $(seq 100); do
    noop=$(sed -n 's/^listening on //p' "$work/noop.out")
    [ -n "$noop" ] && break
    sleep 0.1
done
[ -n "$noop" ] || { cat "$work/noop.out" >&2; exit 1; }

backend_port=$(free_port)
# One HTTP listener per row; every route goes to the backend listener,
# which answers 200 itself.
listener() { # name http_filters_yaml
    cat <<EOF
  - name: $1
    address: {socket_address: {address: 127.0.0.1, port_value: 0}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: $1
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route:
                  cluster: backend
                  rate_limits:
                  - actions: [{generic_key: {descriptor_key: route, descriptor_value: limited}}]
          http_filters:
$2
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
EOF
}
rls_filter() { # cluster
    cat <<EOF
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: envoy_load
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {envoy_grpc: {cluster_name: $1}}
EOF
}
rlqs_filter='          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              domain: rlqs_load
              rlqs_server: {envoy_grpc: {cluster_name: rls_memory}}
              bucket_matchers:
                on_no_match:
                  action:
                    name: load
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                      bucket_id_builder:
                        bucket_id_builder:
                          tenant: {string_value: load}
                      reporting_interval: 5s
                      no_assignment_behavior:
                        fallback_rate_limit: {blanket_rule: ALLOW_ALL}'
grpc_cluster() { # name host:port
    cat <<EOF
  - name: $1
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: $1
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: ${2%:*}, port_value: ${2##*:}}}}}]}]
EOF
}
{
    echo "static_resources:"
    echo "  listeners:"
    listener plain ""
    listener noop "$(rls_filter rls_noop)"
    listener memory "$(rls_filter rls_memory)"
    listener redis "$(rls_filter rls_redis)"
    listener redis_lf "$(rls_filter rls_redis_lf)"
    listener rlqs "$rlqs_filter"
    cat <<EOF
  - name: backend
    address: {socket_address: {address: 127.0.0.1, port_value: $backend_port}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: backend
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                direct_response: {status: 200, body: {inline_string: "ok\n"}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $backend_port}}}}]}]
EOF
    grpc_cluster rls_noop "$noop"
    grpc_cluster rls_memory "$memory"
    grpc_cluster rls_redis "$redis"
    grpc_cluster rls_redis_lf "$redis_lf"
    echo "admin:"
    echo "  address: {socket_address: {address: 127.0.0.1, port_value: 0}}"
} >"$work/envoy.yaml"
# shellcheck disable=SC2086 # ENVOY_PREFIX: e.g. "taskset -c 0"
${ENVOY_PREFIX:-} "$envoy" -c "$work/envoy.yaml" --disable-hot-restart --concurrency 1 -l warning \
    --admin-address-path "$work/admin" >"$work/envoy.log" 2>&1 &
pids+=($!)
admin=""
for _ in $(seq 200); do
    admin=$(cat "$work/admin" 2>/dev/null || true)
    if [ -n "$admin" ] && curl -sf "http://$admin/ready" >/dev/null 2>&1; then break; fi
    sleep 0.1
done
curl -sf "http://$admin/ready" >/dev/null || { cat "$work/envoy.log" >&2; exit 1; }
curl -s "http://$admin/listeners" >"$work/listeners"
port_of() { sed -n "s/^$1::127.0.0.1:\([0-9]*\)$/\1/p" "$work/listeners"; }

read -r -a rows <<<"${ROWS:-plain noop memory redis redis_lf rlqs}"
: >"$work/results"
row_rps=$(( rps / ${#rows[@]} ))
echo "$("$envoy" --version | grep -o 'version: .*'); $rps req/s in all ($row_rps a row), $in_flight connections a row, $duration x $rounds rounds" >&2
for round in $(seq "$rounds"); do
    # Every row at once, each at its share of the rate, so that a noisy
    # spell of the shared machine hits every row alike.
    bench_pids=()
    for row in "${rows[@]}"; do
        # shellcheck disable=SC2086 # LOAD_PREFIX: e.g. "taskset -c 1"
        ${LOAD_PREFIX:-} "$bench" run --http / --target "127.0.0.1:$(port_of "$row")" --rps "$row_rps" \
            --connections 1 --concurrency "$in_flight" --threads 1 \
            --duration "$duration" --warmup 2s --timeout 2s >"$work/$row.out" 2>&1 &
        bench_pids+=($!)
    done
    for p in "${bench_pids[@]}"; do wait "$p"; done
    for row in "${rows[@]}"; do
        out=$(tail -1 "$work/$row.out")
        echo "$round $row $out" >>"$work/results"
        echo "round $round $row: $(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("p50 %(p50_us)s us, p99 %(p99_us)s us, ok %(ok)s, 429 %(over_limit)s, errors %(errors)s" % r)' "$out")" >&2
    done
done
stat() { curl -s "http://$admin/stats" | awk -F': ' -v n="$1" '$1 == n {v = $2} END {print v + 0}'; }
echo "Envoy's rate limit filters (all rows): ok $(stat cluster.backend.ratelimit.ok), over_limit $(stat cluster.backend.ratelimit.over_limit), error $(stat cluster.backend.ratelimit.error)" >&2
for rls in noop memory redis redis_lf; do
    # A call past the filter's 20 ms is Envoy's error (and admitted).
    echo "  calls to $rls: $(stat "cluster.rls_$rls.upstream_rq_total"), past Envoy's timeout $(stat "cluster.rls_$rls.upstream_rq_timeout")" >&2
done

python3 - "$work/results" <<'PY'
import json, statistics, sys
by = {}
for line in open(sys.argv[1]):
    rnd, row, js = line.split(" ", 2)
    by.setdefault(row, {})[int(rnd)] = json.loads(js)
rounds = sorted(by["plain"])
def added(row, q):
    return [(by[row][r][q] - by["plain"][r][q]) / 1000 for r in rounds]
def cell(v):
    # The median over the rounds (a noisy spell of the shared machine spoils
    # one round, not the figure), then the range.
    return f"{statistics.median(v):+.2f} ({min(v):+.2f} to {max(v):+.2f})"
plain50 = [by["plain"][r]["p50_us"] / 1000 for r in rounds]
plain99 = [by["plain"][r]["p99_us"] / 1000 for r in rounds]
print(f"{len(rounds)} rounds; each cell: the median over the rounds (the range)")
print(f"| row | added at p50 (ms) | added at p99 (ms) | errors |")
print(f"|---|---|---|---|")
print(f"| no filter: p50 {statistics.median(plain50):.2f}, p99 {statistics.median(plain99):.2f} ms | 0 | 0 | {sum(by['plain'][r]['errors'] for r in rounds)} |")
names = {"noop": "no-op RLS", "memory": "ours, memory", "redis": "ours, Redis", "redis_lf": "ours, Redis local-first", "rlqs": "ours, RLQS"}
for row in [r for r in ["noop", "memory", "redis", "redis_lf", "rlqs"] if r in by]:
    errors = sum(by[row][r]["errors"] + by[row][r]["other_code"] for r in rounds)
    print(f"| {names[row]} | {cell(added(row, 'p50_us'))} | {cell(added(row, 'p99_us'))} | {errors} |")
if "noop" in by:
    noop99 = statistics.median(added("noop", "p99_us"))
    for row in [r for r in ["memory", "redis", "redis_lf", "rlqs"] if r in by]:
        ours = statistics.median(added(row, "p99_us"))
        print(f"{names[row]}: added p99 {ours:+.2f} ms against the no-op's {noop99:+.2f} ms"
              + (f" ({ours / noop99:.2f}x)" if noop99 > 0 else ""))
PY
