"""The KServe example (k8s/kserve/) offline: the CRD fields this project relies on, the container as a
strictly validated Kubernetes container, and agreement with the server (port, probes on the protocol's
open health routes, protocol v2, model repository at KServe's model mount)."""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from deploy_testkit import K8S, K8S_SCHEMA_VERSION, ROOT

from service.http.auth import OPEN_PREFIXES
from service.v2 import routes as v2_models

# KServe's storage initializer downloads (or mounts) storageUri here.
KSERVE_MODEL_MOUNT = "/mnt/models"
DEFAULT_MODEL = (ROOT / "models" / "default").read_text().strip()

_STRICT_OBJECT = {"type": "object", "additionalProperties": False}
SERVING_RUNTIME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "serving.kserve.io/v1alpha1"},
        "kind": {"const": "ServingRuntime"},
        "spec": {
            **_STRICT_OBJECT,
            "required": ["supportedModelFormats", "protocolVersions", "containers"],
            "properties": {
                "supportedModelFormats": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        **_STRICT_OBJECT,
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "version": {"type": "string"},
                            "autoSelect": {"type": "boolean"},
                            "priority": {"type": "integer"},
                        },
                    },
                },
                "protocolVersions": {"type": "array", "items": {"enum": ["v1", "v2", "grpc-v1", "grpc-v2"]}},
                "containers": {"type": "array", "minItems": 1, "items": {"type": "object"}},
            },
        },
    },
}
INFERENCE_SERVICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "serving.kserve.io/v1beta1"},
        "kind": {"const": "InferenceService"},
        "spec": {
            **_STRICT_OBJECT,
            "required": ["predictor"],
            "properties": {
                "predictor": {
                    **_STRICT_OBJECT,
                    "required": ["model"],
                    "properties": {
                        "minReplicas": {"type": "integer", "minimum": 0},
                        "maxReplicas": {"type": "integer", "minimum": 1},
                        "model": {
                            **_STRICT_OBJECT,
                            "required": ["modelFormat", "storageUri"],
                            "properties": {
                                "modelFormat": {
                                    **_STRICT_OBJECT,
                                    "required": ["name"],
                                    "properties": {"name": {"type": "string"}, "version": {"type": "string"}},
                                },
                                "runtime": {"type": "string"},
                                "protocolVersion": {"enum": ["v1", "v2", "grpc-v2"]},
                                "storageUri": {"type": "string", "pattern": "^(pvc|s3|gs|https?)://"},
                            },
                        },
                    },
                },
            },
        },
    },
}


def load(name: str) -> dict[str, Any]:
    (obj,) = [doc for doc in yaml.safe_load_all((K8S / "kserve" / name).read_text()) if doc]
    return obj


@pytest.fixture(scope="module")
def runtime() -> dict[str, Any]:
    obj = load("servingruntime.yaml")
    jsonschema.validate(obj, SERVING_RUNTIME_SCHEMA)
    return obj


@pytest.fixture(scope="module")
def isvc() -> dict[str, Any]:
    obj = load("inferenceservice.yaml")
    jsonschema.validate(obj, INFERENCE_SERVICE_SCHEMA)
    return obj


def container_of(runtime: dict[str, Any]) -> dict[str, Any]:
    (container,) = runtime["spec"]["containers"]
    return container


def route_path(endpoint: Any) -> str:
    (path,) = [r.path for r in v2_models.router.routes if getattr(r, "endpoint", None) is endpoint]
    return path


def test_the_container_is_a_valid_kubernetes_container(runtime: dict[str, Any]) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}}
    pod["spec"] = {"containers": [container_of(runtime)]}
    kubernetes_validate.validate(pod, K8S_SCHEMA_VERSION, strict=True)
    assert container_of(runtime)["name"] == "kserve-container"  # the container KServe sends traffic to


def test_the_inference_service_uses_the_runtime_with_protocol_v2(
    runtime: dict[str, Any], isvc: dict[str, Any]
) -> None:
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["protocolVersion"] == "v2" and "v2" in runtime["spec"]["protocolVersions"]
    formats = {(f["name"], f.get("version")) for f in runtime["spec"]["supportedModelFormats"]}
    assert (model["modelFormat"]["name"], model["modelFormat"].get("version")) in formats
    # The repository's root (models/<name>/<version>/), named after the repository's default model.
    assert model["storageUri"].endswith("/") and isvc["metadata"]["name"] == DEFAULT_MODEL


def test_settings_port_probes_and_model_path_agree_with_the_server(
    runtime: dict[str, Any], load_settings
) -> None:
    container = container_of(runtime)
    settings = load_settings({e["name"]: e["value"] for e in container["env"]})
    assert settings.host == "0.0.0.0"
    assert settings.model_repository.as_posix() == KSERVE_MODEL_MOUNT
    assert not settings.repository_api  # KServe rolls out models as revisions; no live admin endpoints
    # KServe routes one port per container (HTTP here); gRPC listens on a port of its own, which an
    # InferenceService picks by naming it h2c (servingruntime.yaml).
    assert [p["containerPort"] for p in container["ports"]] == [settings.port]
    assert settings.grpc_port is not None and settings.grpc_port != settings.port
    ready, live = route_path(v2_models.server_ready), route_path(v2_models.server_live)
    assert container["livenessProbe"]["httpGet"]["path"] == live
    assert container["readinessProbe"]["httpGet"]["path"] == ready
    assert container["startupProbe"]["httpGet"]["path"] == ready
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] == settings.port
        assert container[probe]["httpGet"]["path"].startswith(OPEN_PREFIXES), "probes send no API key"


def test_every_env_variable_is_a_setting(runtime: dict[str, Any], settings_env_names: set[str]) -> None:
    names = {e["name"] for e in container_of(runtime)["env"]}
    assert names <= settings_env_names, names - settings_env_names
