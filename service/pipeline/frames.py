"""Already-decoded frames (a video file's, a stream's) as prepared images: the decode stage is the
caller's, the rest of `service.pipeline.detect` (resize, batcher, postprocess) is the same as for an
uploaded image."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from contract.geometry import resize_for_network
from service.errors import BadRequest
from service.pipeline.detect import Prepared, View
from service.pipeline.inputs import ImageUpload
from service.pipeline.timing import RequestStages
from service.runtime.loaded_model import LoadedModel


def prepare_frames(
    model: LoadedModel,
    frames: Sequence[np.ndarray],
    labels: Sequence[str],
    keep_original: bool,
    stages: RequestStages,
) -> list[Prepared]:
    """Each RGB ``uint8 [H, W, 3]`` frame resized to the network input (blocking: run in a worker
    thread); the frame itself is kept only with ``keep_original`` (to draw on). Raises `BadRequest`
    naming a frame that is not such an array."""
    spec = model.manifest.input
    prepared: list[Prepared] = []
    for frame, label in zip(frames, labels, strict=True):
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8 or 0 in frame.shape:
            raise BadRequest(
                f"{label}: expected an RGB uint8 [H, W, 3] frame, got {frame.dtype} {frame.shape}",
                field=label,
            )
        started = time.perf_counter()
        height, width = frame.shape[:2]
        view = View(*resize_for_network(frame, spec, (width, height)))
        stages.stage("preprocess", time.perf_counter() - started)
        upload = ImageUpload(label=label, data=b"")
        prepared.append(Prepared(upload, (width, height), [view], None, frame if keep_original else None))
    return prepared
