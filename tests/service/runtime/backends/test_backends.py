"""Backends: the ONNX Runtime backend on real (toy) graphs, fixed-batch padding, input adaptation,
contract checks; the native TensorRT backend on a GPU (skipped here, with the reason)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from service_testkit import TOY_BOXES, TOY_CLASSES, TOY_SCORE_SCALE, add_toy_model, build_toy_detector

from contract.manifest import Manifest
from service.errors import BackendError
from service.runtime.backends import BackendLoadError, create_backend, gpu_present
from service.runtime.backends.base import Backend
from service.runtime.backends.onnxruntime_backend import OnnxRuntimeBackend
from service.runtime.repository import scan_repository
from service.settings import Settings


def load(version_dir: Path) -> Backend:
    (entry,) = [e for e in scan_repository(version_dir.parent.parent) if e.directory == version_dir]
    return create_backend(entry, Settings(intra_op_threads=1, inter_op_threads=1))


def images(*values: int, height: int = 64, width: int = 64) -> np.ndarray:
    return np.stack([np.full((height, width, 3), v, np.uint8) for v in values])


def test_onnxruntime_backend_returns_the_contract(tmp_path: Path) -> None:
    backend = load(add_toy_model(tmp_path, "toy"))
    assert isinstance(backend, OnnxRuntimeBackend)
    assert backend.description == "onnxruntime[CPUExecutionProvider]"
    out = backend.infer(images(255, 51))
    assert out["num_detections"].dtype == np.int32 and out["num_detections"].shape == (2, 1)
    assert out["num_detections"][:, 0].tolist() == [3, 2]
    assert out["detection_boxes"].shape == (2, 4, 4) and out["detection_boxes"].dtype == np.float32
    np.testing.assert_allclose(out["detection_boxes"][1], TOY_BOXES)
    np.testing.assert_allclose(out["detection_scores"][1], 0.2 * TOY_SCORE_SCALE, rtol=1e-5)
    assert out["detection_classes"].dtype == np.int32
    assert out["detection_classes"][0].tolist() == TOY_CLASSES.tolist()


def test_fixed_batch_artifact_pads_and_slices(tmp_path: Path) -> None:
    backend = load(add_toy_model(tmp_path, "fixed", batch=4))
    assert not backend.dynamic_batch and backend.max_batch_size == 4
    out = backend.infer(images(255, 0))  # padded to 4 inside, 2 back out
    assert all(value.shape[0] == 2 for value in out.values())
    np.testing.assert_allclose(out["detection_scores"][:, 0], [1.0, 0.0])


def test_input_is_adapted_to_the_graph_layout_dtype_and_colour_order(tmp_path: Path) -> None:
    nchw = load(add_toy_model(tmp_path, "nchw", layout="NCHW", dtype="float32", color_order="BGR"))
    reference = load(add_toy_model(tmp_path, "nhwc"))
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    np.testing.assert_allclose(
        nchw.infer(batch)["detection_scores"], reference.infer(batch)["detection_scores"], rtol=1e-5
    )


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (np.zeros((1, 64, 64, 3), np.float32), "uint8 \\[B, H, W, 3\\]"),
        (np.zeros((1, 32, 64, 3), np.uint8), "shape \\[B, 64, 64, 3\\]"),
        (np.zeros((9, 64, 64, 3), np.uint8), "batch of 9 images; this artifact accepts 1..8"),
        (np.zeros((0, 64, 64, 3), np.uint8), "batch of 0 images"),
    ],
)
def test_bad_batches_are_caller_errors(tmp_path: Path, batch: np.ndarray, message: str) -> None:
    backend = load(add_toy_model(tmp_path, "toy"))
    with pytest.raises(ValueError, match=message):
        backend.infer(batch)


class _Broken(Backend):
    """A backend whose graph breaks the output contract in a chosen way."""

    def __init__(self, manifest: Manifest, outputs: dict[str, np.ndarray]):
        super().__init__(manifest)
        self._outputs = outputs

    @property
    def description(self) -> str:
        return "broken"

    def _run(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        return self._outputs


def good(batch: int = 1, k: int = 4) -> dict[str, np.ndarray]:
    return {
        "num_detections": np.zeros((batch, 1), np.int64),
        "detection_boxes": np.zeros((batch, k, 4), np.float32),
        "detection_scores": np.zeros((batch, k), np.float32),
        "detection_classes": np.zeros((batch, k), np.int64),
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"detection_scores": None}, "model returned no \\['detection_scores'\\]"),
        ({"detection_boxes": np.zeros((2, 4, 4), np.float32)}, "expected batch dimension 1"),
        ({"detection_boxes": np.zeros((1, 4, 5), np.float32)}, "expected \\[B, K, 4\\]"),
        ({"detection_classes": np.zeros((1, 3), np.int32)}, "detection_classes has shape \\(1, 3\\)"),
    ],
)
def test_contract_violations_are_backend_errors(
    tmp_path: Path, change: dict[str, np.ndarray | None], message: str
) -> None:
    manifest = Manifest.read(add_toy_model(tmp_path, "toy"))
    outputs = good()
    for name, value in change.items():
        if value is None:
            del outputs[name]
        else:
            outputs[name] = value
    with pytest.raises(BackendError, match=message):
        _Broken(manifest, outputs).infer(images(0))


def test_integer_outputs_are_normalized_to_int32(tmp_path: Path) -> None:
    manifest = Manifest.read(add_toy_model(tmp_path, "toy"))
    out = _Broken(manifest, good()).infer(images(0))
    assert out["num_detections"].dtype == np.int32 and out["detection_classes"].dtype == np.int32


def test_graph_that_contradicts_its_manifest_fails_to_load(tmp_path: Path) -> None:
    version_dir = add_toy_model(tmp_path, "toy")
    build_toy_detector(version_dir / "model.onnx", height=64, width=64, mask_size=None)
    manifest = Manifest.read(version_dir)
    renamed = manifest.model_copy(update={"input": manifest.input.model_copy(update={"name": "pixels"})})
    with pytest.raises(BackendLoadError, match="manifest expects one named 'pixels'"):
        OnnxRuntimeBackend(renamed, version_dir / "model.onnx")


def test_tensorrt_backend_cannot_load_without_tensorrt_and_a_gpu(tmp_path: Path) -> None:
    """Here (no GPU) the native backend must refuse with a reason, not pretend to work."""
    if gpu_present():
        pytest.skip("a GPU is present; covered by the gpu-marked test")
    from service.runtime.backends.tensorrt_backend import TensorRTBackend

    manifest = Manifest.read(add_toy_model(tmp_path, "toy"))
    with pytest.raises(BackendLoadError, match=r"needs (the tensorrt package|an NVIDIA GPU)"):
        TensorRTBackend(manifest, tmp_path / "model.plan")


@pytest.mark.gpu
def test_tensorrt_engine_matches_onnxruntime(tmp_path: Path) -> None:
    """Build an engine from the toy ONNX with TensorRT's builder, serve it, compare with ONNX Runtime."""
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU: TensorRT engines build and run only on one (none on this machine)")
    trt = pytest.importorskip(
        "tensorrt", reason="needs the tensorrt package (pip install 'detect[serve-gpu]')"
    )
    from service.runtime.backends.tensorrt_backend import TensorRTBackend

    version_dir = add_toy_model(tmp_path, "toy")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse((version_dir / "model.onnx").read_bytes()), parser.get_error(0)
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape("images", (1, 64, 64, 3), (4, 64, 64, 3), (8, 64, 64, 3))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    (version_dir / "model.plan").write_bytes(bytes(plan))
    manifest = Manifest.read(version_dir).model_copy(update={"format": "tensorrt", "file": "model.plan"})
    engine = TensorRTBackend(manifest, version_dir / "model.plan")
    reference = OnnxRuntimeBackend(manifest, version_dir / "model.onnx")
    try:
        batch = images(255, 128, 3)
        got, expected = engine.infer(batch), reference.infer(batch)
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-3, atol=1e-3)
    finally:
        engine.close()


def test_graph_input_conversion_is_exact(tmp_path: Path) -> None:
    manifest = Manifest.read(add_toy_model(tmp_path, "toy"))
    spec = manifest.input.model_copy(update={"layout": "NCHW", "dtype": "float32", "color_order": "BGR"})
    seen: list[np.ndarray] = []

    class Capturing(_Broken):
        def _run(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
            seen.append(inputs)
            return good(len(inputs))

    batch = np.random.default_rng(1).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    Capturing(manifest.model_copy(update={"input": spec}), {}).infer(batch)
    expected = batch[..., ::-1].transpose(0, 3, 1, 2).astype(np.float32)  # RGB NHWC -> BGR NCHW float
    np.testing.assert_array_equal(seen[0], expected)
    assert seen[0].flags["C_CONTIGUOUS"]
