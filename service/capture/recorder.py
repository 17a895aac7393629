"""`SampleCapture`: decides on the request path, writes in a background thread, never fails a request.

The request path only reads the capture's state, takes references to the encoded images it may keep
(`candidates`, bounded by ``capture_memory_bytes``), applies the rules to the detections, takes a rate
token and puts the image on a bounded queue; anything that does not fit is dropped and counted. One
writer thread (started and stopped with the app) writes the queue into the `CaptureStore` and rewrites
the COCO file when the queue runs empty. An `OSError` there (disk full, read-only volume) turns capture off
for the life of the process, with the reason logged, in ``GET /v1/captures`` and in the metrics.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge

from contract.manifest import Label
from service.capture.policy import REASONS, CapturePolicy, RateLimit
from service.capture.store import CaptureRecord, CaptureStore, QuotaExceeded, image_suffix
from service.schemas import CaptureSummary
from service.settings import Settings

log = logging.getLogger("detect.capture")

State = Literal["off", "on", "failed"]
STATES: tuple[State, ...] = ("off", "on", "failed")
DROP_REASONS = ("memory", "rate", "quota", "queue_full", "failed")


@dataclass(frozen=True)
class Prediction:
    """One image's detections as the request kept them, in original-image pixels."""

    width: int
    height: int
    boxes: np.ndarray  # float32 [N, 4] x1, y1, x2, y2
    scores: np.ndarray  # float32 [N]
    classes: np.ndarray  # int32 [N], indices into the model's labels


@dataclass(frozen=True)
class ModelIdentity:
    name: str
    version: str
    labels: tuple[Label, ...]
    display_threshold: float


@dataclass(frozen=True)
class _Job:
    """One image to write; its record is built by the writer, off the request path."""

    data: bytes | bytearray
    reason: str
    model: ModelIdentity
    prediction: Prediction
    name: str
    captured_at: float  # time.time()


class CaptureMetrics:
    """``detect_capture_state{state}`` (1 for the current state), ``detect_captured_total{reason}``,
    ``detect_capture_dropped_total{why}``, ``detect_capture_bytes`` and ``detect_capture_queue_depth``."""

    def __init__(self, registry: CollectorRegistry):
        self.state = Gauge(
            "detect_capture_state", "1 for the capture's current state", ["state"], registry=registry
        )
        self.captured = Counter(
            "detect_captured",
            "Images written to the capture folder, by reason",
            ["reason"],
            registry=registry,
        )
        self.dropped = Counter(
            "detect_capture_dropped",
            "Images chosen for capture but not written, by why (memory, rate, quota, queue_full, failed)",
            ["why"],
            registry=registry,
        )
        self.bytes = Gauge("detect_capture_bytes", "Bytes the capture folder holds", registry=registry)
        self.queue_depth = Gauge(
            "detect_capture_queue_depth", "Captured images waiting to be written", registry=registry
        )
        for reason in REASONS:
            self.captured.labels(reason=reason)
        for why in DROP_REASONS:
            self.dropped.labels(why=why)

    def set_state(self, state: State) -> None:
        for s in STATES:
            self.state.labels(state=s).set(1 if s == state else 0)


class SampleCapture:
    """The capture of one app; `start` and `stop` in its lifespan. Off (and writing nothing, ever) when
    ``settings.capture_dir`` is None."""

    def __init__(self, settings: Settings, registry: CollectorRegistry):
        self.metrics = CaptureMetrics(registry)
        self.policy = CapturePolicy(
            settings.capture_band, settings.capture_min_detections, settings.capture_random_share
        )
        self.rate = RateLimit(settings.capture_max_per_minute)
        self.memory_bytes = settings.capture_memory_bytes
        self.disagreement_below = settings.capture_disagreement_below
        self.store = (
            CaptureStore(settings.capture_dir, settings.capture_max_bytes)
            if settings.capture_dir is not None
            else None
        )
        self.state: State = "off"
        self.reason: str | None = "capture_dir is not set" if self.store is None else "not started"
        self._queue: queue.Queue[_Job | None] = queue.Queue(settings.capture_queue)
        self._held = 0
        self._lock = threading.Lock()
        self._random = random.Random()
        self._thread: threading.Thread | None = None
        self._dropped: collections.Counter[str] = collections.Counter()
        self.metrics.set_state("off")

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Open the folder and start the writer; a folder that cannot be written turns capture off."""
        if self.store is None:
            return
        try:
            self.store.open()
        except OSError as exc:
            self._fail(f"cannot open {self.store.root}: {exc}")
            return
        self.metrics.bytes.set(self.store.used_bytes)
        self.state, self.reason = "on", None
        self.metrics.set_state("on")
        self._thread = threading.Thread(target=self._write_loop, name="detect-capture", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the writer."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:  # the disk does not answer: give up on what is queued (it was never visible)
            log.error(
                "capture: the writer did not empty its queue in %.0f s; %d images not written",
                timeout,
                self._queue.qsize(),
            )
        else:
            self._thread.join(timeout)
        self._thread = None

    @property
    def on(self) -> bool:
        return self.state == "on"

    def summary(self) -> CaptureSummary:
        images, by_reason = self.store.counts() if self.store is not None else (0, {})
        dropped = {why: self._dropped[why] for why in DROP_REASONS}
        return CaptureSummary(
            state=self.state,
            reason=self.reason,
            images=images,
            bytes=self.store.used_bytes if self.store is not None else 0,
            max_bytes=self.store.max_bytes if self.store is not None else 0,
            by_reason=by_reason,
            dropped=dropped,
            queued=self._queue.qsize(),
        )

    # ------------------------------------------------------------------ the request path

    @contextlib.contextmanager
    def candidates(self, data: Sequence[bytes | bytearray]) -> Iterator[Candidates]:
        """References to the encoded images ``data`` that may be captured, for the block; the memory of
        those not handed to the writer is given back when it ends."""
        kept: list[bytes | bytearray | None] = [None] * len(data)
        if self.on:
            with self._lock:
                for i, item in enumerate(data):
                    if self._held + len(item) <= self.memory_bytes:
                        self._held += len(item)
                        kept[i] = item
        held = Candidates(self, kept)
        try:
            yield held
        finally:
            held.release()

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self._held -= nbytes

    def offer_disagreement(
        self, data: bytes | bytearray, model: ModelIdentity, prediction: Prediction, agreement: float
    ) -> None:
        """Keep an image held by `Candidates.offer` (``keep``) when two versions agreed on it less than
        ``disagreement_below``; its memory is given back either way."""
        if agreement >= self.disagreement_below or not self._offer(data, model, prediction, "disagreement"):
            self._release(len(data))

    def release(self, data: bytes | bytearray) -> None:
        """Give back the memory of an image held by `Candidates.offer` (``keep``)."""
        self._release(len(data))

    def _offer(
        self,
        data: bytes | bytearray | None,
        model: ModelIdentity,
        prediction: Prediction,
        reason: str | None = None,
    ) -> bool:
        """Apply the rules to one image (or keep it for ``reason``); True when it was handed to the writer
        (which releases its memory)."""
        if reason is None:
            reason = self.policy.reason(prediction.scores, model.display_threshold, self._random.random())
        if reason is None or not self.on:
            return False
        if data is None:
            self._drop("memory")
            return False
        store = self.store
        assert store is not None
        if store.used_bytes + len(data) > store.max_bytes:
            self._drop("quota")
            return False
        if not self.rate.admit():
            self._drop("rate")
            return False
        try:
            self._queue.put_nowait(_Job(data, reason, model, prediction, store.next_name(), time.time()))
        except queue.Full:
            self._drop("queue_full")
            return False
        self.metrics.queue_depth.set(self._queue.qsize())
        return True

    # ------------------------------------------------------------------ the writer thread

    def _write_loop(self) -> None:
        store = self.store
        assert store is not None
        dirty = False
        while True:
            try:
                job = self._queue.get(timeout=0.5) if dirty else self._queue.get()
            except queue.Empty:  # idle: bring the COCO file up to date
                dirty = not self._publish(store)
                continue
            self.metrics.queue_depth.set(self._queue.qsize())
            if job is None:
                if dirty:
                    self._publish(store)
                return
            try:
                if self.on:
                    store.write(job.data, _record(job))
                    self.metrics.captured.labels(reason=job.reason).inc()
                    self.metrics.bytes.set(store.used_bytes)
                    dirty = True
                else:
                    self._drop("failed")
            except QuotaExceeded:
                self._drop("quota")
            except OSError as exc:
                self._drop("failed")
                self._fail(f"writing to {store.root} failed: {exc}")
            except Exception:  # a bug must not stop the writer (the queue would fill for good)
                log.exception("capture: writing %s failed", job.name)
                self._drop("failed")
            finally:
                self._release(len(job.data))

    def _publish(self, store: CaptureStore) -> bool:
        if not self.on:
            return True
        try:
            store.publish()
        except OSError as exc:
            self._fail(f"writing {store.root} failed: {exc}")
        return True

    def _drop(self, why: str) -> None:
        self._dropped[why] += 1
        self.metrics.dropped.labels(why=why).inc()

    def _fail(self, reason: str) -> None:
        if self.state != "failed":
            log.error("capture turned off: %s", reason)
        self.state, self.reason = "failed", reason
        self.metrics.set_state("failed")


class Candidates:
    """The encoded images of one request that may be captured (see `SampleCapture.candidates`)."""

    def __init__(self, capture: SampleCapture, kept: list[bytes | bytearray | None]):
        self._capture = capture
        self._kept = kept

    def offer(
        self, index: int, model: ModelIdentity, prediction: Prediction, keep: bool = False
    ) -> bytes | bytearray | None:
        """Capture image ``index`` of the request if a rule chooses it and the bounds allow. With ``keep``,
        an image not chosen is returned, still held against the memory budget, for a later decision
        (`SampleCapture.offer_disagreement` or `SampleCapture.release` give it back)."""
        if index >= len(self._kept):
            return None
        data, self._kept[index] = self._kept[index], None
        if self._capture._offer(data, model, prediction):
            return None
        if data is not None:
            if keep:
                return data
            self._capture._release(len(data))
        return None

    def release(self) -> None:
        for i, data in enumerate(self._kept):
            if data is not None:
                self._capture._release(len(data))
                self._kept[i] = None


def _record(job: _Job) -> CaptureRecord:
    """The record of ``job``: its predictions as COCO boxes ``[x, y, w, h]`` in original pixels."""
    labels, prediction = job.model.labels, job.prediction
    by_coco_id = all(label.coco_id is not None for label in labels)
    ids = [
        label.coco_id if by_coco_id and label.coco_id is not None else i + 1 for i, label in enumerate(labels)
    ]
    rows = zip(
        prediction.boxes.tolist(), prediction.scores.tolist(), prediction.classes.tolist(), strict=True
    )
    predictions = [
        {
            "category_id": ids[cls],
            "bbox": [round(x1, 2), round(y1, 2), round(x2 - x1, 2), round(y2 - y1, 2)],
            "score": round(score, 5),
        }
        for (x1, y1, x2, y2), score, cls in rows
    ]
    return CaptureRecord(
        name=job.name,
        file_name=job.name + image_suffix(job.data),
        width=prediction.width,
        height=prediction.height,
        model=job.model.name,
        version=job.model.version,
        reason=job.reason,
        captured_at=datetime.fromtimestamp(job.captured_at, UTC).isoformat(timespec="milliseconds"),
        predictions=predictions,
        categories=[{"id": i, "name": label.name} for i, label in zip(ids, labels, strict=True)],
    )
