"""The OpenVINO backend on the real runtime: outputs equal ONNX Runtime's at f32 (toy graphs and the
shipped SSD300), the inference precision is set explicitly and reported, the compile cache fills and is
used, OpenVINO IR artifacts load; and the rules by which "auto" picks a runtime."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from machine_testkit import CPU_BF16, needs_bf16
from PIL import Image
from service_testkit import PROJECT, add_toy_model

from contract.manifest import Manifest
from service.errors import BackendError
from service.runtime.backends import Backend, BackendLoadError, create_backend, load_artifact, resolve_backend
from service.runtime.backends.onnxruntime_backend import OnnxRuntimeBackend
from service.runtime.backends.openvino_backend import OpenVinoBackend, hint_for_cpu, precision_hint_for
from service.runtime.loaded_model import LoadedModel
from service.runtime.repository import SERVING_FILE, RepositoryError, scan_repository
from service.settings import Settings

ov = pytest.importorskip("openvino", reason="the openvino package (serve extra) is not installed")

SSD300 = PROJECT / "models" / "ssd300-synth" / "1"


def settings(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {"intra_op_threads": 1, "openvino_cache_dir": tmp_path / "ov-cache"}
    return Settings(**(values | overrides))  # type: ignore[arg-type]


def pair(
    version_dir: Path, tmp_path: Path, **overrides: object
) -> tuple[OpenVinoBackend, OnnxRuntimeBackend]:
    openvino = load_artifact(version_dir, "openvino", settings(tmp_path, **overrides))
    onnxruntime = load_artifact(version_dir, "cpu", settings(tmp_path))
    assert isinstance(openvino, OpenVinoBackend) and isinstance(onnxruntime, OnnxRuntimeBackend)
    return openvino, onnxruntime


def assert_same_outputs(a: dict[str, np.ndarray], b: dict[str, np.ndarray], atol: float) -> None:
    assert a.keys() == b.keys()
    np.testing.assert_array_equal(a["num_detections"], b["num_detections"])
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        np.testing.assert_allclose(a[name], b[name], atol=atol, err_msg=name)


def assert_concurrent_calls_match(
    openvino: OpenVinoBackend,
    onnxruntime: OnnxRuntimeBackend,
    sizes: tuple[int, ...],
    seed: int,
    repeats: int,
) -> None:
    """Batches of ``sizes`` (64x64 toy images), ``repeats`` times over, run from two threads at once on
    ``openvino``: each answer equals ONNX Runtime's for the same batch."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(seed)
    batches = [rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8) for n in sizes] * repeats
    with ThreadPoolExecutor(2) as pool:
        outputs = list(pool.map(openvino.infer, batches))
    for images, got in zip(batches, outputs, strict=True):
        assert_same_outputs(got, onnxruntime.infer(images), atol=1e-5)


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"mask_size": (8, 8)},
        {"layout": "NCHW", "dtype": "float32", "color_order": "BGR"},
        {"batch": 4},  # fixed batch: padded to 4 and sliced back
    ],
    ids=["nhwc-uint8", "masks", "nchw-float-bgr", "fixed-batch"],
)
def test_toy_outputs_equal_onnxruntime_at_f32(tmp_path: Path, variant: dict[str, object]) -> None:
    openvino, onnxruntime = pair(add_toy_model(tmp_path / "repo", "toy", **variant), tmp_path)  # type: ignore[arg-type]
    assert openvino.inference_precision == "f32"
    assert openvino.description.startswith("openvino[") and openvino.description.endswith(",CPU,f32]")
    images = np.random.default_rng(0).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    assert_same_outputs(openvino.infer(images), onnxruntime.infer(images), atol=1e-5)
    assert_same_outputs(openvino.infer(images[:1]), onnxruntime.infer(images[:1]), atol=1e-5)


def scenes(count: int, size: int = 300) -> np.ndarray:
    """Coloured shapes on textured backgrounds: scenes the synthetic-shapes SSD detects things in."""
    import cv2

    rng = np.random.default_rng(1)
    images = []
    for _ in range(count):
        image = rng.integers(0, 80, (size, size, 3), dtype=np.uint8)
        for _ in range(4):
            colour = tuple(int(c) for c in rng.integers(100, 256, 3))
            x, y = (int(v) for v in rng.integers(40, size - 40, 2))
            r = int(rng.integers(15, 40))
            if rng.random() < 0.5:
                cv2.circle(image, (x, y), r, colour, -1)
            else:
                cv2.rectangle(image, (x - r, y - r), (x + r, y + r), colour, -1)
        images.append(image)
    return np.stack(images)


def test_ssd300_outputs_equal_onnxruntime_at_f32(tmp_path: Path) -> None:
    openvino, onnxruntime = pair(SSD300, tmp_path, intra_op_threads=2)
    images = scenes(4)
    ov_out, ort_out = openvino.infer(images), onnxruntime.infer(images)
    assert int(ort_out["num_detections"].sum()) > 0, "the scenes must give detections to compare"
    assert_same_outputs(ov_out, ort_out, atol=1e-3)


@needs_bf16
def test_bf16_is_explicit_and_reported(tmp_path: Path) -> None:
    forced = load_artifact(SSD300, "openvino", settings(tmp_path, openvino_precision="bf16"))
    assert forced.inference_precision == "bf16" and forced.description.endswith(",CPU,bf16]")
    # The manifest decides by default: an fp32 artifact stays f32 even where the CPU has bf16 units.
    default = load_artifact(SSD300, "openvino", settings(tmp_path))
    assert default.inference_precision == "f32"
    out = forced.infer(scenes(2))
    reference = default.infer(scenes(2))
    assert out["detection_boxes"].dtype == np.float32
    np.testing.assert_allclose(
        out["detection_scores"][:, :3], reference["detection_scores"][:, :3], atol=0.05
    )


@pytest.mark.parametrize(
    ("precision", "unquantized", "setting", "hint"),
    [
        ("fp32", None, "manifest", "f32"),
        ("int8", None, "manifest", "f32"),
        ("int8", "bf16", "manifest", "bf16"),  # the INT8 artifact's unquantized layers run in bf16
        ("int8", "bf16", "f32", "f32"),  # the setting still wins
        ("bf16", None, "manifest", "bf16"),
        ("fp32", None, "bf16", "bf16"),
        ("bf16", None, "f32", "f32"),
    ],
)
def test_precision_hint_rule(precision: str, unquantized: str | None, setting: str, hint: str) -> None:
    manifest = Manifest.read(SSD300).model_copy(
        update={"precision": precision, "unquantized_precision": unquantized}
    )
    assert precision_hint_for(manifest, setting) == hint


@pytest.mark.parametrize(
    ("precision", "unquantized", "setting", "capabilities", "hint"),
    [
        ("int8", "bf16", "manifest", ["FP32", "BF16", "INT8"], "bf16"),
        ("int8", "bf16", "manifest", ["FP32", "INT8"], "f32"),  # a preference: falls back, logged
        ("fp32", None, "manifest", ["FP32", "INT8"], "f32"),
    ],
)
def test_hint_follows_the_cpu_where_the_manifest_only_prefers_bf16(
    precision: str, unquantized: str | None, setting: str, capabilities: list[str], hint: str
) -> None:
    manifest = Manifest.read(SSD300).model_copy(
        update={"precision": precision, "unquantized_precision": unquantized}
    )
    assert hint_for_cpu(manifest, setting, capabilities) == hint


@pytest.mark.parametrize(("precision", "setting"), [("fp32", "bf16"), ("bf16", "manifest")])
def test_an_explicit_bf16_request_on_a_cpu_without_bf16_is_refused(precision: str, setting: str) -> None:
    manifest = Manifest.read(SSD300).model_copy(update={"precision": precision})
    with pytest.raises(BackendLoadError, match=r"this CPU has no bf16 units.*DETECT_OPENVINO_PRECISION=f32"):
        hint_for_cpu(manifest, setting, ["FP32", "INT8"])


def test_fp16_artifact_needs_an_explicit_precision() -> None:
    manifest = Manifest.read(SSD300).model_copy(update={"precision": "fp16"})
    with pytest.raises(BackendLoadError, match="DETECT_OPENVINO_PRECISION"):
        precision_hint_for(manifest, "manifest")


def test_compile_cache_is_filled_then_used(tmp_path: Path) -> None:
    cache = tmp_path / "ov-cache"
    first = load_artifact(SSD300, "openvino", settings(tmp_path))
    blobs = sorted(p.name for p in cache.iterdir() if p.suffix == ".blob")
    assert blobs, f"no compiled blob in {cache}: {sorted(p.name for p in cache.iterdir())}"
    second = load_artifact(SSD300, "openvino", settings(tmp_path))
    assert sorted(p.name for p in cache.iterdir() if p.suffix == ".blob") == blobs  # reused, not rebuilt
    images = scenes(2)
    assert_same_outputs(first.infer(images), second.infer(images), atol=0)


def test_unwritable_cache_dir_loads_without_a_cache(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    backend = load_artifact(SSD300, "openvino", settings(tmp_path, openvino_cache_dir=blocker / "cache"))
    assert backend.cache_dir is None and backend.inference_precision == "f32"


def write_ir(tmp_path: Path, precision: str = "fp32") -> Path:
    """The toy model converted to OpenVINO IR (model.xml + model.bin) with a manifest saying so."""
    onnx_dir = add_toy_model(tmp_path / "onnx", "toy")
    version_dir = tmp_path / "repo" / "toy-ir" / "1"
    version_dir.mkdir(parents=True)
    model = ov.Core().read_model(str(onnx_dir / "model.onnx"))
    # save_model stores weights as fp16 unless told otherwise: keep them exact to compare with f32.
    ov.save_model(model, str(version_dir / "model.xml"), compress_to_fp16=False)
    manifest = json.loads((onnx_dir / "manifest.json").read_text())
    manifest |= {"name": "toy-ir", "format": "openvino", "file": "model.xml", "precision": precision}
    (version_dir / "manifest.json").write_text(json.dumps(manifest))
    return version_dir


def test_openvino_ir_artifact_loads_through_the_repository(tmp_path: Path) -> None:
    version_dir = write_ir(tmp_path)
    (entry,) = scan_repository(version_dir.parent.parent)
    backend = create_backend(entry, settings(tmp_path))  # auto: IR runs in OpenVINO
    assert isinstance(backend, OpenVinoBackend)
    reference = load_artifact(tmp_path / "onnx" / "toy" / "1", "cpu", settings(tmp_path))
    images = np.random.default_rng(2).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    assert_same_outputs(backend.infer(images), reference.infer(images), atol=1e-5)
    (version_dir / "model.bin").unlink()
    with pytest.raises(RepositoryError, match=r"without its weights model\.bin"):
        scan_repository(version_dir.parent.parent)


def test_ir_artifact_refuses_onnxruntime(tmp_path: Path) -> None:
    with pytest.raises(BackendLoadError, match="runs only on backend 'openvino'"):
        load_artifact(write_ir(tmp_path), "cpu", settings(tmp_path))


@needs_bf16
def test_v1_models_and_metrics_report_the_precision_in_effect(
    make_client: Callable[..., TestClient], tmp_path: Path
) -> None:
    add_toy_model(tmp_path / "repo", "toy")
    client = make_client(
        tmp_path / "repo", backend="openvino", openvino_precision="bf16", openvino_cache_dir=tmp_path / "c"
    )
    model = client.get("/v1/models/toy").json()
    assert model["backend"].endswith(",CPU,bf16]") and model["inference_precision"] == "bf16"
    metrics = client.get("/metrics").text
    assert 'precision="bf16"' in metrics and "detect_model_info{" in metrics


# ------------------------------------------------------------------ the "auto" rule


@pytest.mark.parametrize(
    ("model_format", "precision", "expected"),
    [
        ("onnx", "fp32", "cpu"),
        ("onnx", "fp16", "cpu"),
        ("onnx", "bf16", "openvino"),
        ("onnx", "int8", "openvino"),
        ("openvino", "int8", "openvino"),
        ("openvino", "fp32", "openvino"),
    ],
)
def test_auto_on_the_cpu(model_format: str, precision: str, expected: str) -> None:
    kind = resolve_backend(
        "auto",
        model_format,
        precision=precision,
        providers=["CPUExecutionProvider"],
        has_gpu=False,
        openvino=True,
    )
    assert kind == expected


@pytest.mark.parametrize(
    ("choice", "model_format", "precision", "message"),
    [
        ("auto", "onnx", "int8", "int8 artifact needs OpenVINO.*DETECT_BACKEND=cpu"),
        ("auto", "onnx", "bf16", "bf16 artifact needs OpenVINO"),
        ("auto", "openvino", "fp32", "OpenVINO IR artifact .* needs OpenVINO"),
        ("openvino", "onnx", "fp32", "backend 'openvino' needs OpenVINO"),
        ("cpu", "onnx", "bf16", "ONNX Runtime has no bf16"),
    ],
)
def test_missing_openvino_is_said_clearly(
    choice: str, model_format: str, precision: str, message: str
) -> None:
    with pytest.raises(BackendLoadError, match=message):
        resolve_backend(
            choice,
            model_format,
            precision=precision,
            providers=["CPUExecutionProvider"],
            has_gpu=False,
            openvino=False,
        )


def test_without_openvino_fp32_stays_on_onnxruntime() -> None:
    kind = resolve_backend("auto", "onnx", providers=[], has_gpu=False, openvino=False)
    assert kind == "cpu"


def test_int8_manifest_reads(tmp_path: Path) -> None:
    manifest = Manifest.read(SSD300).model_copy(update={"precision": "int8", "format": "openvino"})
    manifest.write(tmp_path)
    assert Manifest.read(tmp_path).precision == "int8"


def test_int8_artifact_runs_its_unquantized_layers_as_its_manifest_says(tmp_path: Path) -> None:
    shipped = PROJECT / "models" / "ssd300-synth-int8" / "1"
    artifact = tmp_path / "ssd300-synth-int8" / "1"
    artifact.mkdir(parents=True)
    (artifact / "model.onnx").symlink_to(shipped / "model.onnx")
    Manifest.read(shipped).model_copy(update={"unquantized_precision": "bf16"}).write(artifact)
    backend = load_artifact(artifact, "auto", settings(tmp_path))
    # Where the CPU has no bf16 units, the manifest's preference falls back to f32, and says so.
    in_effect = "bf16" if CPU_BF16 else "f32"
    assert isinstance(backend, OpenVinoBackend) and backend.inference_precision == in_effect
    assert load_artifact(shipped, "auto", settings(tmp_path)).inference_precision == "f32"
    # ONNX Runtime has no such switch: it computes them in f32, and says so.
    assert load_artifact(artifact, "cpu", settings(tmp_path)).inference_precision == "f32"


@needs_bf16
def test_auto_follows_a_bf16_setting_to_openvino(tmp_path: Path) -> None:
    (entry,) = scan_repository(add_toy_model(tmp_path / "repo", "toy").parent.parent)
    backend = create_backend(entry, settings(tmp_path, openvino_precision="bf16"))  # an fp32 artifact
    assert isinstance(backend, OpenVinoBackend) and backend.inference_precision == "bf16"
    assert not isinstance(create_backend(entry, settings(tmp_path)), OpenVinoBackend)  # fp32: ORT


def test_openvino_backend_imports_no_torch_or_onnx() -> None:
    code = (
        "import sys, numpy as np\n"
        "from service.runtime.backends import load_artifact\n"
        f"b = load_artifact({str(SSD300)!r}, 'openvino')\n"
        "b.infer(np.zeros((1, 300, 300, 3), np.uint8))\n"
        "roots = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(roots & {'torch', 'torchvision', 'training', 'onnx'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


def test_streams_run_concurrent_calls_with_the_same_outputs(tmp_path: Path) -> None:
    """DETECT_OPENVINO_STREAMS=2: two infer requests, called from two threads at once, each answer
    what one call alone answers (no shared request buffers), and the backend reports its streams."""
    openvino, onnxruntime = pair(
        add_toy_model(tmp_path / "repo", "toy"), tmp_path, openvino_streams=2, intra_op_threads=2
    )
    assert openvino.streams == 2
    assert_concurrent_calls_match(openvino, onnxruntime, (1, 3, 2, 1, 4, 2), seed=3, repeats=5)
    openvino.close()
    with pytest.raises(BackendError, match="unloaded"):
        openvino.infer(np.zeros((1, 64, 64, 3), np.uint8))


def test_one_stream_by_default(tmp_path: Path) -> None:
    openvino, _ = pair(add_toy_model(tmp_path / "repo", "toy"), tmp_path)
    assert openvino.streams == 1


def test_warmup_runs_every_stream_at_every_warm_size(tmp_path: Path) -> None:
    """Each infer request allocates its own buffers on its first run of a size: warmup gives every
    stream both sizes, so a model's memory is reached before it reports ready; then one more of each is
    timed (the batcher's first batch times)."""
    two_streams = settings(tmp_path, openvino_streams=2, intra_op_threads=2)
    assert warmup_batch_sizes(tmp_path, two_streams, streams=2) == [1, 1, 1, 4, 4, 4]


def warmup_batch_sizes(tmp_path: Path, backend_settings: Settings, streams: int = 1) -> list[int]:
    """The batch sizes a toy model's warmup (max batch size 4) runs on the OpenVINO backend, sorted."""
    from service.runtime.loaded_model import LoadedModel
    from service.settings import BatchingConfig

    version_dir = add_toy_model(tmp_path / "repo", "toy")
    backend = load_artifact(version_dir, "openvino", backend_settings)
    assert backend.streams == streams
    sizes: list[int] = []
    original = backend._run

    def counting(inputs: np.ndarray) -> dict[str, np.ndarray]:
        sizes.append(inputs.shape[0])
        return original(inputs)

    backend._run = counting  # type: ignore[method-assign]
    (entry,) = scan_repository(tmp_path / "repo")
    model = LoadedModel(entry, BatchingConfig(4, 0.005, 8), metrics=None)  # type: ignore[arg-type]
    model.backend = backend
    model.warmup()
    return sorted(sizes)


def test_static_batch_sizes_get_their_own_graphs_with_the_same_outputs(tmp_path: Path) -> None:
    """DETECT_OPENVINO_STATIC_BATCH_SIZES: a batch of a listed size runs on its own static-shape graph,
    any other size on the dynamic one, and every answer equals ONNX Runtime's, also from two streams."""
    version_dir = add_toy_model(tmp_path / "repo", "toy")
    openvino, onnxruntime = pair(
        version_dir, tmp_path, openvino_static_batch_sizes="2,1", openvino_streams=2, intra_op_threads=2
    )
    assert openvino.static_batch_sizes == (1, 2)
    assert openvino._requests is not None and set(openvino._requests) == {None, 1, 2}
    assert_concurrent_calls_match(openvino, onnxruntime, (1, 2, 3, 1, 4, 2), seed=5, repeats=3)


@pytest.mark.parametrize(
    ("setting", "max_batch_size", "toy", "expected"),
    [
        ("1", 8, {}, (1,)),  # the default
        ("", 8, {}, ()),
        ("1,2,4,8,16", 4, {}, (1, 2, 4)),  # above the model's max batch size: skipped
        ("1,2", 8, {"batch": 4}, ()),  # a fixed-batch artifact has one static shape already
    ],
)
def test_which_static_batch_sizes_a_model_gets(
    tmp_path: Path, setting: str, max_batch_size: int, toy: dict[str, object], expected: tuple[int, ...]
) -> None:
    add_toy_model(tmp_path / "repo", "toy", **toy)  # type: ignore[arg-type]
    (entry,) = scan_repository(tmp_path / "repo")
    values = {"openvino_static_batch_sizes": setting, "max_batch_size": max_batch_size, "backend": "openvino"}
    backend = create_backend(entry, settings(tmp_path, **values))
    assert backend.static_batch_sizes == expected
    # A graph of its own for some sizes: a line through the batch times does not predict the others.
    assert backend.linear_batch_times == (expected == ())


MASKRCNN_INT8 = PROJECT / "models" / "maskrcnn-synth-int8" / "1"


@pytest.mark.parametrize(("streams", "expected"), [(1, (1,)), (2, ())])
def test_a_roi_align_graph_beside_streams_keeps_to_its_dynamic_graph(
    tmp_path: Path, streams: int, expected: tuple[int, ...]
) -> None:
    """OpenVINO compiles a static Mask R-CNN graph on two streams so that every ROIAlign run fails in some
    compiles (scripts/profiling/probe_roi_align_streams.py): beside streams such a graph gets no static
    graphs, and one image runs on the dynamic graph of each stream, as it does on ONNX Runtime."""
    openvino, onnxruntime = pair(
        MASKRCNN_INT8, tmp_path, openvino_streams=streams, intra_op_threads=2, openvino_solo_graph=False
    )
    assert openvino.static_batch_sizes == expected
    image = np.asarray(
        Image.open(PROJECT / "service" / "static" / "samples" / "shapes-1.jpg").resize((256, 256))
    )
    reference = onnxruntime.infer(image[None])
    confident = reference["detection_scores"] >= 0.5
    assert confident.sum() >= 3
    for _ in range(streams):  # the streams' infer requests in turn
        outputs = openvino.infer(image[None])
        # INT8 kernels differ between the runtimes: the confident detections agree.
        assert (outputs["detection_scores"] >= 0.5).sum() == confident.sum()
        np.testing.assert_allclose(
            outputs["detection_boxes"][confident], reference["detection_boxes"][confident], atol=0.02
        )


def test_a_models_serving_file_sets_its_streams_unless_the_environment_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_toy_model(tmp_path / "repo", "toy")
    (tmp_path / "repo" / "toy" / SERVING_FILE).write_text(
        '{"openvino_streams": 2, "openvino_solo_graph": false}'
    )
    (entry,) = scan_repository(tmp_path / "repo")
    two = create_backend(entry, Settings(backend="openvino", openvino_cache_dir=None))
    assert (two.streams, two.solo) == (2, False)
    monkeypatch.setenv("DETECT_OPENVINO_STREAMS", "1")
    assert create_backend(entry, Settings(backend="openvino", openvino_cache_dir=None)).streams == 1


def test_warmup_runs_the_static_batch_sizes_too(tmp_path: Path) -> None:
    static = settings(tmp_path, openvino_static_batch_sizes="1,2")
    assert warmup_batch_sizes(tmp_path, static) == [1, 1, 2, 2, 4, 4]


def test_with_streams_a_solo_graph_answers_one_image_as_onnxruntime_does(tmp_path: Path) -> None:
    """DETECT_OPENVINO_SOLO_GRAPH (on by default) with two streams: one more graph, for one image on one
    stream of every thread, whose answers equal ONNX Runtime's; it takes one image only. The warmup runs
    and times it too."""
    openvino, onnxruntime = pair(
        add_toy_model(tmp_path / "repo", "toy"), tmp_path, openvino_streams=2, intra_op_threads=2
    )
    assert openvino.solo and openvino.streams == 2
    rng = np.random.default_rng(11)
    for _ in range(3):
        image = rng.integers(0, 256, (1, 64, 64, 3), dtype=np.uint8)
        assert_same_outputs(openvino.infer(image, solo=True), onnxruntime.infer(image), atol=1e-5)
    with pytest.raises(ValueError, match="solo graph runs one image"):
        openvino.infer(np.zeros((2, 64, 64, 3), np.uint8), solo=True)
    model = warmed_up(tmp_path, openvino)
    assert model.solo_warmup_seconds is not None and model.solo_warmup_seconds > 0
    openvino.close()
    with pytest.raises(BackendError, match="unloaded"):
        openvino.infer(np.zeros((1, 64, 64, 3), np.uint8), solo=True)


@pytest.mark.parametrize(
    ("overrides", "toy"),
    [
        ({}, {}),  # one stream already runs a lone image on every thread
        ({"openvino_streams": 2, "openvino_solo_graph": False}, {}),
        ({"openvino_streams": 2}, {"batch": 4}),  # a fixed-batch artifact has one shape only
    ],
    ids=["one-stream", "setting-off", "fixed-batch"],
)
def test_no_solo_graph_where_it_has_no_use_or_is_off(
    tmp_path: Path, overrides: dict[str, object], toy: dict[str, object]
) -> None:
    version_dir = add_toy_model(tmp_path / "repo", "toy", **toy)  # type: ignore[arg-type]
    openvino = load_artifact(version_dir, "openvino", settings(tmp_path, intra_op_threads=2, **overrides))
    assert not openvino.solo
    with pytest.raises(ValueError, match="solo graph runs one image"):
        openvino.infer(np.zeros((openvino.max_batch_size, 64, 64, 3), np.uint8)[:1], solo=True)
    assert warmed_up(tmp_path, openvino).solo_warmup_seconds is None


def warmed_up(tmp_path: Path, backend: Backend) -> LoadedModel:
    """A `LoadedModel` of the toy model in ``tmp_path``'s repository on ``backend``, warmed up."""
    from service.settings import BatchingConfig

    (entry,) = scan_repository(tmp_path / "repo")
    model = LoadedModel(entry, BatchingConfig(4, 0.005, 8), metrics=None)  # type: ignore[arg-type]
    model.backend = backend
    model.warmup()
    return model
