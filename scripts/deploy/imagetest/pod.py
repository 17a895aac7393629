"""The Deployment's runtime settings, read from the rendered manifests (``kubectl kustomize``).

Nothing here restates a manifest: user, groups, read-only root, capabilities, privilege escalation,
environment (the ConfigMap behind ``envFrom``), volumes, memory limit, probes and the grace period all
come from the rendered Deployment, so the container runs as the pod would."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


@dataclass
class Probe:
    path: str
    port: int
    period_s: float
    timeout_s: float
    failure_threshold: int


@dataclass
class Mount:
    """A volumeMount with what backs it: kind is persistentVolumeClaim, emptyDir or secret."""

    name: str
    path: str
    read_only: bool
    kind: str
    secret_items: dict[str, str] = field(default_factory=dict)  # Secret key -> file name
    default_mode: int = 0o644


@dataclass
class PodRuntime:
    container: str
    user: int
    group: int
    fs_group: int | None
    run_as_non_root: bool
    read_only_root: bool
    allow_privilege_escalation: bool
    drop_capabilities: list[str]
    seccomp: str | None
    env: dict[str, str]
    memory_limit_bytes: int
    cpu_limit: str | None
    ports: dict[str, int]
    mounts: list[Mount]
    probes: dict[str, Probe]
    grace_period_s: int
    pre_stop: list[str]


def render(kustomization: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise RuntimeError("kubectl is not installed: it renders the manifests (kubectl kustomize)")
    result = subprocess.run(
        [kubectl, "kustomize", str(kustomization)], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {kustomization} failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def quantity_bytes(quantity: str | int) -> int:
    match = re.fullmatch(r"([0-9]+)([a-zA-Z]*)", str(quantity))
    if not match or match.group(2) not in _UNITS:
        raise ValueError(f"unsupported memory quantity {quantity!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    if len(found) != 1:
        raise ValueError(f"expected one {kind}{' ' + name if name else ''} in the render, found {len(found)}")
    return found[0]


def _env(objects: list[dict[str, Any]], container: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" not in source:
            raise ValueError(f"envFrom {source} is not a configMapRef: not supported here")
        data = _one(objects, "ConfigMap", source["configMapRef"]["name"]).get("data", {})
        env.update({source.get("prefix", "") + key: str(value) for key, value in data.items()})
    for item in container.get("env", []):
        if "value" not in item:
            raise ValueError(f"env {item['name']} is not a plain value: not supported here")
        env[item["name"]] = str(item["value"])
    return env


def _probe(probe: dict[str, Any], ports: dict[str, int]) -> Probe:
    get = probe["httpGet"]
    port = get["port"]
    return Probe(
        path=get["path"],
        port=ports[port] if isinstance(port, str) else int(port),
        period_s=float(probe.get("periodSeconds", 10)),
        timeout_s=float(probe.get("timeoutSeconds", 1)),
        failure_threshold=int(probe.get("failureThreshold", 3)),
    )


def _mounts(spec: dict[str, Any], container: dict[str, Any]) -> list[Mount]:
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = []
    for volume_mount in container.get("volumeMounts", []):
        volume = volumes[volume_mount["name"]]
        kinds = [k for k in ("persistentVolumeClaim", "emptyDir", "secret") if k in volume]
        if not kinds:
            raise ValueError(
                f"volume {volume['name']}: only PVC, emptyDir and Secret volumes are supported here"
            )
        secret = volume.get("secret", {})
        mounts.append(
            Mount(
                name=volume["name"],
                path=volume_mount["mountPath"],
                read_only=bool(volume_mount.get("readOnly", False)),
                kind=kinds[0],
                secret_items={i["key"]: i["path"] for i in secret.get("items", [])},
                default_mode=int(secret.get("defaultMode", 0o644)),
            )
        )
    return mounts


def pod_runtime(objects: list[dict[str, Any]], deployment: str, container_name: str) -> PodRuntime:
    """The runtime settings of one container of one Deployment in a render."""
    spec = _one(objects, "Deployment", deployment)["spec"]["template"]["spec"]
    container = next(c for c in spec["containers"] if c["name"] == container_name)
    pod_sc = spec.get("securityContext", {})
    sc = {**pod_sc, **container.get("securityContext", {})}
    ports = {p["name"]: int(p["containerPort"]) for p in container.get("ports", []) if "name" in p}
    limits = container.get("resources", {}).get("limits", {})
    if "memory" not in limits:
        raise ValueError(f"container {container_name} has no memory limit")
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    return PodRuntime(
        container=container_name,
        user=int(sc["runAsUser"]),
        group=int(sc.get("runAsGroup", sc["runAsUser"])),
        fs_group=int(pod_sc["fsGroup"]) if "fsGroup" in pod_sc else None,
        run_as_non_root=bool(sc.get("runAsNonRoot", False)),
        read_only_root=bool(sc.get("readOnlyRootFilesystem", False)),
        allow_privilege_escalation=bool(sc.get("allowPrivilegeEscalation", True)),
        drop_capabilities=list(sc.get("capabilities", {}).get("drop", [])),
        seccomp=sc.get("seccompProfile", {}).get("type"),
        env=_env(objects, container),
        memory_limit_bytes=quantity_bytes(limits["memory"]),
        cpu_limit=str(limits["cpu"]) if "cpu" in limits else None,
        ports=ports,
        mounts=_mounts(spec, container),
        probes={
            kind: _probe(container[kind], ports)
            for kind in ("startupProbe", "readinessProbe", "livenessProbe")
            if kind in container
        },
        grace_period_s=int(spec.get("terminationGracePeriodSeconds", 30)),
        pre_stop=[str(part) for part in pre_stop],
    )
