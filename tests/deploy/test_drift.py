"""Deployment vs. service: every path, port, setting and metric the manifests, the Dockerfile and the
docs name exists in the service's code.

The service side is read from the code, never restated: paths from the routers `service.app.create_app`
mounts, DETECT_* names from `Settings.model_fields` and its env prefix, metric names from the registry
of `service.runtime.metrics.ServiceMetrics`.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from deploy_testkit import (
    IMAGE_TARGETS,
    K8S,
    KUSTOMIZATIONS,
    OPEN_PATH_PREFIX,
    ROOT,
    SERVE_TARGETS,
    SERVING_KUSTOMIZATIONS,
    container_env_names,
    container_port,
    effective_env,
    objects_of,
    one,
    pod_spec,
    settings_env_prefix,
)
from pydantic import TypeAdapter

from service.streams.schemas import DeclaredStream

ADAPTER_RULES = K8S / "monitoring" / "prometheus-adapter-rules.yaml"
DOCS = ROOT / "docs" / "deployment.md"


def _detect_names(text: str) -> set[str]:
    return set(re.findall(rf"\b{settings_env_prefix()}[A-Z0-9_]+\b", text))


# ----------------------------------------------------------------------------------- probes and ports
@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_probes_hit_the_real_health_routes(rendered, service_routes, kustomization):
    container = pod_spec(one(rendered[kustomization], "Deployment"))["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == service_routes.live
    assert container["readinessProbe"]["httpGet"]["path"] == service_routes.ready
    # The startup probe covers model load and warm-up: only readiness says that they finished.
    assert container["startupProbe"]["httpGet"]["path"] == service_routes.ready
    # The probes send no API key: their routes must be where the server leaves requests open.
    for path in (service_routes.live, service_routes.ready):
        assert path.startswith(OPEN_PATH_PREFIX), f"{path} is not under the open {OPEN_PATH_PREFIX}"


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_ports_agree_with_the_settings(rendered, load_settings, kustomization):
    objects = rendered[kustomization]
    settings = load_settings(one(objects, "ConfigMap")["data"])
    assert settings.host == "0.0.0.0", "in a pod the server must listen on all interfaces"
    container = pod_spec(one(objects, "Deployment"))["containers"][0]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["http"] == settings.port
    assert ports["grpc"] == settings.grpc_port
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in ("http", settings.port)
    service = one(objects, "Service")
    service_ports = {port["name"]: port for port in service["spec"]["ports"]}
    assert service_ports["http"]["targetPort"] in ("http", settings.port)
    # Who may reach which port: test_access.py.
    policy = one(objects, "NetworkPolicy")
    allowed = {
        container_port(container, p["port"]) for rule in policy["spec"]["ingress"] for p in rule["ports"]
    }
    assert allowed == {settings.port, settings.grpc_port, settings.metrics_port}, (
        f"ingress: the API (HTTP and gRPC) and metrics ports, not {allowed}"
    )


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_service_monitor_scrapes_the_metrics_route(rendered, service_routes, kustomization):
    objects = rendered[kustomization]
    service_ports = {port["name"] for port in one(objects, "Service")["spec"]["ports"]}
    for endpoint in one(objects, "ServiceMonitor")["spec"]["endpoints"]:
        assert endpoint["path"] == service_routes.metrics
        assert endpoint["port"] in service_ports


# ----------------------------------------------------------------------------------- DETECT_* settings
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_manifest_settings_exist_and_load(rendered, settings_env_names, load_settings, kustomization):
    objects = rendered[kustomization]
    for configmap in objects_of(objects, "ConfigMap"):
        if "grafana_dashboard" in configmap["metadata"].get("labels", {}):
            continue  # a dashboard for Grafana's sidecar (k8s/monitoring), not the server's settings
        if configmap["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "streams-file":
            # DETECT_STREAMS_FILE's content (k8s/examples/streams): streams the server can declare.
            streams = TypeAdapter(list[DeclaredStream]).validate_json(configmap["data"]["streams.json"])
            assert streams, f"k8s/{kustomization}: an empty streams file"
            continue
        data = configmap.get("data", {})
        prefixed = {key for key in data if key.startswith(settings_env_prefix())}
        assert prefixed == set(data), f"non-setting keys in {configmap['metadata']['name']}"
        unknown = prefixed - settings_env_names
        assert not unknown, f"k8s/{kustomization}: no Settings field for {sorted(unknown)}"
        load_settings(data)  # the values are valid for their fields, too
    unknown = _detect_names(str(container_env_names(objects))) - settings_env_names
    assert not unknown, f"k8s/{kustomization}: container env {sorted(unknown)} is not a setting"


def test_every_detect_name_in_k8s_files_is_a_setting(settings_env_names):
    """Also catches names in comments and in files the tests do not render (e.g. patches, settings.env)."""
    for path in sorted(K8S.rglob("*")):
        if path.is_file():
            unknown = _detect_names(path.read_text()) - settings_env_names
            assert not unknown, f"{path.relative_to(ROOT)} names {sorted(unknown)}, which are not settings"


@pytest.mark.parametrize("target", IMAGE_TARGETS)
def test_dockerfile_settings_exist_and_load(dockerfile, settings_env_names, load_settings, target):
    env = effective_env(dockerfile, target)
    detect_env = {key: value for key, value in env.items() if key.startswith(settings_env_prefix())}
    unknown = set(detect_env) - settings_env_names
    assert not unknown, f"Dockerfile target {target}: {sorted(unknown)} are not settings"
    settings = load_settings(detect_env)
    if target in SERVE_TARGETS:
        assert settings.host == "0.0.0.0", f"{target} must listen on all interfaces"


def test_every_detect_name_in_the_dockerfile_is_a_setting(settings_env_names):
    unknown = _detect_names((ROOT / "Dockerfile").read_text()) - settings_env_names
    assert not unknown, f"Dockerfile names {sorted(unknown)}, which are not settings"


@pytest.mark.parametrize("target", SERVE_TARGETS)
def test_image_port_healthcheck_and_volume_match_the_service(
    dockerfile, service_routes, load_settings, target
):
    stage = dockerfile.stages[target]
    settings = load_settings(
        {k: v for k, v in effective_env(dockerfile, target).items() if k.startswith(settings_env_prefix())}
    )
    assert stage.last("EXPOSE") == str(settings.port)
    healthcheck = stage.last("HEALTHCHECK")
    assert healthcheck is not None and service_routes.live in healthcheck
    assert "DETECT_PORT" in healthcheck, "the health check must follow the configured port"
    volumes = stage.last("VOLUME")
    assert volumes is not None and str(settings.model_repository) in yaml.safe_load(volumes)


# ----------------------------------------------------------------------------------- metrics and HPA
def _adapter_rules() -> list[dict[str, Any]]:
    values = yaml.safe_load(ADAPTER_RULES.read_text())
    return values["rules"]["custom"]


def _series_name(rule: dict[str, Any]) -> str:
    match = re.match(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", rule["seriesQuery"])
    assert match, f"cannot read the metric name of {rule['seriesQuery']!r}"
    return match.group(1)


def test_adapter_rules_expose_real_gauges(metric_families):
    rules = _adapter_rules()
    assert rules
    for rule in rules:
        series = _series_name(rule)
        assert metric_families.get(series) == "gauge", f"{series} is not a gauge of ServiceMetrics"
        assert re.fullmatch(rule["name"]["matches"], series)
        assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
        assert rule["resources"]["overrides"]["namespace"] == {"resource": "namespace"}
        assert "<<.Series>>" in rule["metricsQuery"] and "<<.LabelMatchers>>" in rule["metricsQuery"]


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_hpa_scales_on_a_service_metric_the_adapter_serves(rendered, metric_families, kustomization):
    hpa = one(rendered[kustomization], "HorizontalPodAutoscaler")
    metrics = hpa["spec"]["metrics"]
    served = {rule["name"]["as"]: _series_name(rule) for rule in _adapter_rules()}
    pods_metrics = [m["pods"]["metric"]["name"] for m in metrics if m["type"] == "Pods"]
    assert pods_metrics, "the HPA must scale on the service's own load signal"
    for name in pods_metrics:
        assert name in served, f"no adapter rule serves {name}"
        assert metric_families.get(served[name]) == "gauge"
    fallback = [m for m in metrics if m["type"] == "Resource"]
    assert [m["resource"]["name"] for m in fallback] == ["cpu"], "CPU utilization is the fallback"


def test_docs_name_only_real_metrics_and_settings(metric_families, settings_env_names):
    text = DOCS.read_text()
    suffixes = ("_bucket", "_sum", "_count", "_total", "_created")
    for name in set(re.findall(r"\bdetect_[a-z0-9_]+\b", text)):
        stems = [name[: -len(s)] for s in suffixes if name.endswith(s)]
        family = next((stem for stem in stems if stem in metric_families), name)
        assert family in metric_families, f"docs/deployment.md names metric {name}, which the service lacks"
    unknown = _detect_names(text) - settings_env_names
    assert not unknown, f"docs/deployment.md names {sorted(unknown)}, which are not settings"


def test_docs_exist_where_the_manifests_point():
    assert DOCS.is_file()
    for path in ("k8s/tools/model-loader.yaml", "k8s/monitoring/prometheus-adapter-rules.yaml"):
        assert (ROOT / path).is_file() and path in DOCS.read_text()
