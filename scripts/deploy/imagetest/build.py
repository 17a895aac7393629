"""``podman build`` of one Dockerfile target, timed; the layer cache makes reruns fast."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from imagetest.host import Podman
from imagetest.steps import StepFailed

BUILD_TIMEOUT_S = 1800


@dataclass
class Built:
    tag: str
    image_id: str
    size_bytes: int
    seconds: float
    steps: int
    cached_steps: int
    log_path: Path


def build(podman: Podman, context: Path, dockerfile: Path, target: str, tag: str, log_path: Path) -> Built:
    """Builds ``target`` as Docker-format image ``tag`` (host network: the RUN steps reach PyPI)."""
    command = [
        "podman", "build", "--format", "docker", "--network=host", "--layers",
        "--target", target, "--file", str(dockerfile), "--tag", tag, str(context),
    ]  # fmt: skip
    started = time.monotonic()
    with log_path.open("w") as log_file:
        result = subprocess.run(
            command,
            env=podman.env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    seconds = time.monotonic() - started
    output = log_path.read_text(errors="replace")
    if result.returncode != 0:
        tail = "\n".join(output.splitlines()[-25:])
        raise StepFailed(
            "build", f"podman build --target {target} exited {result.returncode} ({log_path}):\n{tail}"
        )
    inspect = podman.run("image", "inspect", "--format", "{{.Id}} {{.Size}}", tag).stdout.split()
    lines = output.splitlines()
    return Built(
        tag=tag,
        image_id=inspect[0][:12],
        size_bytes=int(inspect[1]),
        seconds=seconds,
        steps=sum(1 for line in lines if " STEP " in f" {line}" and "/" in line.split("STEP", 1)[-1][:8]),
        cached_steps=sum(1 for line in lines if line.startswith("--> Using cache")),
        log_path=log_path,
    )
