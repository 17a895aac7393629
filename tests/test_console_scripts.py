"""The console scripts as a user runs them: ``--help`` answers at once, ``synth`` needs no torch."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
# Every command and subcommand; each --help imports no torch, ONNX or FastAPI. Idle, each answers in
# 0.1-0.5 s (docs/benchmarks/index.md). The bound is on the CPU time the process used, which neighbours on a
# shared machine do not inflate; the wall-clock bound only catches a hang.
HELP_CPU_BOUND_S = 1.0
HELP_WALL_BOUND_S = 15.0
COMMANDS = [
    ["detect-train"],
    ["detect-train", "synth"],
    ["detect-train", "train"],
    ["detect-train", "eval"],
    ["detect-export"],
    ["detect-export", "onnx"],
    ["detect-export", "verify"],
    ["detect-export", "display-threshold"],
    ["detect-export", "fp16-eval"],
    ["detect-export", "trt"],
    ["detect-serve"],
    ["detect-bench"],
    ["detect-bench", "http"],
    ["detect-bench", "backend"],
    ["detect-predict"],
]


def _script(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed next to {sys.executable} (pip install -e .)")
    return str(path)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_answers_quickly(command: list[str]) -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [_script(command[0]), *command[1:], "--help"], capture_output=True, text=True, timeout=60
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ")
    name = " ".join(command)
    assert cpu < HELP_CPU_BOUND_S, f"{name} --help used {cpu:.2f} s of CPU ({elapsed:.2f} s wall)"
    assert elapsed < HELP_WALL_BOUND_S, f"{name} --help took {elapsed:.2f} s"


def test_synth_runs_without_torch(tmp_path: Path) -> None:
    # torch made unimportable, as in the serving install (.venv-serve): synth must not need it.
    code = (
        "import sys; sys.modules['torch'] = None; from training.cli import main; "
        f"sys.exit(main(['synth', '--out', {str(tmp_path)!r}, '--num-train', '0', '--num-val', '2']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    annotations = json.loads((tmp_path / "annotations" / "instances_val.json").read_text())
    assert len(annotations["images"]) == 2 and len(list((tmp_path / "val").glob("*.jpg"))) == 2


def test_synth_video_runs_without_torch(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None; from training.cli import main; "
        f"sys.exit(main(['synth', '--video', '--out', {str(tmp_path)!r}, '--frames', '3', "
        "'--size', '64x48']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["frames"] == 3 and (tmp_path / "video.mp4").stat().st_size > 0


def test_train_without_torch_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None; from training.cli import main; "
        f"sys.exit(main(['train', '--data', {str(tmp_path)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "train extra" in done.stderr


def test_bench_http_without_httpx_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['httpx'] = None; from bench.cli import main; "
        f"sys.exit(main(['http', '--url', 'http://127.0.0.1:9', '--images', {str(tmp_path)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "bench extra" in done.stderr
