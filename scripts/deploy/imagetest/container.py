"""The image run by podman with a pod's runtime settings (``pod.PodRuntime``); what the host sees of it."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from imagetest.host import Podman
from imagetest.pod import Mount, PodRuntime


@dataclass
class Memory:
    """Resident memory of the container's main process and its memory cgroup's usage, in bytes."""

    rss: int
    rss_peak: int  # VmHWM: the process's high-water mark
    cgroup_usage: int | None
    cgroup_peak: int | None
    cgroup_limit: int | None


def prepare_volumes(
    runtime: PodRuntime, scratch: Path, models: Path, secrets: dict[str, str]
) -> dict[str, Path]:
    """A host folder for every volume: the PVC is ``models``, an emptyDir a fresh folder (mode 0777, as the
    kubelet makes it), a Secret a folder with its items, owned by root and the pod's fsGroup, in its mode."""
    sources: dict[str, Path] = {}
    for mount in runtime.mounts:
        if mount.kind == "persistentVolumeClaim":
            sources[mount.name] = models.resolve()
        elif mount.kind == "emptyDir":
            folder = scratch / f"emptydir-{mount.name}"
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o777)
            sources[mount.name] = folder
        else:
            sources[mount.name] = _secret_folder(mount, scratch, secrets, runtime.fs_group)
    return sources


def _secret_folder(mount: Mount, scratch: Path, secrets: dict[str, str], fs_group: int | None) -> Path:
    folder = scratch / f"secret-{mount.name}"
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    items = mount.secret_items or {key: key for key in secrets}
    for key, file_name in items.items():
        if key not in secrets:
            raise ValueError(
                f"Secret volume {mount.name} needs key {key!r}; the test provides {sorted(secrets)}"
            )
        path = folder / file_name
        path.write_text(secrets[key])
        os.chown(path, 0, fs_group if fs_group is not None else 0)
        path.chmod(mount.default_mode)
    return folder


def run_arguments(
    runtime: PodRuntime,
    image: str,
    name: str,
    sources: dict[str, Path],
    extra: list[str] | None = None,
    command: list[str] | None = None,
) -> list[str]:
    """``podman run`` arguments that give the container the pod's settings, ports published on loopback;
    ``extra`` options and a ``command`` (first word the entrypoint) for other uses of the same settings."""
    # No HEALTHCHECK: the kubelet ignores the image's and runs the pod's probes (checked separately).
    args = [
        "run",
        "--detach",
        "--name",
        name,
        "--no-healthcheck",
        "--user",
        f"{runtime.user}:{runtime.group}",
    ]
    if runtime.fs_group is not None:
        args += ["--group-add", str(runtime.fs_group)]
    if runtime.read_only_root:
        # Only the pod's volumes are writable: no tmpfs on /run, /var/tmp that a pod would not have.
        args += ["--read-only", "--read-only-tmpfs=false"]
    for capability in runtime.drop_capabilities:
        args += ["--cap-drop", capability]
    if not runtime.allow_privilege_escalation:
        args += ["--security-opt", "no-new-privileges"]
    if runtime.seccomp == "Unconfined":
        args += ["--security-opt", "seccomp=unconfined"]
    # RuntimeDefault: podman's default seccomp profile, as containerd's default for the kubelet.
    limit = str(runtime.memory_limit_bytes)
    args += ["--memory", limit, "--memory-swap", limit]
    if runtime.cpu_limit is not None:
        args += ["--cpus", str(_cpus(runtime.cpu_limit))]
    args += ["--stop-timeout", str(runtime.grace_period_s)]
    for key, value in sorted(runtime.env.items()):
        args += ["--env", f"{key}={value}"]
    for mount in runtime.mounts:
        args += ["--volume", f"{sources[mount.name]}:{mount.path}:{'ro' if mount.read_only else 'rw'}"]
    for port in sorted(set(runtime.ports.values())):
        args += ["--publish", f"127.0.0.1::{port}"]
    args += extra or []
    if command:
        return [*args, "--entrypoint", command[0], image, *command[1:]]
    return [*args, image]


def _cpus(quantity: str) -> float:
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


class Container:
    def __init__(self, podman: Podman, name: str):
        self.podman = podman
        self.name = name

    def inspect(self, template: str) -> str:
        return self.podman.run("container", "inspect", "--format", template, self.name).stdout.strip()

    def running(self) -> bool:
        return self.inspect("{{.State.Running}}") == "true"

    def exit_code(self) -> int:
        return int(self.inspect("{{.State.ExitCode}}"))

    def oom_killed(self) -> bool:
        """Podman's flag, or the kernel's log of an OOM kill in this container's memory cgroup (podman does
        not always see it: with runc on cgroup v1 a kill by the memory limit reads as exit code 137)."""
        if self.inspect("{{.State.OOMKilled}}") == "true":
            return True
        container_id = self.inspect("{{.Id}}")
        result = subprocess.run(["dmesg"], capture_output=True, text=True, check=False)
        return any("oom-kill" in line and container_id in line for line in result.stdout.splitlines())

    def pid(self) -> int:
        return int(self.inspect("{{.State.Pid}}"))

    def host_port(self, container_port: int) -> int:
        out = self.podman.run("port", self.name, f"{container_port}/tcp").stdout.strip()
        return int(out.splitlines()[0].rsplit(":", 1)[1])

    def logs(self, lines: int = 30) -> str:
        result = self.podman.run("logs", "--tail", str(lines), self.name, check=False)
        return (result.stdout + result.stderr).strip()

    def signal(self, name: str) -> None:
        self.podman.run("kill", "--signal", name, self.name)

    def exec(self, *command: str, timeout: float = 60) -> int:
        return self.podman.run("exec", self.name, *command, timeout=timeout, check=False).returncode

    def wait_exit(self, timeout: float) -> float | None:
        """Seconds until the container stopped, or None if it still runs after ``timeout``."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if not self.running():
                return time.monotonic() - started
            time.sleep(0.1)
        return None

    def remove(self) -> None:
        self.podman.run("rm", "--force", "--time", "0", self.name, check=False)

    def memory(self) -> Memory:
        pid = self.pid()
        status = Path(f"/proc/{pid}/status").read_text()
        fields = {line.split(":")[0]: line.split()[1:] for line in status.splitlines() if ":" in line}
        cgroup = _memory_cgroup(pid)
        return Memory(
            rss=int(fields["VmRSS"][0]) * 1024,
            rss_peak=int(fields["VmHWM"][0]) * 1024,
            cgroup_usage=_read_int(cgroup, "memory.usage_in_bytes", "memory.current"),
            cgroup_peak=_read_int(cgroup, "memory.max_usage_in_bytes", "memory.peak"),
            cgroup_limit=_read_int(cgroup, "memory.limit_in_bytes", "memory.max"),
        )


def _memory_cgroup(pid: int) -> Path | None:
    """The process's memory cgroup folder (cgroup v1 memory controller, or the v2 unified one)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/")
        if number == "0" and controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            candidate = Path("/sys/fs/cgroup") / path.lstrip("/")
            if (candidate / "memory.current").exists():
                return candidate
    return None


def _read_int(folder: Path | None, *names: str) -> int | None:
    if folder is None:
        return None
    for name in names:
        try:
            text = (folder / name).read_text().strip()
        except OSError:
            continue
        return None if text == "max" else int(text)
    return None
