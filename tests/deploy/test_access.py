"""Who can reach the server, and with what: the metrics port, the API key Secret, the NetworkPolicy.

The settings come from the rendered ConfigMap loaded through the service's `Settings`; everything else
from the rendered manifests. Each check is a function returning its problems, so the guard tests at the
end can show that it fails on a manifest that is wrong.
"""

from __future__ import annotations

import copy
import re
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml
from deploy_testkit import (
    INGRESS_NAMESPACE,
    K8S,
    MONITORING_NAMESPACE,
    NAMESPACE_NAME_LABEL,
    OPEN_PATH_PREFIX,
    ROOT,
    SERVING_KUSTOMIZATIONS,
    container_port,
    one,
    pod_spec,
    service_port_targets,
)

DOCS = ROOT / "docs" / "deployment.md"
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def _server(objects: list[dict[str, Any]], load_settings) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(settings, pod spec, server container) of a rendered serving kustomization."""
    settings = load_settings(one(objects, "ConfigMap")["data"])
    spec = pod_spec(one(objects, "Deployment"))
    return settings, spec, spec["containers"][0]


# ------------------------------------------------------------------------------------------ the checks
def metrics_port_problems(
    objects: list[dict[str, Any]], settings: Any, container: dict[str, Any]
) -> list[str]:
    """DETECT_METRICS_PORT, the container port, the Service port and the ServiceMonitor agree."""
    metrics_port = settings.metrics_port
    if metrics_port is None or metrics_port == settings.port:
        return [f"DETECT_METRICS_PORT={metrics_port}: /metrics must have a port of its own"]
    problems = []
    if container_port(container, "metrics") != metrics_port:
        problems.append(f"container port 'metrics' is not DETECT_METRICS_PORT={metrics_port}")
    targets = service_port_targets(one(objects, "Service"), container)
    if targets.get("metrics") != metrics_port:
        problems.append(f"Service port 'metrics' forwards to {targets.get('metrics')}, not {metrics_port}")
    for endpoint in one(objects, "ServiceMonitor")["spec"]["endpoints"]:
        if targets.get(endpoint.get("port")) != metrics_port:
            problems.append(f"ServiceMonitor scrapes port {endpoint.get('port')!r}, not the metrics port")
    return problems


def probe_problems(settings: Any, container: dict[str, Any]) -> list[str]:
    """Probes use the API port and paths the server leaves open (no API key on the kubelet's requests)."""
    problems = []
    for name in PROBES:
        probe = container[name]["httpGet"]
        if not probe["path"].startswith(OPEN_PATH_PREFIX):
            problems.append(f"{name} path {probe['path']} needs an API key (open: {OPEN_PATH_PREFIX}*)")
        if container_port(container, probe["port"]) != settings.port:
            problems.append(f"{name} port {probe['port']} is not the API port {settings.port}")
        if probe.get("httpHeaders"):
            problems.append(f"{name} sends headers: the probe paths need no key")
    return problems


def api_key_problems(settings: Any, spec: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """DETECT_API_KEYS_FILE is a file of a required Secret volume, mounted read-only."""
    if settings.api_keys_file is None:
        return ["DETECT_API_KEYS_FILE is not set: the API would be open"]
    if settings.api_keys is not None:
        return ["DETECT_API_KEYS is set in the ConfigMap: keys belong in the Secret"]
    path = PurePosixPath(str(settings.api_keys_file))
    mounts = [m for m in container["volumeMounts"] if PurePosixPath(m["mountPath"]) == path.parent]
    if len(mounts) != 1:
        return [f"no volume is mounted at {path.parent} (DETECT_API_KEYS_FILE={path})"]
    mount = mounts[0]
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    secret = volume.get("secret")
    if secret is None:
        return [f"{path.parent} is not a Secret volume"]
    problems = []
    if mount.get("readOnly") is not True:
        problems.append(f"{path.parent} must be mounted read-only")
    if mount.get("subPath"):
        problems.append(f"{path.parent}: a subPath mount never sees an updated Secret")
    if secret.get("optional") is True:
        problems.append(f"Secret {secret['secretName']} is optional: a pod without keys must not start")
    keys = [item["key"] for item in secret.get("items", []) if item["path"] == path.name]
    if "items" in secret and not keys:
        problems.append(f"Secret {secret['secretName']} has no item at {path.name}")
    return problems


def network_policy_problems(policy: dict[str, Any], settings: Any, container: dict[str, Any]) -> list[str]:
    """Every rule names its sources and ports: the API ports (HTTP, gRPC) from the ingress controller's
    namespace only, the metrics port from Prometheus's namespace only."""
    if "Ingress" not in policy["spec"].get("policyTypes", []):
        return ["the NetworkPolicy does not restrict ingress"]
    problems = []
    admitted: dict[int | None, set[str | None]] = {}
    for number, rule in enumerate(policy["spec"].get("ingress", [])):
        if not rule.get("from"):
            problems.append(f"ingress rule {number} has no `from`: it admits every source")
        if not rule.get("ports"):
            problems.append(f"ingress rule {number} has no `ports`: it admits every port")
        sources = set()
        for peer in rule.get("from", []):
            selector = peer.get("namespaceSelector")
            if "ipBlock" in peer or selector is None:
                problems.append(f"ingress rule {number}: source {peer} is not a namespace")
            sources.add((selector or {}).get("matchLabels", {}).get(NAMESPACE_NAME_LABEL))
        for port in rule.get("ports", []):
            if "endPort" in port:
                problems.append(f"ingress rule {number} admits a port range")
            admitted.setdefault(container_port(container, port.get("port", "")), set()).update(sources)
    expected = {settings.port: {INGRESS_NAMESPACE}, settings.metrics_port: {MONITORING_NAMESPACE}}
    if settings.grpc_port is not None:  # the API over gRPC: from where the API is reached
        expected[settings.grpc_port] = {INGRESS_NAMESPACE}
    if admitted != expected:
        problems.append(f"the NetworkPolicy admits {admitted}, expected {expected} ({{port: namespaces}})")
    return problems


# ------------------------------------------------------------------------------------------ the tests
@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_metrics_have_their_own_port_everywhere(rendered, load_settings, kustomization):
    objects = rendered[kustomization]
    settings, _, container = _server(objects, load_settings)
    assert metrics_port_problems(objects, settings, container) == []


def grpc_port_problems(objects: list[dict[str, Any]], settings: Any, container: dict[str, Any]) -> list[str]:
    """DETECT_GRPC_PORT, the container port ``grpc`` and the Service port ``grpc`` agree."""
    grpc_port = settings.grpc_port
    if grpc_port is None or grpc_port in (settings.port, settings.metrics_port):
        return [f"DETECT_GRPC_PORT={grpc_port}: gRPC must have a port of its own"]
    problems = []
    if container_port(container, "grpc") != grpc_port:
        problems.append(f"container port 'grpc' is not DETECT_GRPC_PORT={grpc_port}")
    targets = service_port_targets(one(objects, "Service"), container)
    if targets.get("grpc") != grpc_port:
        problems.append(f"Service port 'grpc' forwards to {targets.get('grpc')}, not {grpc_port}")
    return problems


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_grpc_has_its_own_port_everywhere(rendered, load_settings, kustomization):
    objects = rendered[kustomization]
    settings, _, container = _server(objects, load_settings)
    assert grpc_port_problems(objects, settings, container) == []
    broken = copy.deepcopy(objects)
    service = one(broken, "Service")
    service["spec"]["ports"] = [p for p in service["spec"]["ports"] if p["name"] != "grpc"]
    assert grpc_port_problems(broken, settings, container) == [
        f"Service port 'grpc' forwards to None, not {settings.grpc_port}"
    ]


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_probes_stay_open(rendered, load_settings, kustomization):
    settings, _, container = _server(rendered[kustomization], load_settings)
    assert probe_problems(settings, container) == []


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_api_keys_come_from_a_required_secret(rendered, load_settings, kustomization):
    objects = rendered[kustomization]
    settings, spec, container = _server(objects, load_settings)
    assert api_key_problems(settings, spec, container) == []
    assert not [obj for obj in objects if obj["kind"] == "Secret"], (
        "no Secret is rendered from the repository"
    )


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_network_policy_admits_only_ingress_and_prometheus(rendered, load_settings, kustomization):
    objects = rendered[kustomization]
    settings, _, container = _server(objects, load_settings)
    assert network_policy_problems(one(objects, "NetworkPolicy"), settings, container) == []


def test_no_secret_or_key_is_committed():
    for path in sorted(K8S.rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text()
        assert not re.search(r"\bDETECT_API_KEYS\s*[=:]", text), f"{path.relative_to(ROOT)} sets API keys"
        if path.suffix in (".yaml", ".yml"):
            kinds = {doc.get("kind") for doc in yaml.safe_load_all(text) if isinstance(doc, dict)}
            assert "Secret" not in kinds, f"{path.relative_to(ROOT)} holds a Secret"


def test_docs_create_the_secret_the_pods_mount(rendered, load_settings):
    objects = rendered["base"]
    settings, spec, container = _server(objects, load_settings)
    mount_dir = str(PurePosixPath(str(settings.api_keys_file)).parent)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == mount_dir)
    secret = next(v for v in spec["volumes"] if v["name"] == mount["name"])["secret"]
    file_name = PurePosixPath(str(settings.api_keys_file)).name
    key = next((i["key"] for i in secret.get("items", []) if i["path"] == file_name), file_name)
    created = re.findall(
        r"kubectl -n (\S+) create secret generic (\S+) --from-file=([^=\s]+)=", DOCS.read_text()
    )
    assert created, "docs/deployment.md must say how to create the API key Secret"
    namespace = one(objects, "Deployment")["metadata"]["namespace"]
    assert set(created) == {(namespace, secret["secretName"], key)}


# ------------------------------------------------------------------------------------------ guards
def _broken_copies(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rendered objects with one known mistake each."""
    copies: dict[str, list[dict[str, Any]]] = {}

    def broken(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        copies[name] = copy.deepcopy(objects)
        return one(copies[name], "Deployment"), one(copies[name], "NetworkPolicy")

    _, policy = broken("rule without from")
    del policy["spec"]["ingress"][0]["from"]
    _, policy = broken("any namespace")
    policy["spec"]["ingress"][0]["from"] = [{"namespaceSelector": {}}]
    _, policy = broken("ipBlock source")
    policy["spec"]["ingress"][1]["from"].append({"ipBlock": {"cidr": "0.0.0.0/0"}})
    _, policy = broken("namespaces swapped")
    rules = policy["spec"]["ingress"]
    rules[0]["from"], rules[1]["from"] = rules[1]["from"], rules[0]["from"]
    _, policy = broken("rule without ports")
    del policy["spec"]["ingress"][1]["ports"]
    deployment, _ = broken("optional secret")
    next(v for v in pod_spec(deployment)["volumes"] if "secret" in v)["secret"]["optional"] = True
    deployment, _ = broken("keys mounted elsewhere")
    next(m for m in pod_spec(deployment)["containers"][0]["volumeMounts"] if "api-keys" in m["mountPath"])[
        "mountPath"
    ] = "/etc/elsewhere"
    deployment, _ = broken("probe on a keyed path")
    pod_spec(deployment)["containers"][0]["readinessProbe"]["httpGet"]["path"] = "/v1/models"
    copies["monitor scrapes http"] = copy.deepcopy(objects)
    one(copies["monitor scrapes http"], "ServiceMonitor")["spec"]["endpoints"][0]["port"] = "http"
    return copies


def test_the_access_checks_catch_mistakes(rendered, load_settings):
    """Each check fails on a manifest with a mistake it is meant to catch (guards the tests above)."""
    for mistake, objects in _broken_copies(rendered["overlays/cpu"]).items():
        settings, spec, container = _server(objects, load_settings)
        problems = (
            metrics_port_problems(objects, settings, container)
            + probe_problems(settings, container)
            + api_key_problems(settings, spec, container)
            + network_policy_problems(one(objects, "NetworkPolicy"), settings, container)
        )
        assert problems, f"no check noticed: {mistake}"
    objects = rendered["overlays/cpu"]
    data = one(objects, "ConfigMap")["data"]
    _, spec, container = _server(objects, load_settings)
    for name in ("DETECT_METRICS_PORT", "DETECT_API_KEYS_FILE"):
        settings = load_settings({key: value for key, value in data.items() if key != name})
        problems = metrics_port_problems(objects, settings, container)
        problems += api_key_problems(settings, spec, container)
        assert any(name in problem for problem in problems), f"no check noticed that {name} is unset"
