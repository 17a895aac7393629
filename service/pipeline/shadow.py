"""Shadow traffic: a copy of a share of the serving version's requests runs on the candidate, off the
request path, and the two versions' detections are compared (`agreement`).

`DetectionPipeline` calls `ShadowRunner.offer` once a request's inference is done, with the network
inputs and the serving version's outputs. Nothing there waits: the copy is started as a background task
when the rollout plan draws it (`service.runtime.rollout`), the candidate is ready, its input is the same
(same network size, resize and layout: the network inputs are reused, not decoded again) and fewer than
``rollout_shadow_max_in_flight`` copies run; otherwise it is dropped and counted
(``detect_shadow_requests_total{result}``). The candidate's batcher takes the copy like any request, with
a deadline of ``rollout_shadow_timeout_s``: when it is busy (its queue cannot take the copy in time) the
copy is dropped (``busy``), so shadowing never queues the served traffic behind it beyond one batch.
Failures are counted (``failed``), logged, never raised. The memory a copy holds (its network inputs and
the encoded image kept for capture) is bounded by the number of copies in flight.

When sample capture is on, an image whose agreement is below ``capture_disagreement_below`` is kept with
the reason ``disagreement`` (docs/capture.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from service.errors import DeadlineExceeded, QueueFull, ServiceUnavailable
from service.imaging.postprocess import valid_count
from service.pipeline.inference import Outputs, infer
from service.pipeline.timing import RequestStages
from service.runtime.loaded_model import LoadedModel
from service.runtime.model_runtime import ModelRuntime

logger = logging.getLogger(__name__)

# Called with each image's index and agreement once the candidate answered; it owns what it was given
# for the images (e.g. their encoded bytes held for capture) and must release it (also when called with
# None: the copy was dropped or failed).
OnCompared = Callable[[list[float] | None], None]


@dataclass(frozen=True)
class Found:
    """One image's detections above a display threshold, in network-input pixels (normalized)."""

    boxes: np.ndarray  # float [N, 4] x1, y1, x2, y2
    classes: np.ndarray  # int [N]


def above_threshold(outputs: Outputs, threshold: float) -> Found:
    """The detections of one image's contract outputs that score at or above ``threshold``."""
    boxes = np.asarray(outputs["detection_boxes"], dtype=np.float64).reshape(-1, 4)
    count = valid_count(outputs, len(boxes))
    scores = np.asarray(outputs["detection_scores"]).reshape(-1)[:count]
    classes = np.asarray(outputs["detection_classes"]).reshape(-1)[:count].astype(np.int64)
    keep = scores >= threshold
    return Found(boxes[:count][keep], classes[keep])


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of boxes ``a`` [N, 4] and ``b`` [M, 4] (x1, y1, x2, y2)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def matched(serving: Found, candidate: Found, iou: float = 0.5) -> int:
    """How many detections pair up, one to one, with the same class and IoU >= ``iou`` (greedy, highest
    IoU first)."""
    if not len(serving.boxes) or not len(candidate.boxes):
        return 0
    overlap = _iou(serving.boxes, candidate.boxes)
    overlap[serving.classes[:, None] != candidate.classes[None, :]] = 0.0
    pairs = 0
    while True:
        i, j = np.unravel_index(int(np.argmax(overlap)), overlap.shape)
        if overlap[i, j] < iou:
            return pairs
        pairs += 1
        overlap[i, :] = 0.0
        overlap[:, j] = 0.0


def agreement(serving: Found, candidate: Found, iou: float = 0.5) -> tuple[float, int]:
    """(matched / the larger count, matched); 1.0 when neither found anything."""
    larger = max(len(serving.boxes), len(candidate.boxes))
    pairs = matched(serving, candidate, iou)
    return (1.0 if larger == 0 else pairs / larger), pairs


class ShadowRunner:
    """Copies a share of requests to a rollout's candidate version; see the module docstring."""

    def __init__(self, runtime: ModelRuntime, max_in_flight: int, timeout_s: float):
        self.runtime = runtime
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def wants(self, model: LoadedModel) -> LoadedModel | None:
        """The candidate a request answered by ``model`` is to be copied to (drawn), or None; counts why
        a drawn copy is dropped before it starts."""
        rollouts = self.runtime.rollouts
        plan = rollouts.shadow_for(model.name, model.version)
        if plan is None:
            return None
        candidate = self.runtime.models.get(model.name, {}).get(plan.candidate)
        why = None
        if candidate is None or not candidate.ready:
            why = "not_ready"
        elif candidate.manifest.input != model.manifest.input:
            why = "input_mismatch"
        elif len(self._tasks) >= self.max_in_flight:
            why = "busy"
        if why is not None:
            rollouts.metrics.shadow.labels(model=model.name, result=why).inc()
            return None
        return candidate

    def start(
        self,
        model: LoadedModel,
        candidate: LoadedModel,
        network_inputs: Sequence[np.ndarray],
        outputs: Sequence[Outputs],
        on_compared: OnCompared | None = None,
    ) -> None:
        """Run the copy in the background (``wants`` said yes); ``on_compared`` gets the agreements."""
        task = asyncio.get_running_loop().create_task(
            self._compare(model, candidate, list(network_inputs), list(outputs), on_compared),
            name=f"shadow-{model.name}:{candidate.version}",
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _compare(
        self,
        model: LoadedModel,
        candidate: LoadedModel,
        network_inputs: list[np.ndarray],
        served: list[Outputs],
        on_compared: OnCompared | None,
    ) -> None:
        metrics = self.runtime.rollouts.metrics
        scores: list[float] | None = None
        try:
            with candidate.lease():
                deadline = time.monotonic() + self.timeout_s
                candidate.admit(len(network_inputs), deadline)
                stages = RequestStages(candidate.metrics, None)
                shadowed = await infer(candidate, network_inputs, deadline, stages)
            scores = []
            for mine, theirs in zip(served, shadowed, strict=True):
                ours = above_threshold(mine, model.manifest.default_threshold)
                other = above_threshold(theirs, candidate.manifest.default_threshold)
                value, pairs = agreement(ours, other)
                scores.append(value)
                metrics.agreement.labels(model=model.name).observe(value)
                metrics.detections.labels(model=model.name, role="serving").inc(len(ours.boxes))
                metrics.detections.labels(model=model.name, role="candidate").inc(len(other.boxes))
                metrics.detections.labels(model=model.name, role="matched").inc(pairs)
            metrics.shadow.labels(model=model.name, result="compared").inc()
        except (QueueFull, ServiceUnavailable, DeadlineExceeded):
            metrics.shadow.labels(model=model.name, result="busy").inc()
        except Exception:
            logger.exception("shadow copy of %s to version %s failed", model.name, candidate.version)
            metrics.shadow.labels(model=model.name, result="failed").inc()
        finally:
            if on_compared is not None:
                on_compared(scores)

    async def stop(self) -> None:
        """Wait for the copies in flight (call before the runtime stops)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
