"""checkov (an infrastructure-as-code scanner) over what ships: every finding fixed or accepted with a reason.

One offline run (``--skip-download``, no update check) over the rendered kustomizations that reach a cluster
(the overlays, training, KServe, monitoring), the same renders with every image pinned by digest, and the
Dockerfile.
Findings must equal the entries of k8s/checkov-accepted.yaml: a new finding fails, and so does an entry
that no longer matches one. checkov comes from its own locked environment (.venv-checkov, tools/checkov),
installed by ``make setup``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_testkit import K8S, ROOT, objects_of, pod_spec, render

# The kustomizations checkov scans, relative to k8s/ (base is what the overlays render, with more).
SCANNED = ("overlays/cpu", "overlays/gpu", "training", "kserve", "monitoring")
ACCEPTED_FILE = K8S / "checkov-accepted.yaml"
# A digest for the pinned renders (any sha256 does: nothing is pulled).
TEST_DIGEST = "sha256:" + hashlib.sha256(b"detect test image").hexdigest()


@dataclass(frozen=True)
class Finding:
    check: str
    scanned: str  # a kustomization of SCANNED, "pinned/<kustomization>", or "Dockerfile"
    resource: str


@dataclass
class Scan:
    findings: set[Finding]
    # {framework: checkov's summary (passed, failed, skipped, resource_count, ...)}
    summary: dict[str, dict[str, Any]]
    seconds: float


def checkov_path() -> str | None:
    candidate = ROOT / ".venv-checkov" / "bin" / "checkov"
    return str(candidate) if candidate.is_file() else shutil.which("checkov")


def _file_name(scanned: str) -> str:
    return scanned.replace("/", "__") + ".yaml"


def _pinned_kustomization(folder: Path, kustomization: str, images: set[str]) -> None:
    """A kustomization in ``folder`` that pins every image of ``kustomization`` by digest, as an overlay
    of the user's would (docs/deployment.md, "Pinning images")."""
    folder.mkdir(parents=True)
    pins = [
        {"name": image.split("@")[0].rsplit(":", 1)[0], "digest": TEST_DIGEST} for image in sorted(images)
    ]
    resource = os.path.relpath(K8S / kustomization, folder)
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [resource], "images": pins}))


def _images(objects: list[dict[str, Any]]) -> set[str]:
    images = set()
    for obj in objects:
        spec = pod_spec(obj) if obj["kind"] in ("Pod", "Deployment", "Job") else obj.get("spec", {})
        images.update(c["image"] for c in spec.get("containers", []) + spec.get("initContainers", []))
    return images


def _run_checkov(checkov: str, files: dict[str, Path]) -> Scan:
    import time

    args = [checkov, "--skip-download", "--output", "json", "--framework", "kubernetes", "dockerfile"]
    for path in files.values():
        args += ["--file", str(path)]
    env = {**os.environ, "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true", "BC_SKIP_MAPPING": "TRUE"}
    start = time.monotonic()
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT, env=env)
    seconds = time.monotonic() - start
    assert result.returncode in (0, 1), f"checkov failed ({result.returncode}):\n{result.stderr[-3000:]}"
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    by_file_name = {path.name: scanned for scanned, path in files.items()}
    findings = set()
    for report in reports:
        for failed in report["results"]["failed_checks"]:
            scanned = by_file_name[Path(failed["file_path"]).name]
            findings.add(Finding(failed["check_id"], scanned, failed["resource"]))
    return Scan(findings, {r["check_type"]: r["summary"] for r in reports}, seconds)


@pytest.fixture(scope="module")
def scan(tmp_path_factory: pytest.TempPathFactory) -> Scan:
    checkov = checkov_path()
    if checkov is None:
        pytest.skip("checkov is not installed (make setup installs it into .venv-checkov from tools/checkov)")
    folder = tmp_path_factory.mktemp("checkov")
    files: dict[str, Path] = {}
    for kustomization in SCANNED:
        objects = render(kustomization)
        files[kustomization] = folder / _file_name(kustomization)
        files[kustomization].write_text(yaml.safe_dump_all(objects))
        pinned_dir = folder / "pinned" / kustomization
        _pinned_kustomization(pinned_dir, kustomization, _images(objects))
        pinned = render(os.path.relpath(pinned_dir, K8S))
        assert all(image.endswith(f"@{TEST_DIGEST}") for image in _images(pinned)), _images(pinned)
        files[f"pinned/{kustomization}"] = folder / _file_name(f"pinned/{kustomization}")
        files[f"pinned/{kustomization}"].write_text(yaml.safe_dump_all(pinned))
    files["Dockerfile"] = Path("Dockerfile")  # relative to ROOT, checkov's working directory
    return _run_checkov(checkov, files)


def accepted_findings() -> dict[Finding, str]:
    entries = yaml.safe_load(ACCEPTED_FILE.read_text())["accepted"]
    accepted = {}
    for entry in entries:
        assert set(entry) == {"check", "scanned", "resource", "reason"}, entry
        assert len(str(entry["reason"]).split()) >= 5, f"say why {entry['check']} is accepted: {entry}"
        accepted[Finding(entry["check"], entry["scanned"], entry["resource"])] = entry["reason"]
    assert len(accepted) == len(entries), "duplicate entries in k8s/checkov-accepted.yaml"
    return accepted


def test_every_finding_is_fixed_or_accepted_with_a_reason(scan: Scan):
    accepted = accepted_findings()
    new = sorted(scan.findings - accepted.keys(), key=str)
    stale = sorted(accepted.keys() - scan.findings, key=str)
    assert not new, (
        "checkov findings not in k8s/checkov-accepted.yaml (fix them, or accept with a reason):\n"
        + ("\n".join(f"  {f.check} {f.scanned} {f.resource}" for f in new))
    )
    assert not stale, "accepted findings checkov no longer reports (delete them):\n" + (
        "\n".join(f"  {f.check} {f.scanned} {f.resource}" for f in stale)
    )


def test_pinned_images_leave_nothing_to_accept(scan: Scan):
    """With every image pinned by digest, as the docs tell a deployment to do, checkov finds nothing."""
    pinned = [f for f in scan.findings if f.scanned.startswith("pinned/")]
    assert pinned == []


def test_scan_covers_every_workload_and_stays_quick(scan: Scan):
    kubernetes = scan.summary["kubernetes"]
    dockerfile = scan.summary["dockerfile"]
    assert kubernetes["parsing_errors"] == dockerfile["parsing_errors"] == 0
    # The server Deployments, the training Job, NetworkPolicies...: hundreds of checks, in every render.
    assert kubernetes["passed"] > 200 and dockerfile["passed"] > 100, scan.summary
    workloads = sum(len(objects_of(render(k), kind)) for k in SCANNED for kind in ("Deployment", "Job"))
    assert workloads == 3  # cpu and gpu Deployments, the training Job (KServe's runtime is a CRD)
    assert scan.seconds < 60, f"checkov took {scan.seconds:.0f} s"
