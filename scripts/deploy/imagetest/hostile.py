"""The hostile-input suite (scripts/bench/bench_hostile.py) inside the container, under the pod's settings.

The suite starts ``detect-serve`` itself and samples its RSS, so it runs in the container: the image's
Python and server, the pod's user, read-only root, environment, volumes and memory limit (the suite's
client shares the container's memory cgroup, so the limit is, if anything, tighter than in the pod).
scripts/ is mounted read-only; the client library the suite needs and the serving image lacks (httpx,
with httpcore and sniffio; pure Python) is mounted from this interpreter's site-packages."""

from __future__ import annotations

import importlib.util
import json
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from imagetest.container import Container, prepare_volumes, run_arguments
from imagetest.host import Podman
from imagetest.pod import PodRuntime
from imagetest.steps import StepFailed

CLIENT_PACKAGES = ("httpx", "httpcore", "sniffio")
TIMEOUT_S = 900


def _client_site(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in CLIENT_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"{name} is not installed in the project's venv")
        source = Path(next(iter(spec.submodule_search_locations)))
        shutil.copytree(source, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    folder.chmod(0o755)
    return folder


def run_hostile(
    podman: Podman, image: str, runtime: PodRuntime, models: Path, scripts: Path, scratch_root: Path
) -> dict[str, Any]:
    """Runs the whole suite; returns its figures (the suite's JSON) plus the container's exit state."""
    key = secrets.token_hex(16)
    name = f"detect-image-test-hostile-{int(time.time())}"
    container = Container(podman, name)
    tmp = next(m for m in runtime.mounts if m.kind == "emptyDir")
    with tempfile.TemporaryDirectory(dir=scratch_root, prefix="hostile-") as scratch:
        sources = prepare_volumes(runtime, Path(scratch), models, {"api-keys": key + "\n"})
        site = _client_site(Path(scratch) / "site")
        extra = [
            "--volume", f"{scripts}:/bench/scripts:ro", "--volume", f"{site}:/bench/site:ro",
            "--env", "PYTHONPATH=/bench/site",
        ]  # fmt: skip
        metrics = runtime.env.get("DETECT_METRICS_PORT")
        command = [
            "python", "/bench/scripts/bench/bench_hostile.py",
            "--model-repository", runtime.env["DETECT_MODEL_REPOSITORY"], "--api-key", key,
            "--json", f"{tmp.path}/hostile.json", "--server-log", f"{tmp.path}/server.log",
            *(["--env", f"DETECT_METRICS_PORT={metrics}"] if metrics else []),
        ]  # fmt: skip
        args = run_arguments(runtime, image, name, sources, extra, command)
        started = time.monotonic()
        try:
            podman.run(*args)
            exited = container.wait_exit(TIMEOUT_S)
            if exited is None:
                raise StepFailed("limit", f"the hostile suite still ran after {TIMEOUT_S} s")
            oom_killed, code, log = container.oom_killed(), container.exit_code(), container.logs(60)
        finally:
            container.remove()
        result_file = sources[tmp.name] / "hostile.json"
        if code != 0 or not result_file.exists():
            raise StepFailed("limit", f"the hostile suite exited {code} (OOM-killed: {oom_killed}):\n{log}")
        figures: dict[str, Any] = json.loads(result_file.read_text())
        figures["container"] = {"oom_killed": oom_killed, "seconds": time.monotonic() - started, "table": log}
        return figures
