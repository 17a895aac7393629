"""Raw throughput of a service backend (``service.runtime.backends``), without HTTP, batcher or decoding.

The yardstick for serving overhead: ``detect-bench http --compare-backend MODEL_DIR`` runs this at the
mean batch size the server actually formed, and reports HTTP throughput / raw throughput.
Imports no torch: it runs wherever the service runs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contract.geometry import resize_for_network
from contract.manifest import MANIFEST_FILE, Manifest
from service.imaging.decoding import decode_image
from service.runtime.backends import create_backend
from service.runtime.repository import ModelEntry, scan_repository, select_versions
from service.settings import Settings


@dataclass(frozen=True)
class BackendThroughput:
    model: str
    version: str
    backend: str
    batch_size: int
    batches: int
    images_per_s: float
    batch_ms_p50: float


def resolve_entry(path: str | Path, model: str | None = None) -> ModelEntry:
    """A version folder (holding manifest.json), a model folder (its latest version), or a repository
    (``model``'s latest version, or its only model's)."""
    path = Path(path)
    if (path / MANIFEST_FILE).is_file():
        manifest = Manifest.read(path)
        return ModelEntry(name=manifest.name, version=manifest.version, directory=path, manifest=manifest)
    if path.is_dir() and any((child / MANIFEST_FILE).is_file() for child in path.iterdir() if child.is_dir()):
        entries = [e for e in scan_repository(path.parent) if e.name == path.name]
    else:
        entries = scan_repository(path)
        if model is not None:
            entries = [e for e in entries if e.name == model]
    latest = select_versions(entries, "latest")
    if len(latest) != 1:
        names = sorted({e.name for e in latest})
        raise ValueError(f"{path}: expected one model, found {names}; pass a version folder or --model")
    return latest[0]


def network_batch(entry: ModelEntry, images: Sequence[bytes], batch_size: int, start: int = 0) -> np.ndarray:
    """``batch_size`` network inputs (uint8 [B, H, W, 3]) made from ``images`` the way the service does,
    taking them in turn from index ``start``."""
    spec = entry.manifest.input
    if images:
        decoded = [resize_for_network(decode_image(data, max_pixels=10**9), spec)[0] for data in images]
    else:
        rng = np.random.default_rng(0)
        decoded = [rng.integers(0, 256, (spec.height, spec.width, 3), dtype=np.uint8)]
    picks = [decoded[(start + i) % len(decoded)] for i in range(batch_size)]
    return np.stack(picks)  # B x (H, W, 3) -> (B, H, W, 3)


def measure_backend_throughput(
    model_dir: str | Path,
    *,
    batch_size: int,
    images: Sequence[bytes] = (),
    duration_s: float = 10.0,
    model: str | None = None,
    settings: Settings | None = None,
) -> BackendThroughput:
    """Images per second of back-to-back ``infer`` calls at ``batch_size`` (after one warm-up call).

    Batches cycle through ``images`` (up to 64 of them, as a load client would send them): detection
    post-processing costs more on busy scenes than on empty ones.
    """
    entry = resolve_entry(model_dir, model)
    settings = settings or Settings()
    backend = create_backend(entry, settings)
    try:
        batch_size = max(1, min(batch_size, backend.max_batch_size))
        images = list(images[:64])
        count = max(1, len(images) // batch_size)
        batches = [network_batch(entry, images, batch_size, i * batch_size) for i in range(count)]
        backend.infer(batches[0])  # warm-up: first runs allocate
        times: list[float] = []
        stop_at = time.perf_counter() + duration_s
        while time.perf_counter() < stop_at or not times:
            batch = batches[len(times) % count]
            started = time.perf_counter()
            backend.infer(batch)
            times.append(time.perf_counter() - started)
        return BackendThroughput(
            model=entry.name,
            version=entry.version,
            backend=backend.description,
            batch_size=batch_size,
            batches=len(times),
            images_per_s=batch_size * len(times) / sum(times),
            batch_ms_p50=float(np.percentile(times, 50) * 1000),
        )
    finally:
        backend.close()
