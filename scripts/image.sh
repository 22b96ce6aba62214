#!/usr/bin/env bash
# Builds the container image from the repo's Dockerfile with no registry,
# and runs it as a kubelet runs it with the Helm chart's security context
# (user 65532, read-only root filesystem, every capability dropped, no new
# privileges, the config mounted read-only, ports on loopback). Run by
# scripts/test.sh; needs podman, buildah and mmdebstrap (Debian's
# packages), redis-server, curl and cargo.
#
# - The base is made from Debian's packages: mmdebstrap extracts libc6 and
#   libgcc-s1 (no shell, no package manager), adds the CA bundle of
#   Debian's ca-certificates and a `nonroot` user 65532: the layout of the
#   distroless cc image the Dockerfile defaults to, imported as
#   localhost/ratelimit-base:bookworm.
# - The binaries are the test command's own release build (`cargo build
#   --release --locked`), stripped of debug info, copied in through the
#   Dockerfile's `prebuilt` stage: the image holds the binaries the tests
#   and benchmarks ran, and the Dockerfile's other stages are unchanged.
#
# Checks: the size (at most 60 MB), the labels, `ratelimit --version`;
# `/bin/ratelimit` is the service (the original's path);
# then on the memory store `/healthcheck`, the gRPC health service,
# `/json` and `ShouldRateLimit` (the image's own ratelimit_client) counting
# a rule down to OVER_LIMIT, a reload from the mounted directory, SIGTERM
# draining within the chart's grace period; then on a Redis on the host's
# loopback (host network), started as the original's manifests start it
# (`command: ["/bin/ratelimit"]`), the same counting, its keys in Redis.
set -euo pipefail
cd "$(dirname "$0")/.."

passed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { echo "image check FAILED: $*" >&2; exit 1; }

work=$(mktemp -d)
containers=()
redis_pid=""
cleanup() {
    for c in "${containers[@]}"; do podman rm -f "$c" >/dev/null 2>&1 || true; done
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Two host quirks of rootful podman here: its default ulimits need
# CAP_SYS_RESOURCE to be set, and crun refuses a hybrid cgroup host.
cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$work/containers.conf"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
image=localhost/ratelimit:$version
base=localhost/ratelimit-base:bookworm
start=$SECONDS

# The base, from Debian's packages.
mmdebstrap --quiet --variant=extract --include=libc6,libgcc-s1 \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --dpkgopt='path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*' \
    --customize-hook='mkdir -p "$1/etc/ssl/certs" "$1/tmp" "$1/home/nonroot" && chmod 1777 "$1/tmp"' \
    --customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/"' \
    --customize-hook='printf "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" >"$1/etc/passwd"' \
    --customize-hook='printf "root:x:0:\nnonroot:x:65532:\n" >"$1/etc/group"' \
    bookworm "$work/base.tar"
podman import --quiet "$work/base.tar" "$base" >/dev/null
based=$SECONDS

# The release binaries, stripped.
# In a checkout the build names the same revision itself (build.rs); the
# variable is set only outside one, since setting it makes the other
# release builds of the test command (the chaos soak's) rebuild the crate.
if git rev-parse --git-dir >/dev/null 2>&1; then
    cargo build --release --locked \
        --bin ratelimit --bin ratelimit_config_check --bin ratelimit_client
else
    RATELIMIT_REVISION=$revision cargo build --release --locked \
        --bin ratelimit --bin ratelimit_config_check --bin ratelimit_client
fi
built=$SECONDS
mkdir -p "$work/ctx/prebuilt/usr/local/bin" "$work/ctx/prebuilt/bin"
for b in ratelimit ratelimit_config_check ratelimit_client; do
    objcopy --strip-debug "target/release/$b" "$work/ctx/prebuilt/usr/local/bin/$b"
done
ln -s /usr/local/bin/ratelimit "$work/ctx/prebuilt/bin/ratelimit"
buildah bud --quiet --pull=never --layers=false -f Dockerfile \
    --build-arg BASE="$base" --build-arg BINARIES=prebuilt \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" \
    -t "$image" "$work/ctx" >/dev/null
imaged=$SECONDS

size=$(podman image inspect --format '{{.Size}}' "$image")
echo "image $image: $((size / 1000 / 1000)) MB ($size bytes); base $((based - start)) s, release build $((built - based)) s, image $((imaged - built)) s"
podman history --format '{{.Size}}\t{{.CreatedBy}}' "$image" | cut -c1-120
[ "$size" -le 60000000 ] || fail "the image is $size bytes, over 60 MB"
ok "the image is $((size / 1000 / 1000)) MB"
for label in version revision licenses source; do
    value=$(podman image inspect --format "{{index .Labels \"org.opencontainers.image.$label\"}}" "$image")
    [ -n "$value" ] || fail "label org.opencontainers.image.$label missing"
done
[ "$(podman image inspect --format '{{index .Labels "org.opencontainers.image.revision"}}' "$image")" = "$revision" ] ||
    fail "the revision label is not $revision"
ok "OCI labels (version $version, revision $revision)"

# As the chart runs it.
secure=(--user 65532:65532 --read-only --cap-drop=ALL --security-opt=no-new-privileges)
said=$(timeout 30 podman run --rm "${secure[@]}" "$image" --version)
[ "$said" = "ratelimit $version (revision $revision)" ] || fail "--version said: $said"
ok "ratelimit --version: $said"
said=$(timeout 30 podman run --rm "${secure[@]}" --entrypoint /bin/ratelimit "$image" --version)
[ "$said" = "ratelimit $version (revision $revision)" ] || fail "/bin/ratelimit --version said: $said"
ok "/bin/ratelimit is the service, where the original's image has it"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { # url: until it answers 200, at most 30 s
    for _ in $(seq 1 60); do
        curl -fs -o /dev/null "$1" && return 0
        sleep 0.5
    done
    return 1
}
json() { # port domain key value: the overall code of one /json call
    curl -s -X POST "http://127.0.0.1:$1/json" \
        -d "{\"domain\":\"$2\",\"descriptors\":[{\"entries\":[{\"key\":\"$3\",\"value\":\"$4\"}]}]}" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["overallCode"])'
}
counts_down() { # port domain key value limit what
    for i in $(seq 1 "$5"); do
        [ "$(json "$1" "$2" "$3" "$4")" = OK ] || fail "$6: /json call $i of $5 not OK"
    done
    [ "$(json "$1" "$2" "$3" "$4")" = OVER_LIMIT ] || fail "$6: /json call $(($5 + 1)) not OVER_LIMIT"
}
grpc_call() { # container port domain key value: what the image's own client says
    timeout 30 podman exec "$1" /usr/local/bin/ratelimit_client \
        -dial_string "127.0.0.1:$2" -domain "$3" -descriptors "$4=$5" 2>&1 || true
}
grpc_counts_down() { # container port domain key value limit what: over gRPC
    local out
    for i in $(seq 1 "$6"); do
        out=$(grpc_call "$1" "$2" "$3" "$4" "$5")
        echo "$out" | grep -q 'response: overall_code:OK' || fail "$7: gRPC call $i of $6 not OK: $out"
    done
    out=$(grpc_call "$1" "$2" "$3" "$4" "$5")
    echo "$out" | grep -q 'response: overall_code:OVER_LIMIT' || fail "$7: gRPC call $(($6 + 1)) not OVER_LIMIT: $out"
}

mkdir -p "$work/runtime/ratelimit/config"
cat >"$work/runtime/ratelimit/config/image.yaml" <<'EOF'
domain: image
descriptors:
  - key: json
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: grpc
    rate_limit: {unit: hour, requests_per_unit: 2}
EOF
chmod -R a+rX "$work/runtime"
runtime_env=(-e RUNTIME_ROOT=/runtime -e RUNTIME_SUBDIRECTORY=ratelimit -e RUNTIME_WATCH_ROOT=false
    -e USE_STATSD=false -e LOG_LEVEL=info -e SHUTDOWN_DRAIN_DURATION=2s -e SHUTDOWN_TIMEOUT=5s)
# The chart's grace period: drain + timeout + 5 s.
grace=12

# On the memory store, ports published on loopback.
hp=$(free_port); gp=$(free_port); dp=$(free_port)
containers+=(rl-image-memory)
podman run -d --name rl-image-memory "${secure[@]}" \
    -v "$work/runtime:/runtime:ro" "${runtime_env[@]}" -e BACKEND_TYPE=memory \
    -p "127.0.0.1:$hp:8080" -p "127.0.0.1:$gp:8081" -p "127.0.0.1:$dp:6070" \
    "$image" >/dev/null
wait_for "http://127.0.0.1:$hp/healthcheck" || { podman logs rl-image-memory | tail -20; fail "/healthcheck did not answer"; }
ok "/healthcheck answers (memory, user 65532, read-only root, no capabilities)"
health=$(printf '\0\0\0\0\0' | curl -s --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
    --data-binary @- "http://127.0.0.1:$gp/grpc.health.v1.Health/Check" | xxd -p)
[ "$health" = 00000000020801 ] || fail "gRPC health answered $health, not SERVING"
ok "the gRPC health service answers SERVING"
counts_down "$hp" image json a 3 memory
ok "/json counts a rule of 3 down to OVER_LIMIT"
grpc_counts_down rl-image-memory 8081 image grpc a 2 memory
ok "ShouldRateLimit over gRPC counts a rule of 2 down to OVER_LIMIT"

# A config change in the mounted directory reloads.
{
    cat "$work/runtime/ratelimit/config/image.yaml"
    printf '  - key: reloaded\n    rate_limit: {unit: hour, requests_per_unit: 1}\n'
} >"$work/runtime/ratelimit/config/image.yaml.new"
chmod a+r "$work/runtime/ratelimit/config/image.yaml.new"
mv "$work/runtime/ratelimit/config/image.yaml.new" "$work/runtime/ratelimit/config/image.yaml"
reloaded=""
for _ in $(seq 1 40); do
    if curl -s "http://127.0.0.1:$dp/rlconfig" | grep -q 'reloaded'; then reloaded=yes; break; fi
    sleep 0.25
done
[ -n "$reloaded" ] || fail "the mounted config's change did not reload"
counts_down "$hp" image reloaded a 1 "after the reload"
ok "a change in the mounted config directory reloads"

# SIGTERM drains within the grace period, and exits 0.
t=$SECONDS
podman stop -t "$grace" rl-image-memory >/dev/null
took=$((SECONDS - t))
code=$(podman inspect --format '{{.State.ExitCode}}' rl-image-memory)
[ "$code" = 0 ] || fail "exit code $code after SIGTERM (137: killed at the grace period)"
[ "$took" -le "$grace" ] || fail "SIGTERM took $took s, over the grace period of $grace s"
ok "SIGTERM drains and exits 0 in $took s (grace period $grace s)"

# On a Redis on the host's loopback: the host network.
rp=$(free_port)
redis-server --port "$rp" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 40); do redis-cli -p "$rp" ping >/dev/null 2>&1 && break; sleep 0.25; done
hp=$(free_port); gp=$(free_port); dp=$(free_port)
containers+=(rl-image-redis)
# As the original's Deployments run it: `command: ["/bin/ratelimit"]`.
podman run -d --name rl-image-redis "${secure[@]}" --network host --entrypoint /bin/ratelimit \
    -v "$work/runtime:/runtime:ro" "${runtime_env[@]}" \
    -e BACKEND_TYPE=redis -e REDIS_SOCKET_TYPE=tcp -e "REDIS_URL=127.0.0.1:$rp" \
    -e REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true \
    -e HOST=127.0.0.1 -e "PORT=$hp" -e GRPC_HOST=127.0.0.1 -e "GRPC_PORT=$gp" \
    -e DEBUG_HOST=127.0.0.1 -e "DEBUG_PORT=$dp" \
    "$image" >/dev/null
wait_for "http://127.0.0.1:$hp/healthcheck" || { podman logs rl-image-redis | tail -20; fail "/healthcheck did not answer on Redis"; }
ok "/healthcheck answers on Redis"
counts_down "$hp" image json r 3 redis
grpc_counts_down rl-image-redis "$gp" image grpc r 2 redis
keys=$(redis-cli -p "$rp" --scan --pattern 'image_*' | wc -l)
[ "$keys" -ge 2 ] || fail "no counters in Redis ($keys keys)"
ok "on Redis, started as /bin/ratelimit: /json and gRPC count down to OVER_LIMIT, $keys counters in Redis"
podman stop -t "$grace" rl-image-redis >/dev/null

echo "image: built and checked in $((SECONDS - start)) s"
echo "$passed passed, 0 failed"
