"""One image run as the Deployment runs it, through every check: start, probe, request, limit, drain."""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from imagetest import checks, stress
from imagetest.container import Container, prepare_volumes, run_arguments
from imagetest.host import Podman
from imagetest.pod import PodRuntime
from imagetest.steps import StepFailed, log, step


@dataclass
class RunInputs:
    runtime: PodRuntime
    models: Path  # backs the Deployment's PersistentVolumeClaim
    images: list[bytes]  # synthetic scenes the models were trained on
    scratch_root: Path
    keep: bool = False


def run_image(podman: Podman, image: str, inputs: RunInputs) -> checks.Figures:
    """Runs ``image`` with the pod's settings and checks it; raises ``StepFailed`` naming the step."""
    figures = checks.Figures()
    name = f"detect-image-test-{os.getpid()}-{int(time.time())}"
    container = Container(podman, name)
    key = secrets.token_hex(16)
    runtime = inputs.runtime
    with tempfile.TemporaryDirectory(dir=inputs.scratch_root, prefix="run-") as scratch:
        try:
            with step("start"):
                sources = prepare_volumes(runtime, Path(scratch), inputs.models, {"api-keys": key + "\n"})
                started = time.monotonic()
                result = podman.run(*run_arguments(runtime, image, name, sources), check=False)
                if result.returncode != 0:
                    raise StepFailed(
                        "start", f"podman run exited {result.returncode}: {result.stderr.strip()[-1500:]}"
                    )
                ends = checks.endpoints(container, runtime, key)
            with step("probe"):
                figures.start_to_ready_s = checks.wait_started(container, runtime, ends.http, started)
                checks.probes(runtime, ends.http)
                log(f"ready {figures.start_to_ready_s:.1f} s after podman run")
            with step("request"):
                figures.idle = container.memory()
                checks.requests(ends, inputs.images)
                figures.load_rss_max = stress.load(ends, container, inputs.images)
                figures.loaded = container.memory()
                figures.memory_bound = stress.memory_bound(ends)
            with step("limit"):
                stress.limits(runtime, container, figures)
            with step("drain"):
                stress.drain(runtime, container, ends, inputs.images, figures)
        finally:
            if not inputs.keep:
                container.remove()
    return figures
