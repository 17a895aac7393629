"""The Kubernetes manifests render with kustomize and validate offline against the API schema.

Every rendered object is validated with kubernetes-validate (strict: unknown fields fail) against the
Kubernetes version in `deploy_testkit.K8S_SCHEMA_VERSION`. Kinds defined by CRDs are not in that
schema: the Prometheus Operator's ServiceMonitor is checked against a small schema of its own here
(`SERVICE_MONITOR_SCHEMA`, the subset of monitoring.coreos.com/v1 these manifests use); any other kind
without a schema fails the test rather than being skipped.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from deploy_testkit import (
    K8S_SCHEMA_VERSION,
    KUSTOMIZATIONS,
    SERVING_KUSTOMIZATIONS,
    one,
    pod_labels,
    pod_spec,
    pvc_claims,
    quantity_bytes,
    selects,
)

# The subset of the ServiceMonitor CRD (prometheus-operator, monitoring.coreos.com/v1) used here,
# with the CRD's types; unknown fields are rejected so a typo cannot pass unnoticed.
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": {"type": "object"}},
    },
}
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "jobLabel": {"type": "string"},
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "targetPort": {"type": ["integer", "string"]},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "honorLabels": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    },
}
# The PrometheusRule CRD's rule groups (k8s/monitoring); the PromQL itself is checked by promtool
# (tests/deploy/test_monitoring.py).
_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["expr"],
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
    "properties": {
        "record": {"type": "string"},
        "alert": {"type": "string"},
        "expr": {"type": "string", "minLength": 1},
        "for": _DURATION,
        "keep_firing_for": _DURATION,
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
PROMETHEUS_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string"},
                            "interval": _DURATION,
                            "rules": {"type": "array", "minItems": 1, "items": _RULE},
                        },
                    },
                },
            },
        },
    },
}
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR_SCHEMA,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE_SCHEMA,
}

SERVING_KINDS = {
    "Namespace",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Deployment",
    "Service",
    "PodDisruptionBudget",
    "NetworkPolicy",
    "ServiceMonitor",
    "HorizontalPodAutoscaler",
}


def _validate(obj: dict[str, Any], where: str) -> None:
    name = f"{where}: {obj['kind']}/{obj['metadata']['name']}"
    crd_schema = CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
    if crd_schema is not None:
        try:
            jsonschema.validate(obj, crd_schema)
        except jsonschema.ValidationError as exc:
            pytest.fail(f"{name} does not match the {obj['kind']} schema: {exc.message} at {list(exc.path)}")
        return
    try:
        kubernetes_validate.validate(obj, K8S_SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(part) for part in exc.path)
        pytest.fail(f"{name} is invalid for Kubernetes {K8S_SCHEMA_VERSION}: {path}: {exc.message}")
    except kubernetes_validate.SchemaNotFoundError as exc:
        pytest.fail(f"{name}: {exc.message} (add a schema check for it)")


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_kustomization_renders_and_validates(rendered, kustomization):
    objects = rendered[kustomization]
    assert objects, f"k8s/{kustomization} renders nothing"
    for obj in objects:
        _validate(obj, f"k8s/{kustomization}")
    names = [(obj["kind"], obj["metadata"]["name"]) for obj in objects]
    assert len(names) == len(set(names)), f"duplicate objects in k8s/{kustomization}"


def test_plain_manifests_validate(plain_manifests):
    for name, objects in plain_manifests.items():
        assert objects, f"k8s/{name} is empty"
        for obj in objects:
            _validate(obj, f"k8s/{name}")


def test_the_schema_check_rejects_unknown_fields(rendered):
    """Strict validation really is strict: a misspelled probe field fails (guards the checks above)."""
    deployment = one(rendered["overlays/cpu"], "Deployment")
    container = pod_spec(deployment)["containers"][0]
    container["livenessProbe"]["httpGett"] = container["livenessProbe"].pop("httpGet")
    try:
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(deployment, K8S_SCHEMA_VERSION, strict=True)
    finally:
        container["livenessProbe"]["httpGet"] = container["livenessProbe"].pop("httpGett")
    monitor = one(rendered["overlays/cpu"], "ServiceMonitor")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**monitor, "spec": {**monitor["spec"], "endpoint": []}}, SERVICE_MONITOR_SCHEMA)


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_serving_kustomization_has_every_piece(rendered, kustomization):
    objects = rendered[kustomization]
    assert {obj["kind"] for obj in objects} >= SERVING_KINDS
    deployment = one(objects, "Deployment")
    labels = pod_labels(deployment)
    assert selects(deployment["spec"]["selector"]["matchLabels"], labels)
    for kind in ("Service", "PodDisruptionBudget"):
        selector = one(objects, kind)["spec"]["selector"]
        assert selects(selector.get("matchLabels", selector), labels), f"{kind} does not select the pods"
    assert selects(one(objects, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"], labels)
    service = one(objects, "Service")
    monitor_selector = one(objects, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    assert selects(monitor_selector, service["metadata"]["labels"])
    hpa = one(objects, "HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    assert hpa["spec"]["minReplicas"] >= 2, "with maxUnavailable 1 in the PDB, keep a replica serving"
    # envFrom names the generated (hashed) ConfigMap.
    configmap = one(objects, "ConfigMap")
    refs = [ref["configMapRef"]["name"] for ref in pod_spec(deployment)["containers"][0]["envFrom"]]
    assert refs == [configmap["metadata"]["name"]]


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_models_come_from_the_pvc(rendered, kustomization):
    objects = rendered[kustomization]
    spec = pod_spec(one(objects, "Deployment"))
    pvc_names = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "PersistentVolumeClaim"}
    claims = pvc_claims(spec)
    mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    repository = one(objects, "ConfigMap")["data"]["DETECT_MODEL_REPOSITORY"]
    assert repository in mounts, f"nothing is mounted at DETECT_MODEL_REPOSITORY={repository}"
    mount = mounts[repository]
    assert mount["name"] in claims and claims[mount["name"]] in pvc_names
    assert mount.get("readOnly") is True, "servers only read the model repository"


def _all_pod_templates(rendered, plain_manifests):
    for where, objects in [*rendered.items(), *plain_manifests.items()]:
        for obj in objects:
            if obj["kind"] in ("Deployment", "Job", "Pod"):
                yield where, obj


def test_every_pod_is_locked_down(rendered, plain_manifests, dockerfile):
    image_uids = {
        int(stage.last("USER").split(":")[0]) for stage in dockerfile.stages.values() if stage.last("USER")
    }
    assert len(image_uids) == 1, f"the images run as different users: {image_uids}"
    (uid,) = image_uids
    for where, obj in _all_pod_templates(rendered, plain_manifests):
        name = f"k8s/{where}: {obj['kind']}/{obj['metadata']['name']}"
        spec = pod_spec(obj)
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True, name
        assert pod_sc["runAsUser"] == uid, f"{name}: runAsUser must be the image's user {uid}"
        assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec.get("automountServiceAccountToken") is False, name
        tmp_volumes = {vol["name"] for vol in spec["volumes"] if "emptyDir" in vol}
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert "add" not in sc["capabilities"], name
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts.get("/tmp") in tmp_volumes, f"{name}: /tmp must be an emptyDir"
            resources = container["resources"]
            assert resources.get("requests") and resources.get("limits", {}).get("memory"), name


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_termination_grace_covers_the_drain(rendered, kustomization):
    """preStop pause + DETECT_DRAIN_TIMEOUT_S + uvicorn's connection close (5 s) + margin fit the grace."""
    objects = rendered[kustomization]
    spec = pod_spec(one(objects, "Deployment"))
    container = spec["containers"][0]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2, command
    pre_stop_s = float(command[1])
    drain_s = float(one(objects, "ConfigMap")["data"]["DETECT_DRAIN_TIMEOUT_S"])
    uvicorn_close_s, margin_s = 5.0, 5.0
    assert spec["terminationGracePeriodSeconds"] >= pre_stop_s + drain_s + uvicorn_close_s + margin_s


def test_gpu_overlay_schedules_on_gpus(rendered):
    gpu, cpu = rendered["overlays/gpu"], rendered["overlays/cpu"]
    spec = pod_spec(one(gpu, "Deployment"))
    resources = spec["containers"][0]["resources"]
    assert str(resources["limits"]["nvidia.com/gpu"]) == "1"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" and t["effect"] == "NoSchedule" for t in spec["tolerations"])
    assert one(gpu, "ConfigMap")["data"]["DETECT_BACKEND"] in {"auto", "tensorrt-ep"}
    assert spec["containers"][0]["image"].endswith(":serve-gpu-0.1.0")
    # The TensorRT engine cache is writable (the root filesystem is not).
    cache = one(gpu, "ConfigMap")["data"]["DETECT_TRT_CACHE_DIR"]
    mounted = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert cache in mounted
    # No GPU anywhere in the CPU overlay.
    cpu_spec = pod_spec(one(cpu, "Deployment"))
    assert "nvidia.com/gpu" not in str(cpu_spec)
    assert cpu_spec["containers"][0]["image"].endswith(":serve-cpu-0.1.0")
    assert one(cpu, "ConfigMap")["data"]["DETECT_BACKEND"] == "auto"


def test_cpu_overlay_threads_match_the_cpu_limit(rendered):
    objects = rendered["overlays/cpu"]
    limits = pod_spec(one(objects, "Deployment"))["containers"][0]["resources"]["limits"]
    assert int(one(objects, "ConfigMap")["data"]["DETECT_INTRA_OP_THREADS"]) == int(limits["cpu"])


@pytest.mark.parametrize("kustomization", SERVING_KUSTOMIZATIONS)
def test_memory_budgets_fit_the_memory_limit(rendered, load_settings, kustomization):
    """The request body and decoded image budgets (DETECT_*_MEMORY_BYTES) bound what requests hold; the
    container's limit must hold them plus the models and the runtime, or the kernel kills the pod."""
    objects = rendered[kustomization]
    settings = load_settings(one(objects, "ConfigMap")["data"])
    limits = pod_spec(one(objects, "Deployment"))["containers"][0]["resources"]["limits"]
    budgets = settings.body_memory_bytes + settings.image_memory_bytes
    assert budgets < quantity_bytes(limits["memory"]), f"{budgets} bytes of budgets exceed the limit"


def _flag(args: list[str], name: str) -> str:
    """The value of ``--name=value`` or ``--name value`` in an argument list."""
    for i, arg in enumerate(args):
        if arg == name:
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} missing from {args}")


def test_training_job_is_a_consistent_multi_node_ddp_run(rendered):
    from training.config import PRESETS

    objects = rendered["training"]
    job = one(objects, "Job")
    spec = job["spec"]
    pod = pod_spec(job)
    container = pod["containers"][0]
    args = container["args"]
    assert container["command"] == ["torchrun"]
    assert spec["completionMode"] == "Indexed"
    nodes = int(_flag(args, "--nnodes"))
    assert spec["completions"] == spec["parallelism"] == nodes >= 2
    assert _flag(args, "--node_rank") == "$(JOB_COMPLETION_INDEX)"
    assert int(_flag(args, "--nproc_per_node")) == int(container["resources"]["limits"]["nvidia.com/gpu"])
    # Rank 0 is reachable through the headless Service: <job>-0.<subdomain>.
    service = one(objects, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert pod["subdomain"] == service["metadata"]["name"]
    assert selects(service["spec"]["selector"], pod_labels(job))
    assert _flag(args, "--master_addr") == f"{job['metadata']['name']}-0.{pod['subdomain']}"
    assert int(_flag(args, "--master_port")) in {p["port"] for p in service["spec"]["ports"]}
    # The training CLI with a preset that exists, data and checkpoints on the mounted volumes.
    program = args[args.index("--no_python") + 1 :]
    assert program[:2] == ["detect-train", "train"]
    assert _flag(program, "--preset") in PRESETS
    claims = pvc_claims(pod)
    pvcs = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "PersistentVolumeClaim"}
    assert set(claims.values()) <= pvcs
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for flag in ("--data", "--output"):
        path = _flag(program, flag)
        under = [
            mp for mp in mounts if path.startswith(mp.rstrip("/") + "/") and mounts[mp]["name"] in claims
        ]
        assert under, f"{flag}={path} is not on a PersistentVolumeClaim"
        if flag == "--output":
            assert not mounts[under[0]].get("readOnly"), "checkpoints must be writable"
    assert "/dev/shm" in mounts, "NCCL and data-loader workers need a larger /dev/shm"
    assert pod["restartPolicy"] == "Never"
    assert re.fullmatch(r"[a-z0-9-]+", job["metadata"]["name"])


def test_training_runs_in_the_project_namespace_reachable_only_by_its_ranks(rendered):
    """The Job and everything around it in the server's namespace; its NetworkPolicy admits the other ranks
    (rendezvous and NCCL's ephemeral ports) and lets the pods reach only each other and DNS."""
    objects = rendered["training"]
    namespace = one(rendered["base"], "Namespace")["metadata"]["name"]
    assert {obj["metadata"].get("namespace") for obj in objects} == {namespace}
    labels = pod_labels(one(objects, "Job"))
    policy = one(objects, "NetworkPolicy")["spec"]
    assert selects(policy["podSelector"]["matchLabels"], labels)
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    peers = [{"podSelector": {"matchLabels": policy["podSelector"]["matchLabels"]}}]
    assert policy["ingress"] == [{"from": peers}], "ingress from the Job's own pods only"
    egress_to_peers = [rule for rule in policy["egress"] if rule.get("to") == peers and "ports" not in rule]
    dns = [rule for rule in policy["egress"] if "to" not in rule]
    assert len(egress_to_peers) == 1 and len(dns) == 1 and len(policy["egress"]) == 2
    assert sorted((p["protocol"], p["port"]) for p in dns[0]["ports"]) == [("TCP", 53), ("UDP", 53)]
