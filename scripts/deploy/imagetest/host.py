"""The host side: Debian packages for rootful podman, podman's configuration, and running podman."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from pathlib import Path

from imagetest.steps import StepFailed, log

# Rootful podman with runc, rootless helpers, the bridge network's plugins, and mmdebstrap for the
# stand-in base image (imagetest/standin-base.sh).
PACKAGES = (
    "podman",
    "buildah",
    "runc",
    "slirp4netns",
    "fuse-overlayfs",
    "uidmap",
    "containernetworking-plugins",
    "mmdebstrap",
)
# Wanted open-file and process limits for containers; capped at this process's hard limits, which root
# cannot raise in every environment (podman's own defaults then fail with "setrlimit ... not permitted").
NOFILE = 20000
NPROC = 32768


def state_dir() -> Path:
    """Where the test keeps its podman configuration and scratch files (outside the repository)."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "detect-image-test"
    path = Path(os.environ.get("IMAGE_TEST_STATE", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def missing_packages() -> list[str]:
    missing = []
    for package in PACKAGES:
        result = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
        )
        if "install ok installed" not in result.stdout:
            missing.append(package)
    return missing


def install_packages() -> None:
    """apt-get installs what is missing (root only); with everything installed, nothing runs."""
    if shutil.which("dpkg-query") is None:
        if shutil.which("podman") and shutil.which("mmdebstrap"):
            return
        raise StepFailed("install", "not a Debian system: install podman, runc and mmdebstrap yourself")
    missing = missing_packages()
    if not missing:
        return
    if os.geteuid() != 0:
        raise StepFailed(
            "install",
            "not root; run: sudo apt-get update && "
            f"sudo apt-get install -y --no-install-recommends {' '.join(missing)}",
        )
    log(f"apt-get install {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
    ):
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise StepFailed(
                "install", f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-2000:]}"
            )


def containers_conf(directory: Path) -> Path:
    """A containers.conf of the test's own (podman reads it through CONTAINERS_CONF; the user's stays as is).

    runc, not crun: crun refuses hosts that mount cgroups in hybrid (v1 + v2) mode. Default ulimits within
    the hard limits this process has."""
    nofile = min(NOFILE, _hard_limit(resource.RLIMIT_NOFILE))
    nproc = min(NPROC, _hard_limit(resource.RLIMIT_NPROC))
    path = directory / "containers.conf"
    path.write_text(
        "# Written by scripts/deploy/imagetest/host.py for `make image-test`.\n"
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "\n[engine]\n"
        'runtime = "runc"\n'
    )
    return path


def _hard_limit(which: int) -> int:
    hard = resource.getrlimit(which)[1]
    return hard if hard != resource.RLIM_INFINITY else 1 << 20


class Podman:
    """Runs podman with the test's containers.conf."""

    def __init__(self, conf: Path):
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"podman {' '.join(args[:3])} ... exited {result.returncode}: {result.stderr.strip()[-1500:]}"
            )
        return result
