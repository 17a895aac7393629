"""The base image the Dockerfile starts from: the real one if present, else the test-only stand-in."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

from imagetest.host import Podman
from imagetest.steps import StepFailed, log

RECIPE = Path(__file__).with_name("standin-base.sh")
TEST_ONLY_LABEL = "io.detect.test-only"


def default_python_image(dockerfile: Path) -> str:
    """The Dockerfile's ``ARG PYTHON_IMAGE=...`` default, as the full name podman resolves it to."""
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)", dockerfile.read_text(), re.MULTILINE)
    if match is None:
        raise StepFailed("base", f"{dockerfile} has no `ARG PYTHON_IMAGE=<image>` line")
    name = match.group(1)
    first = name.split("/", 1)[0]
    if "/" not in name:
        return f"docker.io/library/{name}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{name}"
    return name


def recipe_digest() -> str:
    return hashlib.sha256(RECIPE.read_bytes()).hexdigest()


def ensure_base(podman: Podman, tag: str) -> str:
    """Makes ``tag`` resolvable locally; returns what it is ("real image", "stand-in (cached)", ...)."""
    if podman.run("image", "exists", tag, check=False).returncode == 0:
        labels = podman.run("image", "inspect", "--format", "{{json .Labels}}", tag).stdout
        if TEST_ONLY_LABEL not in labels:
            return f"{tag}: the real image, present locally"
        if recipe_digest() in labels:
            return f"{tag}: test-only stand-in, cached"
        log("the stand-in's recipe changed: rebuilding it")
    env = {**podman.env, "STANDIN_RECIPE_SHA256": recipe_digest()}
    result = subprocess.run(
        ["bash", str(RECIPE), tag], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if result.returncode != 0:
        raise StepFailed("base", f"{RECIPE.name} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return f"{tag}: test-only stand-in, built from Debian ({RECIPE.name})"
