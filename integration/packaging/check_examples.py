"""The Envoy and Istio examples parse into Envoy's own API types.

Uses envoy-data-plane (generated Envoy API classes): the module of each
`@type` is imported so that its message is registered, then the document is
read with `from_dict`, which refuses unknown or misspelt fields. Called by
integration/packaging/check.sh; writes the number of passed checks to
`<dir>/examples-passed`.
"""

import copy
import importlib
import os
import subprocess
import sys
import tempfile

import yaml

from report import fail, ok, write_count

WORK = sys.argv[1]
CHECK = os.path.abspath("target/debug/ratelimit_config_check")


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


with open("examples/envoy/envoy.yaml") as f:
    bootstrap = yaml.safe_load(f)
parse("envoy.config.bootstrap.v3.Bootstrap", bootstrap, "examples/envoy/envoy.yaml")
ok("examples/envoy/envoy.yaml parses as an Envoy v3 Bootstrap")

with open("examples/envoy/rlqs/envoy.yaml") as f:
    rlqs = yaml.safe_load(f)
parse("envoy.config.bootstrap.v3.Bootstrap", rlqs, "examples/envoy/rlqs/envoy.yaml")
ok("examples/envoy/rlqs/envoy.yaml (the rate limit quota filter) parses as an Envoy v3 Bootstrap")

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
