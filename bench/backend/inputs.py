"""The benchmarks' input images: distinct synthetic uint8 scenes at an artifact's input size, shared by
``detect-bench backend`` (`bench.backend.artifact`) and its runtime comparison
(`bench.backend.runtimes`)."""

from __future__ import annotations

import numpy as np

from contract.manifest import Manifest


def bench_images(manifest: Manifest, count: int, seed: int = 0) -> np.ndarray:
    """``count`` distinct uint8 images at the input size (synthetic scenes, noise, gradients)."""
    from exporters.evaluation.verify import generated_batches, manifest_resize  # onnx, torch: when run

    return generated_batches(manifest_resize(manifest), sizes=(count,), seed=seed)[0]
