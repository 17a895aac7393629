"""The served pipeline as a library for offline use: load an artifact the way the service does, decode,
resize and run it, so the pixels verified are the pixels served.

This is the service's one public entry for code outside it (the exporters' evaluations, engine checks
and benchmarks):

- `load_backend`: an artifact's version folder loaded by the service's own backend factory, on the
  runtime a ``DETECT_BACKEND`` value resolves to on this machine;
- `decode_image`: image file bytes -> RGB ``uint8 [H, W, 3]``, EXIF orientation applied, as an upload is
  decoded;
- `Backend`: what `load_backend` returns; ``infer`` takes ``uint8 [B, H, W, 3]`` images resized by
  ``contract.geometry.resize_for_network`` (the service's resize) and returns the manifest's outputs;
- `BackendLoadError`: the artifact cannot run here (missing runtime or GPU, or a graph that contradicts
  its manifest);
- `cpu_has_bf16`: whether OpenVINO can run bf16 inference on this CPU.
- `cpu_int8_instructions`: which INT8 instructions OpenVINO's INT8 kernels use on this CPU (their results
  differ between them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contract.manifest import Manifest
from service.imaging.decoding import decode_image
from service.runtime.backends.base import Backend, BackendLoadError
from service.runtime.backends.machine import cpu_has_bf16, cpu_int8_instructions
from service.runtime.backends.select import load_artifact
from service.settings import Settings

__all__ = [
    "Backend",
    "BackendLoadError",
    "cpu_has_bf16",
    "cpu_int8_instructions",
    "decode_image",
    "load_backend",
]


def load_backend(
    version_dir: str | Path,
    backend: str = "auto",
    *,
    manifest: Manifest | None = None,
    threads: int = 0,
    openvino_precision: str | None = None,
    openvino_cache_dir: Path | None = None,
) -> Backend:
    """The artifact in ``version_dir`` on the backend the service picks for ``backend`` (a
    ``DETECT_BACKEND`` value: auto, cpu, openvino, cuda, tensorrt-ep or tensorrt).

    The service's other settings come from the environment (``DETECT_*``), except for those given here:
    ``threads`` intra-op threads (0: the runtime's default), and for OpenVINO ``openvino_precision``
    (manifest, f32 or bf16) and ``openvino_cache_dir`` (compiled models). ``manifest`` stands for the
    folder's manifest.json, e.g. an engine's, checked before its manifest is written.

    Raises:
        BackendLoadError: the artifact cannot run here, saying why.
        pydantic.ValidationError: a setting given here is not one the service accepts.
    """
    overrides: dict[str, Any] = {"backend": backend, "intra_op_threads": threads}
    if openvino_precision is not None:
        overrides["openvino_precision"] = openvino_precision
    if openvino_cache_dir is not None:
        overrides["openvino_cache_dir"] = openvino_cache_dir
    return load_artifact(version_dir, backend, Settings(**overrides), manifest=manifest)
