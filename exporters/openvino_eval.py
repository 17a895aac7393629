"""Run an artifact in OpenVINO with an explicit inference precision, for the quantize gate.

The service's OpenVINO backend is where served models run in OpenVINO; until an artifact's precision is
one the service's backends run, the gate evaluates it here, with the service's decoding and resize
(`exporters.served_eval`). The precision is always set explicitly: OpenVINO's CPU plugin would otherwise
pick bf16 by itself on CPUs with AVX-512 BF16 / AMX.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from exporters.served_eval import served_metrics
from service.manifest import Manifest


class OpenVINORunner:
    """``infer(uint8 [B, H, W, 3]) -> {output name: array}`` on OpenVINO's CPU plugin."""

    def __init__(
        self, model_path: str | Path, names: tuple[str, ...], precision_hint: str = "f32", threads: int = 0
    ) -> None:
        import openvino as ov

        core = ov.Core()
        config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": precision_hint}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        self._compiled = core.compile_model(core.read_model(str(model_path)), "CPU", config)
        self._request = self._compiled.create_infer_request()
        # An output port can carry several tensor names; the contract's is the one to report.
        self._names = [
            next((n for n in out.get_names() if n in names), out.get_any_name())
            for out in self._compiled.outputs
        ]
        hint = self._compiled.get_property("INFERENCE_PRECISION_HINT")
        in_effect = hint.to_string() if hasattr(hint, "to_string") else str(hint)
        self._description = f"openvino {ov.__version__} CPU, inference precision {in_effect}"

    @property
    def description(self) -> str:
        return self._description

    def infer(self, images: np.ndarray) -> dict[str, np.ndarray]:
        result = self._request.infer({0: images})
        return {name: np.asarray(result[i]) for i, name in enumerate(self._names)}

    def close(self) -> None:
        del self._request


def openvino_metrics(
    version_dir: str | Path,
    data: str,
    split: str | None,
    precision_hint: str,
    *,
    max_images: int | None = None,
) -> dict[str, Any]:
    """`served_metrics` with the model run by OpenVINO at ``precision_hint`` ("f32" or "bf16")."""
    manifest = Manifest.read(version_dir)
    runner = OpenVINORunner(Path(version_dir) / manifest.file, manifest.outputs, precision_hint)
    return served_metrics(version_dir, data, split, max_images=max_images, runtime=runner)
