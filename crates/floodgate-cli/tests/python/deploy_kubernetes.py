"""Renders a kustomize overlay of deploy/kubernetes with `kubectl kustomize`,
validates every object against Kubernetes' own schemas (kubernetes-validate,
strict: an unknown field fails), checks that the objects fit together, and
prints what the Floodgate container runs as JSON, for a test to run it.

Usage: deploy_kubernetes.py OVERLAY_DIR [KUBERNETES_VERSION...]

The checks: the Service, PodDisruptionBudget and ServiceMonitor select the
Deployment's pods; every named port a Service, probe or ServiceMonitor uses
is declared, and each listener's address in the environment listens on its
container port; the probes ask the metrics listener for /ready and
/healthcheck; the container runs as nonroot on a read-only root with no
privilege escalation and no capability; the configuration is a ConfigMap
mounted as a directory (a subPath mount is never updated); each Secret and
ConfigMap named exists with the key named; the shutdown delay and grace
fit in terminationGracePeriodSeconds; a HorizontalPodAutoscaler scales the
Deployment, and only when the counters are shared (not on the in-memory
store).

Output (one line): {"args": [...], "env": {...}, "mount": "/etc/floodgate",
"files": {"name": "content"}, "replicas": N, "grace_seconds": N}
Exits 1 with the reason on the first failure.
"""

import base64
import json
import math
import re
import subprocess
import sys

import kubernetes_validate
import yaml

SERVICE_MONITOR_FIELDS = {
    "apiVersion", "kind", "metadata", "spec",
    "spec.selector", "spec.selector.matchLabels", "spec.endpoints",
    "spec.endpoints[].port", "spec.endpoints[].path", "spec.endpoints[].interval",
    "spec.endpoints[].scheme", "spec.endpoints[].scrapeTimeout",
}


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def render(overlay):
    out = subprocess.run(["kubectl", "kustomize", overlay], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"kubectl kustomize {overlay}: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def field_paths(node, prefix=""):
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            yield path
            if key not in ("metadata", "matchLabels"):
                yield from field_paths(value, path)
    elif isinstance(node, list):
        for value in node:
            yield from field_paths(value, prefix + "[]")


def validate(docs, versions):
    for doc in docs:
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            # A custom resource: Kubernetes has no schema for it; its
            # fields are checked against the ones the Prometheus Operator
            # defines that this file uses.
            unknown = set(field_paths(doc)) - SERVICE_MONITOR_FIELDS
            if unknown:
                fail(f"ServiceMonitor: unknown fields {sorted(unknown)}")
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                fail(f"{doc['kind']} {doc['metadata']['name']} (Kubernetes {version}): "
                     f"{e.message} at {'.'.join(map(str, e.path))}")


def one(docs, kind, required=True):
    found = [d for d in docs if d["kind"] == kind]
    if len(found) > 1 or (required and not found):
        fail(f"expected one {kind}, found {len(found)}")
    return found[0] if found else None


def selects(selector, labels, what):
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        fail(f"{what} selects {selector}, not the pods labelled {labels}")


def port_number(address):
    match = re.fullmatch(r"(?:\[[^\]]*\]|[^:]*):(\d+)", address)
    if not match:
        fail(f"listener address {address!r} has no port")
    return int(match.group(1))


def duration_seconds(text):
    match = re.fullmatch(r"(\d+)(ms|s|m)", text)
    if not match:
        fail(f"duration {text!r}")
    return int(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[match.group(2)]


def environment(container, docs):
    """The container's environment with references resolved as kubelet does."""
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
            continue
        source = var["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == ref["name"]]
            if not secret or ref["key"] not in secret[0].get("data", {}):
                fail(f"{var['name']}: no Secret {ref['name']} with key {ref['key']}")
            env[var["name"]] = base64.b64decode(secret[0]["data"][ref["key"]]).decode()
        elif "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            kind, resource = ref["resource"].split(".")
            value = container["resources"][kind][resource]
            cores = float(value[:-1]) / 1000 if value.endswith("m") else float(value)
            env[var["name"]] = str(math.ceil(cores / float(ref.get("divisor", "1"))))
        else:
            fail(f"{var['name']}: unsupported reference {sorted(source)}")
    return env


def check_security(pod, container):
    pod_ctx, ctx = pod.get("securityContext", {}), container.get("securityContext", {})
    if not pod_ctx.get("runAsNonRoot") or pod_ctx.get("runAsUser", 0) == 0:
        fail("the pod may run as root")
    if not ctx.get("readOnlyRootFilesystem"):
        fail("the root filesystem is writable")
    if ctx.get("allowPrivilegeEscalation") is not False:
        fail("privilege escalation is allowed")
    if ctx.get("capabilities", {}).get("drop") != ["ALL"]:
        fail("capabilities are not all dropped")


def check_ports(container, env, service, monitor):
    declared = {p["name"]: p["containerPort"] for p in container["ports"]}
    for port in service["spec"]["ports"]:
        if port["targetPort"] not in declared:
            fail(f"Service port {port['name']} targets the undeclared port {port['targetPort']}")
    for endpoint in monitor["spec"]["endpoints"]:
        if endpoint["port"] not in {p["name"] for p in service["spec"]["ports"]}:
            fail(f"the ServiceMonitor scrapes the Service's undeclared port {endpoint['port']}")
    listeners = {"grpc": "FLOODGATE_GRPC_ADDR", "http": "FLOODGATE_HTTP_ADDR",
                 "metrics": "FLOODGATE_METRICS_ADDR", "proxy": "FLOODGATE_GATEWAY_LISTEN"}
    for name, number in declared.items():
        var = listeners.get(name)
        if var is None or var not in env or port_number(env[var]) != number:
            fail(f"container port {name} ({number}) is not where {var} listens")
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container.get(kind, {}).get("httpGet")
        if not probe or probe["port"] != "metrics":
            fail(f"{kind} does not ask the metrics listener")
        expected = "/healthcheck" if kind == "livenessProbe" else "/ready"
        if probe["path"] != expected:
            fail(f"{kind} asks {probe['path']}, not {expected}")


def config_files(pod, container, docs):
    mounts = [m for m in container["volumeMounts"] if m["name"] == "config"]
    if len(mounts) != 1 or "subPath" in mounts[0]:
        fail("the configuration is not one ConfigMap mounted as a directory")
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    name = volume["configMap"]["name"]
    maps = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    if not maps:
        fail(f"the volume names the missing ConfigMap {name}")
    if mounts[0]["mountPath"] not in container["args"]:
        fail("the container is not given its mounted configuration")
    return mounts[0]["mountPath"], maps[0]["data"]


def check(docs):
    deployment, service = one(docs, "Deployment"), one(docs, "Service")
    pdb, monitor = one(docs, "PodDisruptionBudget"), one(docs, "ServiceMonitor")
    hpa = one(docs, "HorizontalPodAutoscaler", required=False)
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selects(deployment["spec"]["selector"]["matchLabels"], labels, "the Deployment")
    selects(service["spec"]["selector"], labels, "the Service")
    selects(pdb["spec"]["selector"]["matchLabels"], labels, "the PodDisruptionBudget")
    selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"], "the ServiceMonitor")
    container = pod["containers"][0]
    env = environment(container, docs)
    check_security(pod, container)
    check_ports(container, env, service, monitor)
    mount, files = config_files(pod, container, docs)
    grace = pod["terminationGracePeriodSeconds"]
    stop = duration_seconds(env["FLOODGATE_SHUTDOWN_DELAY"]) + duration_seconds(env["FLOODGATE_SHUTDOWN_GRACE"])
    if stop >= grace:
        fail(f"shutdown delay + grace ({stop} s) do not fit in terminationGracePeriodSeconds ({grace})")
    shared = env.get("FLOODGATE_STORE") == "redis"
    if hpa is not None:
        target = hpa["spec"]["scaleTargetRef"]
        if (target["kind"], target["name"]) != ("Deployment", deployment["metadata"]["name"]):
            fail(f"the autoscaler scales {target}, not the Deployment")
        if not shared:
            fail("an autoscaler multiplies the limits of the in-memory store")
    elif shared:
        fail("replicas sharing Redis are not autoscaled")
    if not shared and deployment["spec"]["replicas"] != 1:
        fail("several replicas on the in-memory store would each allow the whole limit")
    return {"args": container["args"], "env": env, "mount": mount, "files": files,
            "replicas": deployment["spec"]["replicas"], "grace_seconds": grace}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    rendered = render(sys.argv[1])
    validate(rendered, sys.argv[2:] or ["1.30.0", "1.37.0"])
    print(json.dumps(check(rendered)))
