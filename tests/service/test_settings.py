"""Settings from the environment, per-model batching overrides, and backend selection rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.runtime.backends import BackendLoadError, gpu_present, resolve_backend
from service.settings import ModelOverride, Settings

CPU_ONLY = ["CPUExecutionProvider"]
GPU_BUILD = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def test_defaults() -> None:
    settings = Settings()
    assert settings.model_repository == Path("models")
    assert (settings.host, settings.port) == ("127.0.0.1", 8000)
    assert (settings.max_batch_size, settings.max_queue_delay_ms, settings.max_queue_size) == (8, 5.0, 64)
    assert settings.backend == "auto"
    assert settings.max_body_bytes == 20 * 1024 * 1024
    assert settings.max_image_pixels == 40_000_000


def test_environment_variables_with_the_detect_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETECT_MODEL_REPOSITORY", "/srv/models")
    monkeypatch.setenv("DETECT_PORT", "9000")
    monkeypatch.setenv("DETECT_MAX_QUEUE_DELAY_MS", "2.5")
    monkeypatch.setenv("DETECT_WARMUP", "false")
    monkeypatch.setenv("DETECT_MODEL_OVERRIDES", '{"ssd300": {"max_batch_size": 4, "max_queue_size": 10}}')
    settings = Settings()
    assert settings.model_repository == Path("/srv/models")
    assert settings.port == 9000
    assert settings.max_queue_delay_ms == 2.5
    assert settings.warmup is False
    assert settings.model_overrides["ssd300"].max_batch_size == 4


def test_constructor_arguments_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DETECT_PORT", "9000")
    assert Settings(port=8123).port == 8123


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DETECT_PORT", "70000"),
        ("DETECT_MAX_BATCH_SIZE", "0"),
        ("DETECT_BACKEND", "tpu"),
        ("DETECT_MODEL_OVERRIDES", '{"m": {"max_batch": 2}}'),
        ("DETECT_OPENVINO_STATIC_BATCH_SIZES", "0"),
        ("DETECT_OPENVINO_STATIC_BATCH_SIZES", "1,x"),
    ],
)
def test_bad_values_are_rejected(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        Settings()


@pytest.mark.parametrize(("value", "sizes"), [("1", (1,)), ("", ()), ("8, 1,2,,1", (1, 2, 8))])
def test_static_batch_sizes_parse(value: str, sizes: tuple[int, ...]) -> None:
    assert Settings(openvino_static_batch_sizes=value).openvino_static_batches == sizes


def test_batching_for_applies_overrides_and_the_artifact_cap() -> None:
    settings = Settings(
        max_batch_size=8,
        max_queue_delay_ms=5,
        max_queue_size=64,
        model_overrides={"small": {"max_batch_size": 2, "max_queue_delay_ms": 1}},  # type: ignore[dict-item]
    )
    small = settings.batching_for("small", artifact_max_batch_size=32)
    assert (small.max_batch_size, small.max_queue_delay_s, small.max_queue_size) == (2, 0.001, 64)
    capped = settings.batching_for("other", artifact_max_batch_size=4)
    assert (capped.max_batch_size, capped.max_queue_delay_s) == (4, 0.005)


def test_a_models_settings_come_from_overrides_then_the_environment_then_its_serving_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shipped = ModelOverride(openvino_streams=2, decode_in_batch=True, max_queue_delay_ms=3)
    # Unset globally: the model's serving.json replaces the defaults.
    model = Settings().for_model("m", shipped)
    assert (model.openvino_streams, model.decode_in_batch, model.max_queue_delay_ms) == (2, True, 3)
    assert Settings().for_model("other").openvino_streams == 1
    # Set in the environment: it applies to every model.
    monkeypatch.setenv("DETECT_OPENVINO_STREAMS", "1")
    model = Settings().for_model("m", shipped)
    assert (model.openvino_streams, model.decode_in_batch) == (1, True)
    # DETECT_MODEL_OVERRIDES names the model: it wins over both.
    monkeypatch.setenv("DETECT_MODEL_OVERRIDES", '{"m": {"openvino_streams": 3, "decode_in_batch": false}}')
    model = Settings().for_model("m", shipped)
    assert (model.openvino_streams, model.decode_in_batch, model.max_queue_delay_ms) == (3, False, 3)
    assert model.batching_for("m", 8).max_queue_delay_s == 0.003


def test_auto_resolves_to_cpu_on_this_machine() -> None:
    # This project's machines have no GPU: whatever onnxruntime build is installed, auto must pick CPU.
    if gpu_present():
        pytest.skip("a GPU is present here; the rule itself is covered by the table test below")
    assert resolve_backend("auto", "onnx") == "cpu"


@pytest.mark.parametrize(
    ("choice", "providers", "has_gpu", "expected"),
    [
        ("auto", CPU_ONLY, False, "cpu"),
        ("auto", GPU_BUILD, False, "cpu"),  # onnxruntime-gpu installed, but no GPU: still CPU
        ("auto", GPU_BUILD, True, "cuda"),
        ("auto", CPU_ONLY, True, "cpu"),  # a GPU but a CPU-only onnxruntime
        ("cpu", GPU_BUILD, True, "cpu"),
        ("cuda", GPU_BUILD, True, "cuda"),
        ("tensorrt-ep", GPU_BUILD, True, "tensorrt-ep"),
    ],
)
def test_backend_resolution_for_onnx(choice: str, providers: list[str], has_gpu: bool, expected: str) -> None:
    assert resolve_backend(choice, "onnx", providers=providers, has_gpu=has_gpu) == expected


@pytest.mark.parametrize(
    ("choice", "model_format", "providers", "has_gpu", "message"),
    [
        ("cuda", "onnx", GPU_BUILD, False, "needs an NVIDIA GPU and none was found"),
        ("cuda", "onnx", CPU_ONLY, True, "needs onnxruntime's CUDAExecutionProvider"),
        ("tensorrt-ep", "onnx", ["CUDAExecutionProvider"], True, "TensorrtExecutionProvider"),
        ("tensorrt", "onnx", GPU_BUILD, True, "runs native engines"),
        ("cpu", "tensorrt", CPU_ONLY, False, "runs only on backend 'tensorrt'"),
    ],
)
def test_impossible_backend_choices_say_why(
    choice: str, model_format: str, providers: list[str], has_gpu: bool, message: str
) -> None:
    with pytest.raises(BackendLoadError, match=message):
        resolve_backend(choice, model_format, providers=providers, has_gpu=has_gpu)


def test_engines_always_resolve_to_native_tensorrt() -> None:
    assert resolve_backend("auto", "tensorrt", providers=CPU_ONLY, has_gpu=False) == "tensorrt"


def test_openvino_cache_dir_defaults_under_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert Settings().openvino_cache_dir == tmp_path / "detect" / "openvino"
    monkeypatch.setenv("DETECT_OPENVINO_CACHE_DIR", "")
    assert Settings().openvino_cache_dir is None  # empty: no cache


def test_stream_redirects_and_address_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings()
    assert (settings.stream_redirects, settings.stream_address_classes) == ("off", "public")
    monkeypatch.setenv("DETECT_STREAM_REDIRECTS", "same-allowlist")
    monkeypatch.setenv("DETECT_STREAM_ADDRESS_CLASSES", "public,private")
    settings = Settings()
    assert (settings.stream_redirects, settings.stream_address_classes) == (
        "same-allowlist",
        "public,private",
    )
    for name, value in (("DETECT_STREAM_REDIRECTS", "always"), ("DETECT_STREAM_ADDRESS_CLASSES", "metadata")):
        monkeypatch.setenv(name, value)
        with pytest.raises(ValidationError, match=name.removeprefix("DETECT_").lower()):
            Settings()
        monkeypatch.delenv(name)
