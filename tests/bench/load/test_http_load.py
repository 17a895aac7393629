"""``detect-bench http`` (``bench.load``) against a real detect-serve, with the raw-backend comparison."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from service_testkit import Server, encode, solid_image

from bench.cli import SUBCOMMANDS, build_parser, main
from bench.load.http_load import load_images
from bench.load.scrape import histogram_totals


def test_subcommands_are_registered() -> None:
    assert "http" in SUBCOMMANDS
    args = build_parser().parse_args(["http", "--images", "x.jpg"])
    assert args.command == "http" and args.concurrency == 16 and args.url == "http://127.0.0.1:8000"


def test_the_service_benchmarks_import_no_torch_onnx_or_training() -> None:
    code = (
        "import sys\n"
        "for name in ('torch', 'torchvision', 'training', 'onnx'):\n"
        "    sys.modules[name] = None\n"
        "import bench.load.http_load, bench.server.backend_throughput\n"
        "from bench.cli import build_parser\n"
        "build_parser('http').parse_args(['http', '--images', 'x.jpg'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_histogram_totals_read_sum_and_count_per_model() -> None:
    text = (
        "# HELP detect_batch_size Images per inference batch\n"
        "# TYPE detect_batch_size histogram\n"
        'detect_batch_size_bucket{le="+Inf",model="a"} 2.0\n'
        'detect_batch_size_sum{model="a"} 6.0\n'
        'detect_batch_size_count{model="a"} 2.0\n'
        'detect_batch_size_bucket{le="+Inf",model="b"} 1.0\n'
        'detect_batch_size_sum{model="b"} 1.0\n'
        'detect_batch_size_count{model="b"} 1.0\n'
        "# HELP detect_decode_seconds Time spent in the decode stage (per image)\n"
        "# TYPE detect_decode_seconds histogram\n"
        'detect_decode_seconds_bucket{le="+Inf",model="a"} 6.0\n'
        'detect_decode_seconds_sum{model="a"} 0.012\n'
        'detect_decode_seconds_count{model="a"} 6.0\n'
        "# HELP detect_request_seconds End-to-end time\n"
        "# TYPE detect_request_seconds histogram\n"
        'detect_request_seconds_sum{model="a"} 9.0\n'
        'detect_request_seconds_count{model="a"} 2.0\n'
    )
    assert histogram_totals(text, "a") == {
        "detect_batch_size": (6.0, 2.0),
        "detect_decode_seconds": (0.012, 6.0),  # a stage; the end-to-end histogram is not one
    }
    assert histogram_totals(text, None)["detect_batch_size"] == (7.0, 3.0)


def test_load_images_from_folders_and_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.png").write_bytes(encode(solid_image(1)))
    (tmp_path / "b.jpg").write_bytes(encode(solid_image(2), ".jpg"))
    (tmp_path / "notes.txt").write_text("skip me")
    images = load_images([tmp_path])
    assert [(i.name, i.content_type) for i in images] == [("b.jpg", "image/jpeg"), ("a.png", "image/png")]
    with pytest.raises(FileNotFoundError):
        load_images([tmp_path / "missing"])


@pytest.mark.slow
def test_http_bench_against_a_running_server(toy_repo: Path, tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for value in (60, 120, 180):
        (images / f"{value}.png").write_bytes(encode(solid_image(value, height=96, width=128)))
    env = {"DETECT_MAX_QUEUE_DELAY_MS": "5", "DETECT_INTRA_OP_THREADS": "1", "DETECT_ACCESS_LOG": "false"}
    server = Server(toy_repo, env)
    try:
        out = tmp_path / "result.json"
        argv = ["http", "--url", server.url, "--images", str(images), "--concurrency", "4", "--duration", "1"]
        argv += ["--warmup", "0.2", "--json", str(out), "--compare-backend", str(toy_repo / "toy" / "1")]
        server.wait_until(lambda: _ready(server.url), "readiness")
        assert main(argv) == 0
    finally:
        server.close()
    result = json.loads(out.read_text())
    assert result["ok"] > 0 and result["status_counts"] == {"200": result["ok"]}
    assert set(result["latency_ms"]) == {"p50", "p90", "p99", "mean", "max"}
    assert result["latency_ms"]["p50"] <= result["latency_ms"]["p99"]
    assert 1.0 <= result["mean_batch_size"] <= 4.0  # at most one request per client in flight
    assert result["raw_backend"]["batch_size"] == max(1, round(result["mean_batch_size"]))
    assert result["http_over_raw"] > 0
    assert 0 < result["client_cpu_cores"] <= os.cpu_count()  # the client did work, on at most every core
    stages = result["stage_totals"]
    assert {"detect_decode_seconds", "detect_preprocess_seconds", "detect_inference_seconds"} <= set(stages)
    assert stages["detect_decode_seconds"][1] == result["ok"]  # one decode per image of the window
    assert all(seconds > 0 for seconds, _ in stages.values())


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
