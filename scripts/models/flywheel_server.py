"""The flywheel demo's plumbing (scripts/models/flywheel_demo.py): its commands, logged, and the
``detect-serve`` it starts on its own repository, sends images to and reads ``/metrics`` from."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MODEL = "efficientdet-d0-synth"


def log(message: str) -> None:
    print(f"[{datetime.now(UTC).strftime('%H:%M:%S')}] {message}", flush=True)


def run(*command: str | Path, env: dict[str, str] | None = None) -> str:
    log("$ " + " ".join(str(c) for c in command))
    done = subprocess.run(
        [str(c) for c in command],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    sys.stdout.write(done.stdout[-4000:])
    if done.returncode != 0:
        sys.stdout.write(done.stderr[-4000:])
        raise SystemExit(f"failed ({done.returncode}): {command[0]} {command[1] if len(command) > 1 else ''}")
    return done.stdout


class DemoServer:
    """``detect-serve`` on the demo's model repository, on ``127.0.0.1:port``, its log in ``work``."""

    def __init__(self, work: Path, repo: Path, port: int):
        self.work = work
        self.repo = repo
        self.port = port

    def serve(self, env: dict[str, str]) -> subprocess.Popen[bytes]:
        port = str(self.port)
        log_file = (self.work / "serve.log").open("ab")
        process = subprocess.Popen(
            [
                str(BIN / "detect-serve"),
                "--model-repository",
                str(self.repo),
                "--port",
                port,
                "--backend",
                "cpu",
            ],
            cwd=ROOT,
            env={**os.environ, "DETECT_REPOSITORY_API": "true", "DETECT_DEFAULT_MODEL": MODEL, **env},
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url("/health/ready"), timeout=2).status_code == 200:
                    return process
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                raise SystemExit(f"detect-serve exited ({process.returncode}); see {self.work / 'serve.log'}")
            time.sleep(0.5)
        process.terminate()
        raise SystemExit("detect-serve did not become ready in 180 s")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def send(self, images: list[Path]) -> list[dict[str, Any]]:
        answers = []
        with httpx.Client(timeout=60) as client:
            for image in images:
                response = client.post(
                    self.url("/detect"), content=image.read_bytes(), headers={"content-type": "image/jpeg"}
                )
                response.raise_for_status()
                answers.append(response.json())
        return answers

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.url("/metrics"), timeout=10).text
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                values[f"{sample.name}{{{labels}}}"] = sample.value
        return values


def quality(before: dict[str, float], after: dict[str, float], images: int) -> dict[str, Any]:
    """The quality signals of the requests between two scrapes of ``/metrics``."""

    def delta(prefix: str) -> float:
        return sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith(prefix))

    counted = delta(f"detect_quality_images_total{{model={MODEL}}}")
    empty = delta(f"detect_quality_no_detection_images_total{{model={MODEL}}}")
    detections = delta("detect_quality_detections_per_image_sum{")
    return {
        "images": images,
        "counted": counted,
        "no_detection_share": empty / counted if counted else None,
        "detections_per_image": detections / counted if counted else None,
    }
