"""Test kit for the service tests: tiny but real ONNX detectors, test images, gated backends, clients.

The toy detector (`build_toy_detector`) obeys the output contract and computes its answer from the
image, so a test can tell whose answer a request got after batching:

- ``m`` = mean pixel value / 255 of the network input;
- scores (K = 4 rows): ``m * [1.0, 0.9, 0.8, 0.99]``; the 4th row is padding (never valid);
- ``num_detections`` = 3 when ``m > 0.5`` else 2;
- boxes (normalized to the network input) and classes are the constants `TOY_BOXES` / `TOY_CLASSES`;
- with masks: ``detection_masks`` [B, 4, Mh, Mw] = the constant `toy_masks` pattern.
"""

from __future__ import annotations

import os
import queue
import re
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import onnx  # dev dependency (the export extra): only the tests build graphs; the service never imports it
from fastapi import FastAPI
from fastapi.testclient import TestClient
from onnx import TensorProto, helper

from contract.manifest import MASK_OUTPUT, OUTPUT_NAMES, InputSpec, Label, Manifest
from service.runtime.backends import Backend, create_backend
from service.runtime.repository import ModelEntry
from service.settings import Settings

PROJECT = Path(__file__).resolve().parents[2]
TOY_LABELS = ("cat", "dog", "bird")
TOY_BOXES = np.array(
    [[0.25, 0.25, 0.75, 0.75], [0.0, 0.0, 0.5, 0.5], [0.5, 0.1, 1.0, 0.6], [0.1, 0.1, 0.2, 0.2]],
    dtype=np.float32,
)
TOY_CLASSES = np.array([0, 1, 2, 0], dtype=np.int32)
TOY_SCORE_SCALE = np.array([1.0, 0.9, 0.8, 0.99], dtype=np.float32)
TOY_SCORE_THRESHOLD = 0.05


def toy_masks(k: int, mh: int, mw: int) -> np.ndarray:
    """[K, Mh, Mw] mask probabilities: a filled centre square (1.0) in a ring of 0.0."""
    masks = np.zeros((k, mh, mw), dtype=np.float32)
    masks[:, mh // 4 : mh - mh // 4, mw // 4 : mw - mw // 4] = 1.0
    return masks


def build_toy_detector(
    path: Path,
    *,
    height: int,
    width: int,
    batch: int | None = None,
    mask_size: tuple[int, int] | None = None,
    layout: str = "NHWC",
    dtype: str = "uint8",
) -> None:
    """Write the toy detector to ``path``. ``batch`` None = dynamic batch dimension."""
    k = len(TOY_SCORE_SCALE)
    batch_dim: int | str = batch if batch is not None else "batch"
    in_shape = [batch_dim, height, width, 3] if layout == "NHWC" else [batch_dim, 3, height, width]
    in_type = TensorProto.UINT8 if dtype == "uint8" else TensorProto.FLOAT

    def const(name: str, value: np.ndarray) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(value, name))

    nodes = [
        const("score_scale", TOY_SCORE_SCALE.reshape(1, k)),
        const("boxes_const", TOY_BOXES.reshape(1, k, 4)),
        const("classes_const", TOY_CLASSES.astype(np.float32).reshape(1, k)),
        const("to_b1", np.array([-1, 1], dtype=np.int64)),
        const("to_b111", np.array([-1, 1, 1], dtype=np.int64)),
        const("scale_255", np.array(1 / 255, dtype=np.float32)),
        const("half", np.array(0.5, dtype=np.float32)),
        const("zero_f", np.array(0.0, dtype=np.float32)),
        const("two_i", np.array(2, dtype=np.int32)),
        helper.make_node("Cast", ["images"], ["x"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["x"], ["mean4"], axes=[1, 2, 3], keepdims=1),
        helper.make_node("Reshape", ["mean4", "to_b1"], ["mean"]),
        helper.make_node("Mul", ["mean", "scale_255"], ["m"]),  # [B, 1] in 0..1
        helper.make_node("Mul", ["m", "zero_f"], ["zero"]),  # [B, 1] zeros: ties constants to the batch
        helper.make_node("Mul", ["m", "score_scale"], ["detection_scores"]),
        helper.make_node("Greater", ["m", "half"], ["bright"]),
        helper.make_node("Cast", ["bright"], ["bright_i"], to=TensorProto.INT32),
        helper.make_node("Add", ["bright_i", "two_i"], ["num_detections"]),
        helper.make_node("Reshape", ["zero", "to_b111"], ["zero3"]),
        helper.make_node("Add", ["zero3", "boxes_const"], ["detection_boxes"]),
        helper.make_node("Add", ["zero", "classes_const"], ["classes_f"]),
        helper.make_node("Cast", ["classes_f"], ["detection_classes"], to=TensorProto.INT32),
    ]
    outputs = [
        helper.make_tensor_value_info("num_detections", TensorProto.INT32, [batch_dim, 1]),
        helper.make_tensor_value_info("detection_boxes", TensorProto.FLOAT, [batch_dim, k, 4]),
        helper.make_tensor_value_info("detection_scores", TensorProto.FLOAT, [batch_dim, k]),
        helper.make_tensor_value_info("detection_classes", TensorProto.INT32, [batch_dim, k]),
    ]
    if mask_size is not None:
        mh, mw = mask_size
        nodes += [
            const("masks_const", toy_masks(k, mh, mw).reshape(1, k, mh, mw)),
            const("to_b1111", np.array([-1, 1, 1, 1], dtype=np.int64)),
            helper.make_node("Reshape", ["zero", "to_b1111"], ["zero4"]),
            helper.make_node("Add", ["zero4", "masks_const"], [MASK_OUTPUT]),
        ]
        outputs.append(helper.make_tensor_value_info(MASK_OUTPUT, TensorProto.FLOAT, [batch_dim, k, mh, mw]))
    graph = helper.make_graph(
        nodes, "toy_detector", [helper.make_tensor_value_info("images", in_type, in_shape)], outputs
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="detect-tests"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def add_toy_model(
    repo: Path,
    name: str,
    version: str = "1",
    *,
    height: int = 64,
    width: int = 64,
    resize: str = "stretch",
    batch: int | None = None,
    max_batch_size: int = 8,
    mask_size: tuple[int, int] | None = None,
    layout: str = "NHWC",
    dtype: str = "uint8",
    color_order: str = "RGB",
) -> Path:
    """Write ``repo/name/version/{model.onnx, manifest.json}``; returns the version folder."""
    version_dir = repo / name / version
    version_dir.mkdir(parents=True)
    build_toy_detector(
        version_dir / "model.onnx",
        height=height,
        width=width,
        batch=batch,
        mask_size=mask_size,
        layout=layout,
        dtype=dtype,
    )
    Manifest(
        name=name,
        version=version,
        architecture="toy",
        format="onnx",
        file="model.onnx",
        input=InputSpec.model_validate(
            {
                "height": height,
                "width": width,
                "resize": resize,
                "layout": layout,
                "dtype": dtype,
                "color_order": color_order,
                "pad_value": (114, 114, 114),
            }
        ),
        outputs=(*OUTPUT_NAMES, MASK_OUTPUT) if mask_size else OUTPUT_NAMES,
        labels=tuple(Label(name=n, coco_id=i + 1) for i, n in enumerate(TOY_LABELS)),
        score_threshold=TOY_SCORE_THRESHOLD,
        iou_threshold=0.5,
        max_detections=len(TOY_SCORE_SCALE),
        max_batch_size=batch if batch is not None else max_batch_size,
        dynamic_batch=batch is None,
        mask_size=mask_size,
    ).write(version_dir)
    return version_dir


# --------------------------------------------------------------------------- images


def encode(image_rgb: np.ndarray, ext: str = ".png", params: list[int] | None = None) -> bytes:
    ok, buffer = cv2.imencode(ext, cv2.cvtColor(image_rgb, cv2.COLOR_RGB2BGR), params or [])
    assert ok
    return buffer.tobytes()


def solid_image(value: int, height: int = 64, width: int = 64) -> np.ndarray:
    return np.full((height, width, 3), value, dtype=np.uint8)


def with_exif_orientation(jpeg: bytes, orientation: int) -> bytes:
    """Insert an EXIF APP1 segment holding only the Orientation tag (0x0112) right after SOI."""
    ifd_entry = struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0)  # tag, SHORT, count 1, value, padding
    tiff = b"MM\x00\x2a" + struct.pack(">I", 8) + struct.pack(">H", 1) + ifd_entry + struct.pack(">I", 0)
    payload = b"Exif\x00\x00" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


# --------------------------------------------------------------------------- gated backends


class GatedBackend(Backend):
    """A real backend wrapped so tests can observe and pace it (never a stand-in for one).

    ``calls`` records each batch's per-image mean values (what the toy model scores); ``entered``
    is set when a call starts; while ``gate`` is clear, calls wait; ``fail_with`` makes the next call
    raise instead of computing.
    """

    def __init__(self, inner: Backend):
        super().__init__(inner.manifest)
        self.inner = inner
        self.max_batch_size = inner.max_batch_size
        self.dynamic_batch = inner.dynamic_batch
        self.inference_precision = inner.inference_precision
        self.calls: list[list[float]] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.fail_with: Exception | None = None

    @property
    def description(self) -> str:
        return f"gated {self.inner.description}"

    def _run(self, inputs: np.ndarray) -> dict[str, np.ndarray]:  # pragma: no cover - infer is overridden
        raise NotImplementedError

    def infer(self, images: np.ndarray) -> dict[str, np.ndarray]:
        self.calls.append([float(v) for v in images.reshape(len(images), -1).mean(axis=1)])
        self.entered.set()
        assert self.gate.wait(timeout=30), "test gate never opened"
        if self.fail_with is not None:
            error, self.fail_with = self.fail_with, None
            raise error
        return self.inner.infer(images)

    def close(self) -> None:
        self.gate.set()
        self.inner.close()


class GatedFactory:
    """Backend factory for `create_app` that keeps the `GatedBackend` of every model by name."""

    def __init__(self) -> None:
        self.backends: dict[str, GatedBackend] = {}
        self.warmup_gate = threading.Event()
        self.warmup_gate.set()

    def __call__(self, entry: ModelEntry, settings: Settings) -> Backend:
        backend = GatedBackend(create_backend(entry, settings))
        backend.gate = self.warmup_gate  # first calls are the warm-up; tests swap in their own gate after
        self.backends[entry.name] = backend
        return backend


def make_settings(repo: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "model_repository": repo,
        "max_queue_delay_ms": 2.0,
        "worker_threads": 2,
        "intra_op_threads": 1,
        "inter_op_threads": 1,
        "access_log": False,
        # Each app would collect and freeze the whole test process's heap at startup; tests/service/runtime/
        # test_heap.py turns it on, and the real servers the tests start keep the default.
        "gc_freeze": False,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def start_client(app: FastAPI) -> TestClient:
    """Enter a TestClient (runs the lifespan) and wait until model loading finished."""
    client = TestClient(app)
    client.__enter__()
    assert client.portal is not None
    client.portal.call(app.state.runtime.wait_loaded)
    return client


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` (state owned by another thread, with no event to wait on) until true or fail."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.002)


# --------------------------------------------------------------------------- a real server


def serve_command() -> list[str]:
    script = Path(sys.executable).with_name("detect-serve")
    return [str(script)] if script.exists() else [sys.executable, "-m", "service.cli"]


class Server:
    """A detect-serve subprocess on 127.0.0.1 with an OS-chosen free port, its log collected."""

    def __init__(self, repo: Path, env: dict[str, str]):
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self.process = subprocess.Popen(
            [*serve_command(), "--model-repository", str(repo), "--host", "127.0.0.1", "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=PROJECT,
            env={**os.environ, **env},
        )
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()
        self.url = f"http://127.0.0.1:{self._port()}"

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line)

    def _port(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.log.append(line)
            match = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            if match:
                return int(match.group(1))
        raise AssertionError("server did not start:\n" + "".join(self.log))

    def wait_until(self, check: object, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():  # type: ignore[operator]
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.02)

    def full_log(self) -> str:
        while not self.lines.empty():
            self.log.append(self.lines.get_nowait())
        return "".join(self.log)

    def close(self) -> None:
        """Kill the process if it still runs, and release its pipe."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._pump_thread.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()


def png_bomb(width: int, height: int) -> bytes:
    """A valid PNG header for a huge grey image with a tiny (highly compressed) first row only."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * (width + 1), 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


# ---------------------------------------------------------------- stream sessions


def stream_info(client: TestClient, stream_id: str) -> dict[str, object]:
    """``GET /v1/streams/{id}``'s body (asserting 200)."""
    response = client.get(f"/v1/streams/{stream_id}")
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def frames_processed(client: TestClient, stream_id: str) -> int:
    value = stream_info(client, stream_id)["frames_processed"]
    assert isinstance(value, int)
    return value
