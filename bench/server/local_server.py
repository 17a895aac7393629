"""A `detect-serve` process on 127.0.0.1 for benchmarks: started on a free port with this interpreter,
waited for until ready, stopped however the block ends.

    with local_server(repository, {"DETECT_TILING": "auto"}) as server:
        httpx.post(f"{server.url}/detect", ...)
        cpu_times(server.pid)

``single_model_repository(model_dir)`` is a temporary repository holding only that model (a symlink), so a
benchmark serves exactly the model it measures and makes it the default.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

READY_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class LocalServer:
    url: str
    pid: int


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def single_model_repository(model_dir: Path) -> Iterator[Path]:
    """A temporary model repository holding only ``model_dir`` (a model folder, by its name)."""
    with tempfile.TemporaryDirectory() as repo:
        (Path(repo) / model_dir.name).symlink_to(model_dir.resolve())
        yield Path(repo)


@contextlib.contextmanager
def local_server(
    repository: Path,
    env: Mapping[str, str] | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    program: Sequence[str] = (sys.executable, "-m", "service.cli"),
) -> Iterator[LocalServer]:
    """``detect-serve --model-repository repository`` with ``env`` added to this environment (access log
    off unless ``env`` says otherwise); yields once ``/health/ready`` answers 200. ``program``: what runs
    ``detect-serve``'s command line (a wrapper that instruments it, say); it gets ``--model-repository``,
    ``--host`` and ``--port`` after its own arguments, and SIGTERM to stop.

    Raises:
        RuntimeError: the server exited (with the end of its stderr) or was not ready in time.
    """
    port = free_port()
    full_env = {**os.environ, "DETECT_ACCESS_LOG": "false", **(env or {})}
    command = [*program, "--model-repository", str(repository)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    # The log goes to a file, not a pipe nobody reads while the benchmark runs (a full pipe would stall it).
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, env=full_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            _wait_ready(process, log, f"http://127.0.0.1:{port}", ready_timeout_s)
            yield LocalServer(f"http://127.0.0.1:{port}", process.pid)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready(process: subprocess.Popen[bytes], log: IO[bytes], url: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"detect-serve exited: {log.read().decode(errors='replace')[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"detect-serve did not become ready in {timeout_s:.0f} s")
        time.sleep(0.5)
