# Sourced by the load scripts that run Redis: checks for redis-server,
# builds the release binaries, makes $work and the pids array, and removes
# both on exit. Sets the taskset prefixes svc_cpu (for the service) and
# other_cpu (for the load tools and Redis): empty, or with PIN=1 core 0 and
# core 1. Then: Redis servers on free loopback ports, in $work, their pids
# appended to pids.
#   free_ports N [cluster]   N free ports (for a cluster, port+10000 too)
#   start_redis PORT [args]  one redis-server, waited for
#   start_cluster            a 6-node cluster (3 primaries, 3 replicas);
#                            sets the cports array (its ports)

PIN=${PIN:-0}
svc_cpu=(); other_cpu=()
if [ "$PIN" = 1 ]; then svc_cpu=(taskset -c 0); other_cpu=(taskset -c 1); fi

command -v redis-server >/dev/null || { echo "redis-server is required (scripts/test.sh installs it)" >&2; exit 1; }
cargo build --release --locked --workspace --bin ratelimit --bin ratelimit-bench >&2
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
free_ports() { # N [cluster]: N free loopback ports (with port+10000 free too for clusters)
    python3 - "$@" <<'PY'
import socket, sys
n, cluster = int(sys.argv[1]), len(sys.argv) > 2
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
out = []
while len(out) < n:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p not in out and (not cluster or (p + 10000 < 65536 and free(p + 10000))):
        out.append(p)
print(" ".join(map(str, out)))
PY
}

start_redis() { # PORT [args...]
    local port=$1; shift
    mkdir -p "$work/r$port"
    "${other_cpu[@]}" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/r$port" "$@" \
        >"$work/r$port.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.05; done
    echo "redis on $port did not start" >&2; exit 1
}

start_cluster() {
    read -r -a cports <<<"$(free_ports 6 cluster)"
    for p in "${cports[@]}"; do
        start_redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" --cluster-node-timeout 2000 \
            --repl-diskless-sync-delay 0
    done
    redis-cli --cluster create $(printf '127.0.0.1:%s ' "${cports[@]}") --cluster-replicas 1 --cluster-yes >/dev/null
    for _ in $(seq 200); do
        redis-cli -p "${cports[0]}" cluster info | grep -q cluster_state:ok && break; sleep 0.1
    done
}
