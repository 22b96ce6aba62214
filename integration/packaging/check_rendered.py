"""Checks on the chart's rendered manifests that need the real binary.

Called by integration/packaging/check.sh with the directory of rendered manifests
(`<label>.rendered.yaml`) and the chart directory; writes the number of
passed checks to `<dir>/python-passed`. Loopback only; every wait is bounded.
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

from report import fail, ok, write_count

WORK, CHART = sys.argv[1], sys.argv[2]
BIN = os.path.abspath("target/debug/ratelimit")
CHECK = os.path.abspath("target/debug/ratelimit_config_check")
CLIENT = os.path.abspath("target/debug/ratelimit_client")


def docs(label):
    with open(os.path.join(WORK, f"{label}.rendered.yaml")) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def kind(documents, k, name_part=""):
    found = [d for d in documents if d["kind"] == k and name_part in d["metadata"]["name"]]
    if not found:
        fail(f"no {k} {name_part} rendered")
    return found[0]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url, body=None):
    req = urllib.request.Request(url, data=body, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def eventually(cond, within=15.0):
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            if cond():
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def start(env):
    """The binary with `env` on free loopback ports; (process, http, debug)."""
    http, grpc, debug = free_port(), free_port(), free_port()
    full = {"PATH": os.environ.get("PATH", ""), **env}
    full.update(HOST="127.0.0.1", PORT=str(http), GRPC_HOST="127.0.0.1", GRPC_PORT=str(grpc),
                DEBUG_HOST="127.0.0.1", DEBUG_PORT=str(debug))
    proc = subprocess.Popen([BIN], env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    up = eventually(lambda: get(f"http://127.0.0.1:{debug}/rlconfig")[0] == 200)
    if not up:
        proc.kill()
        fail(f"the service did not start: {proc.stderr.read().decode()[-2000:]}")
    start.grpc = f"127.0.0.1:{grpc}"
    return proc, f"http://127.0.0.1:{http}", f"http://127.0.0.1:{debug}"


def container_env(deployment):
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "config")
    return env, mount


def lay_out_configmap(directory, files, stamp):
    """The kubelet's ConfigMap layout: ..<stamp>/<files>, ..data -> it, and a
    link per file through ..data; a later call swaps ..data atomically."""
    real = os.path.join(directory, f"..{stamp}")
    os.makedirs(real)
    for name, text in files.items():
        with open(os.path.join(real, name), "w") as f:
            f.write(text)
    tmp_link = os.path.join(directory, "..data_tmp")
    os.symlink(f"..{stamp}", tmp_link)
    os.replace(tmp_link, os.path.join(directory, "..data"))
    for name in files:
        link = os.path.join(directory, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..data", name), link)


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_selectors(label):
    """Every selector of a rendered chart picks exactly the pods it is for:
    the service's (Deployment, Service, PodDisruptionBudget, NetworkPolicy)
    never the in-chart Redis or the test pod, and the Redis's its own."""
    documents = docs(label)
    pods = {}
    for d in documents:
        if d["kind"] == "Deployment":
            pods[d["metadata"]["name"]] = d["spec"]["template"]["metadata"]["labels"]
        elif d["kind"] == "Pod":
            pods[d["metadata"]["name"]] = d["metadata"]["labels"]
    checked = 0
    for d in documents:
        name = d["metadata"]["name"]
        selector = {
            "Deployment": lambda: d["spec"]["selector"]["matchLabels"],
            "Service": lambda: d["spec"]["selector"],
            "PodDisruptionBudget": lambda: d["spec"]["selector"]["matchLabels"],
            "NetworkPolicy": lambda: d["spec"]["podSelector"]["matchLabels"],
        }.get(d["kind"])
        if selector is None:
            continue
        own = "t-ratelimit-redis" if name.endswith("-redis") else "t-ratelimit"
        picked = sorted(p for p, labels in pods.items() if matches(selector(), labels))
        if picked != [own]:
            fail(f"{label}: the {d['kind']} {name} selects {picked}, not [{own}]")
        checked += 1
    return checked


for label in ["redis-in-chart-values.yaml", "all-optional-values.yaml", "istio.rendered"]:
    n = check_selectors(label)
    if label == "redis-in-chart-values.yaml" and n < 6:
        fail(f"{label}: only {n} selectors rendered (Deployments, Services, PDB, NetworkPolicies)")
ok("each selector picks only its own pods: the service's never the in-chart Redis or the test pod")

for d in docs("istio.rendered"):
    if d["kind"] == "NetworkPolicy" and not d["metadata"]["name"].endswith("-redis"):
        gateway = d["spec"]["ingress"][0]["from"]
        if not all(e.get("namespaceSelector") for e in gateway if "podSelector" in e):
            fail(f"the Istio values let only pods of the release's namespace in: {gateway}")
ok("the Istio values' network policy admits the gateway from istio-system")

memcache_env, _ = container_env(kind(docs("memcache-values.yaml"), "Deployment"))
if memcache_env.get("BACKEND_TYPE") != "memcache" or not memcache_env.get("MEMCACHE_HOST_PORT"):
    fail(f"backend: memcache rendered {memcache_env}")
ok("backend: memcache renders BACKEND_TYPE and MEMCACHE_HOST_PORT")

defaults = docs("defaults")
configmap = kind(defaults, "ConfigMap", "config")
files = configmap["data"]

# 1. The shipped descriptor config passes the checker.
with tempfile.TemporaryDirectory() as d:
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    out = subprocess.run([CHECK, "-config_dir", d], capture_output=True, text=True)
    if out.returncode != 0 or "all rate limit configs ok" not in out.stdout:
        fail(f"ratelimit_config_check on the chart's config: {out.stdout}{out.stderr}")
ok("the chart's descriptor config passes ratelimit_config_check")

# 2. The Deployment's env and mount path run, and a ConfigMap update (the
# kubelet's ..data swap) reloads live.
env, mount = container_env(kind(defaults, "Deployment"))
with tempfile.TemporaryDirectory() as root:
    # Paths of the pod, under a scratch root.
    env["RUNTIME_ROOT"] = root + env["RUNTIME_ROOT"]
    config_dir = root + mount
    os.makedirs(config_dir)
    lay_out_configmap(config_dir, files, "2026_01_01_00_00_00.000000001")
    proc, http, debug = start(env)
    try:
        if "example.remote_address" not in get(f"{debug}/rlconfig")[1]:
            fail(f"the rendered env and mount path do not load the config: {get(debug + '/rlconfig')[1]}")
        changed = {n: t.replace("requests_per_unit: 10", "requests_per_unit: 99") for n, t in files.items()}
        lay_out_configmap(config_dir, changed, "2026_01_01_00_01_00.000000002")
        if not eventually(lambda: "requests_per_unit=99" in get(f"{debug}/rlconfig")[1]):
            fail("a ..data swap did not reload the config")
    finally:
        proc.kill()
        proc.wait()
ok("the rendered env and mount path load the config, and a ..data swap reloads it live")

# 3. The ServiceMonitor scrapes a port the Service has, selecting its labels.
everything = docs("all-optional-values.yaml")
monitor = kind(everything, "ServiceMonitor")
service = next(d for d in everything if d["kind"] == "Service" and "redis" not in d["metadata"]["name"])
ports = {p["name"] for p in service["spec"]["ports"]}
if monitor["spec"]["endpoints"][0]["port"] not in ports:
    fail(f"ServiceMonitor port not on the Service: {ports}")
selector = monitor["spec"]["selector"]["matchLabels"]
if any(service["metadata"]["labels"].get(k) != v for k, v in selector.items()):
    fail("ServiceMonitor selector does not select the Service")
deployment_env, _ = container_env(kind(everything, "Deployment"))
if deployment_env.get("USE_PROMETHEUS") != "true":
    fail("ServiceMonitor without USE_PROMETHEUS")
ok("the ServiceMonitor scrapes the Service's metrics port of a pod with USE_PROMETHEUS")

# 4. Every metric the dashboard queries is exported (after a few requests, an
# error and a failed config load).
dashboard = json.loads(kind(everything, "ConfigMap", "dashboard")["data"]["ratelimit.json"])
wanted = set()
for panel in dashboard["panels"]:
    for target in panel["targets"]:
        wanted |= set(re.findall(r"\b((?:ratelimit|runtime)_[a-z_]+)\b", target["expr"]))
with tempfile.TemporaryDirectory() as root:
    config_dir = os.path.join(root, "ratelimit", "config")
    os.makedirs(config_dir)
    for name, text in files.items():
        with open(os.path.join(config_dir, name), "w") as f:
            f.write(text)
    # A sharded rule of the check's own, so the decision audit panel's
    # "under" has something to count: 64 requests of one caller on 16 per
    # hour in 8 sub-buckets of 2 (some sub-bucket fills before the 16th
    # admission unless the first 16 picks are exactly 2 apiece, p < 0.001;
    # five fresh keys make a miss practically impossible).
    with open(os.path.join(config_dir, "audited.yaml"), "w") as f:
        f.write("domain: audited\ndescriptors:\n  - key: tenant\n"
                "    rate_limit: {unit: hour, requests_per_unit: 16, shards: 8}\n")
    prom = free_port()
    proc, http, debug = start({
        "BACKEND_TYPE": "memory", "USE_STATSD": "false", "USE_PROMETHEUS": "true",
        "PROMETHEUS_ADDR": f"127.0.0.1:{prom}", "RUNTIME_ROOT": root,
        "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
        # The audit panel's counters exist only for audited rules.
        "DECISION_AUDIT_SAMPLE": "1",
    })
    try:
        login = json.dumps({"domain": "example", "descriptors": [
            {"entries": [{"key": "path", "value": "/login"}]}]}).encode()
        codes = [get(f"{http}/json", login)[0] for _ in range(7)]
        if 429 not in codes:
            fail(f"no refusal from the shipped /login rule: {codes}")
        get(f"{http}/json", json.dumps({"domain": "", "descriptors": []}).encode())
        # The gRPC call statistics (request count, response time) come from
        # gRPC calls.
        for _ in range(3):
            subprocess.run([CLIENT, "-dial_string", start.grpc, "-domain", "example",
                            "-descriptors", "remote_address=10.0.0.1"],
                           capture_output=True, timeout=30, check=True)
        # The audit: "over" from the fixed window's boundary burst (10 per
        # second on remote_address: 10 just before a second boundary, 1
        # after), "under" from the sharded rule.
        time.sleep(0.9 - time.time() % 1.0 if time.time() % 1.0 < 0.9 else 1.9 - time.time() % 1.0)
        burst = json.dumps({"domain": "example", "descriptors": [
            {"entries": [{"key": "remote_address", "value": "10.0.0.9"}]}]}).encode()
        for _ in range(10):
            get(f"{http}/json", burst)
        time.sleep(1.02 - time.time() % 1.0)
        get(f"{http}/json", burst)
        for tenant in range(5):
            one = json.dumps({"domain": "audited", "descriptors": [
                {"entries": [{"key": "tenant", "value": f"t{tenant}"}]}]}).encode()
            for _ in range(64):
                get(f"{http}/json", one)
        with open(os.path.join(config_dir, "broken.yaml"), "w") as f:
            f.write("domain: [\n")
        url = f"http://127.0.0.1:{prom}/metrics"

        def exported():
            text = get(url)[1]
            return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
                    if line and not line.startswith("#")}

        def all_there():
            names = exported()
            return all(w in names for w in wanted)

        if not eventually(all_there):
            fail(f"the dashboard queries metrics the service does not export: {sorted(wanted - exported())}")
    finally:
        proc.kill()
        proc.wait()
ok(f"all {len(wanted)} metrics the dashboard queries are exported")

write_count(WORK, "python-passed")
