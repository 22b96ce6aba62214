# Sourced by the load scripts: start_service runs the release service on
# free loopback ports with the load rules in $root and the given extra
# environment, logging to $work/svc.log, and waits for its gRPC address.
# Uses the svc_cpu array (a taskset prefix, or empty) and SERVICE (the
# binary, default target/release/ratelimit); sets $svc (its pid) and $grpc.
start_service() { # extra env...
    env -i PATH="$PATH" USE_STATSD=false RUNTIME_ROOT="$root" RUNTIME_SUBDIRECTORY=ratelimit \
        RUNTIME_WATCH_ROOT=false HOST=127.0.0.1 PORT=0 DEBUG_HOST=127.0.0.1 DEBUG_PORT=0 \
        GRPC_HOST=127.0.0.1 GRPC_PORT=0 REDIS_SOCKET_TYPE=tcp "$@" \
        "${svc_cpu[@]}" "${SERVICE:-target/release/ratelimit}" 2>"$work/svc.log" &
    svc=$!
    grpc=""
    for _ in $(seq 100); do
        grpc=$(sed -n "s/.*Listening for gRPC on '\([^']*\)'.*/\1/p" "$work/svc.log")
        [ -n "$grpc" ] && return
        sleep 0.1
    done
    cat "$work/svc.log" >&2; exit 1
}
