"""Raw throughput of a model in one process, without HTTP or batcher: the yardstick for serving overhead.

``detect-bench http --compare-backend MODEL_DIR`` runs this at the mean batch size the server actually
formed, and reports HTTP throughput / raw throughput. Two yardsticks (``--raw``):

- ``pipeline`` (default): what a request needs besides serving it, inline in one thread: each image
  decoded from its bytes (the service's reduced JPEG decode included), resized for the network, the
  batch inferred, each image's detections selected and mapped to its pixels, and its JSON response
  body built, with the service's own functions.
- ``backend``: back-to-back ``infer`` calls on already-resized network inputs (inference alone).

Imports no torch: it runs wherever the service runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from contract.geometry import network_content_size, resize_for_network
from contract.manifest import MANIFEST_FILE, Manifest
from service.imaging.decoding import decode_image, decode_planned, plan_decode
from service.imaging.postprocess import DetectParams, select_detections, to_schema
from service.runtime.backends import Backend, create_backend
from service.runtime.repository import ModelEntry, scan_repository, select_versions
from service.schemas import DetectionResult
from service.settings import ModelOverride, Settings

Yardstick = Literal["pipeline", "backend"]


@dataclass(frozen=True)
class BackendThroughput:
    """``yardstick``: ``pipeline`` (decode to JSON, inline) or ``backend`` (inference alone)."""

    model: str
    version: str
    backend: str
    batch_size: int
    batches: int
    images_per_s: float
    batch_ms_p50: float
    yardstick: Yardstick = "backend"
    # CPU of this process (every thread: the runtime's too) per image over the timed batches, ms.
    cpu_ms_per_image: float | None = None


def resolve_entry(path: str | Path, model: str | None = None) -> ModelEntry:
    """A version folder (holding manifest.json), a model folder (its latest version), or a repository
    (``model``'s latest version, or its only model's).

    Without the model's serving.json: the raw pipeline and the peer servers run the artifact on the
    runtime's own defaults (on OpenVINO one stream on every thread, what a single caller uses best),
    whatever the service's request path is set to run it with."""
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
    return replace(latest[0], serving=ModelOverride())


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
    yardstick: Yardstick = "backend",
) -> BackendThroughput:
    """Images per second of back-to-back batches at ``batch_size`` (after one warm-up batch): ``infer``
    calls alone, or with ``yardstick="pipeline"`` the whole inline pipeline from the encoded ``images``.

    Batches cycle through ``images`` (up to 64 of them, as a load client would send them): detection
    post-processing costs more on busy scenes than on empty ones.
    """
    entry = resolve_entry(model_dir, model)
    settings = settings or Settings()
    if yardstick == "pipeline" and not images:
        raise ValueError("the pipeline yardstick needs encoded images")
    backend = create_backend(entry, settings)
    try:
        batch_size = max(1, min(batch_size, backend.max_batch_size))
        images = list(images[:64])
        count = max(1, len(images) // batch_size)
        call: Callable[[int], object]
        if yardstick == "pipeline":
            groups = [
                [images[(i * batch_size + j) % len(images)] for j in range(batch_size)] for i in range(count)
            ]

            def call(index: int) -> object:
                return pipeline_batch(backend, entry, groups[index % count], settings)

        else:
            batches = [network_batch(entry, images, batch_size, i * batch_size) for i in range(count)]

            def call(index: int) -> object:
                return backend.infer(batches[index % count])

        call(0)  # warm-up: first runs allocate
        times: list[float] = []
        cpu_started = time.process_time()
        stop_at = time.perf_counter() + duration_s
        while time.perf_counter() < stop_at or not times:
            started = time.perf_counter()
            call(len(times))
            times.append(time.perf_counter() - started)
        cpu_s = time.process_time() - cpu_started
        return BackendThroughput(
            model=entry.name,
            version=entry.version,
            backend=backend.description,
            batch_size=batch_size,
            batches=len(times),
            images_per_s=batch_size * len(times) / sum(times),
            batch_ms_p50=float(np.percentile(times, 50) * 1000),
            yardstick=yardstick,
            cpu_ms_per_image=1000 * cpu_s / (batch_size * len(times)),
        )
    finally:
        backend.close()


def pipeline_batch(
    backend: Backend, entry: ModelEntry, encoded: Sequence[bytes], settings: Settings
) -> list[str]:
    """``POST /detect``'s work for ``encoded`` images without serving them: decode (reduced where the
    service reduces), resize, one ``infer`` call, detections in image pixels, each JSON response body."""
    manifest = entry.manifest
    spec = manifest.input

    def reduce_to(size: tuple[int, int]) -> tuple[int, int]:
        return network_content_size(spec, size)

    views = []
    for data in encoded:
        plan = plan_decode(
            data,
            max_pixels=settings.max_image_pixels,
            reduce_to=reduce_to if settings.reduced_jpeg_decode else None,
        )
        image = decode_planned(data, plan)
        size = plan.original_size if plan.scale_denominator > 1 else (image.shape[1], image.shape[0])
        network_input, transform = resize_for_network(image, spec, size)
        views.append((network_input, transform, size))
    outputs = backend.infer(np.stack([view[0] for view in views]))
    bodies: list[str] = []
    for i, (_, transform, (width, height)) in enumerate(views):
        one = {name: value[i] for name, value in outputs.items()}
        kept = select_detections(one, transform, manifest, DetectParams())
        result = DetectionResult(
            model=manifest.name,
            version=entry.version,
            width=width,
            height=height,
            detections=to_schema(kept, manifest.labels),
        )
        bodies.append(result.model_dump_json(exclude_none=True))
    return bodies
