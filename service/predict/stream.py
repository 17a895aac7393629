"""`detect-predict STREAM_URL --url SERVER`: a running server watches the stream (``POST /v1/streams``),
this reads its Server-Sent Events (``GET /v1/streams/{id}/events``) until ``--max-frames`` events,
``--duration`` seconds or Ctrl-C (or SIGTERM), and always closes the session (``DELETE
/v1/streams/{id}``) at the end.

The server's ``DETECT_STREAM_SOURCES`` decides which URLs it opens (403 otherwise). A session that ends in
``error`` (the source is broken or gone) stops the run with its reason and a non-zero exit.
"""

from __future__ import annotations

import json
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import IO, Any

import numpy as np
from tqdm import tqdm

from service.imaging.postprocess import DetectParams, KeptDetections
from service.predict.detectors import Found, RemoteDetector, coco_rows

# How often the session's state is asked for while no event comes (to notice `error` soon).
POLL_S = 1.0


def is_stream_url(source: str) -> bool:
    return "://" in source


def _sse(response: IO[bytes]) -> Iterator[tuple[str, str]]:
    """The (event, data) pairs of a text/event-stream body; comments (keepalives) are skipped."""
    kind, data = "message", list[str]()
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", list[str]()
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)


class StreamSession:
    """A stream session of the server behind ``detector``; `open_stream` creates and deletes it."""

    def __init__(self, detector: RemoteDetector, stream_id: str):
        self.detector = detector
        self.id = stream_id
        self.events: queue.Queue[tuple[str, str]] = queue.Queue()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    def info(self) -> dict[str, Any]:
        with self.detector.open_path("GET", f"/v1/streams/{self.id}") as response:
            body: dict[str, Any] = json.load(response)
        return body

    def subscribe(self) -> None:
        """Start reading the session's events into `events` (a thread: the main one keeps the deadline)."""
        self._response = self.detector.open_path("GET", f"/v1/streams/{self.id}/events")
        self._thread = threading.Thread(target=self._pump, name=f"events-{self.id}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for pair in _sse(self._response):
                self.events.put(pair)
            self.events.put(("end", "{}"))
        except Exception as err:  # the connection broke, or `close` closed it under the read
            self.events.put(("closed", f"{type(err).__name__}: {err}"))

    def close(self, timeout_s: float = 2.0) -> None:
        """After the session was deleted: its events end, and the thread with them (else it is closed)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._response is not None:
            self._response.close()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a container stop) ends the block as Ctrl-C does, so the session is closed too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def open_stream(detector: RemoteDetector, request: dict[str, object]) -> Iterator[StreamSession]:
    """``POST /v1/streams`` for the block, then ``DELETE`` whatever happens in it (error, Ctrl-C)."""
    body = json.dumps({k: v for k, v in request.items() if v is not None}).encode()
    with detector.open_path("POST", "/v1/streams", body, "application/json") as response:
        stream_id = json.load(response)["id"]
    session = StreamSession(detector, stream_id)
    try:
        yield session
    finally:
        try:
            detector.open_path("DELETE", f"/v1/streams/{stream_id}").close()
        except SystemExit as err:  # reported, never hiding what ended the block
            print(f"detect-predict: could not close stream {stream_id}: {err}", file=sys.stderr)
        session.close()


def _found(event: dict[str, Any], detector: RemoteDetector) -> Found:
    items = event["detections"]
    kept = KeptDetections(
        boxes=np.array([d["box"] for d in items], dtype=np.float32).reshape(-1, 4),
        scores=np.array([d["score"] for d in items], dtype=np.float32),
        classes=np.array([d["class_id"] for d in items], dtype=np.int32),
        rows=np.arange(len(items)),
    )
    ids = np.array([-1 if d["track_id"] is None else d["track_id"] for d in items], dtype=np.int64)
    return Found(event["width"], event["height"], kept, detector.labels, ids, event["frame"], event["pts"])


class _Watch:
    """The run's limits and what it has written so far."""

    def __init__(self, max_frames: int | None, duration_s: float | None):
        self.max_frames = max_frames
        self.deadline = time.monotonic() + duration_s if duration_s is not None else None
        self.events = 0
        self.stopped_by = "max_frames"
        self.rows: list[dict[str, Any]] = []  # COCO results
        self.frames: dict[str, dict[str, Any]] = {}  # image id -> the frame's pts and capture time

    def wait_s(self) -> float | None:
        """How long to wait for the next event (None: the run is over)."""
        if self.max_frames is not None and self.events >= self.max_frames:
            self.stopped_by = "max_frames"
            return None
        if self.deadline is None:
            return POLL_S
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.stopped_by = "duration"
            return None
        return min(POLL_S, left)


def _check_state(session: StreamSession, last: list[str], bar: tqdm[Any]) -> bool:
    """Raise for a session in ``error``; False when it has stopped; say when its state changes."""
    info = session.info()
    state = str(info["state"])
    if state == "error":
        raise SystemExit(f"detect-predict: stream {session.id} failed: {info['last_error']}")
    if state != last[0]:
        reason = f" ({info['last_error']})" if info.get("last_error") and state == "reconnecting" else ""
        bar.write(f"stream {session.id}: {state}{reason}", file=sys.stderr)
        last[0] = state
    return state != "stopped"


def _watch(session: StreamSession, watch: _Watch, lines: IO[str], bar: tqdm[Any]) -> None:
    last = ["starting"]
    while (wait := watch.wait_s()) is not None:
        try:
            kind, data = session.events.get(timeout=wait)
        except queue.Empty:
            if not _check_state(session, last, bar):
                watch.stopped_by = "stopped"
                return
            continue
        if kind == "end":  # deleted by another client, or the server shuts down
            watch.stopped_by = "stopped"
            return
        if kind == "closed":
            _check_state(session, last, bar)  # raises with the reason when it failed
            raise SystemExit(f"detect-predict: the events of stream {session.id} broke off: {data}")
        if kind == "error":
            raise SystemExit(f"detect-predict: stream {session.id}: {data}")
        if kind != "frame":
            continue
        event = json.loads(data)
        found = _found(event, session.detector)
        assert found.frame is not None
        watch.rows.extend(coco_rows(found, found.frame))  # 1, 2, ...: frames read from the source
        watch.frames[str(found.frame)] = {"pts": event["pts"], "captured_at": event["captured_at"]}
        lines.write(json.dumps(event) + "\n")
        watch.events += 1
        bar.update()


def predict_stream(
    source: str, detector: RemoteDetector, params: DetectParams, out: Path, options: Any
) -> int:
    """Watch ``source`` through the server of ``detector``; write ``frames.ndjson`` (the server's events,
    then a summary line), ``results.json`` (COCO rows with ``track_id``; image id: the event's ``frame``,
    the number of frames read from the source so far) and ``images.json`` (image id -> pts, capture time)."""
    classes = None
    if params.class_ids is not None:
        classes = ",".join(detector.labels[i].name for i in sorted(params.class_ids))
    request: dict[str, object] = {
        "url": source,
        "model": detector.model,
        "fps": options.fps,
        "classes": classes,
        "score_threshold": params.score_threshold,
    }
    watch = _Watch(options.max_frames, options.duration)
    ended: SystemExit | None = None  # a failed session, or an interruption: after writing what came
    with (
        terminate_as_interrupt(),
        open_stream(detector, request) as session,
        (out / "frames.ndjson").open("w") as lines,
        tqdm(unit="frame", total=options.max_frames, disable=options.quiet) as bar,
    ):
        session.subscribe()
        try:
            _watch(session, watch, lines, bar)
        except KeyboardInterrupt:
            watch.stopped_by = "interrupted"
            ended = SystemExit(f"detect-predict: interrupted after {watch.events} frames (written to {out})")
        except SystemExit as err:
            watch.stopped_by, ended = "error", err
        ending = {"summary": True, "events": watch.events, "stopped_by": watch.stopped_by, **_counts(session)}
        lines.write(json.dumps(ending) + "\n")
    (out / "results.json").write_text(json.dumps(watch.rows))
    (out / "images.json").write_text(json.dumps(watch.frames, indent=1))
    if ended is not None:
        raise ended
    return watch.events


def _counts(session: StreamSession) -> dict[str, Any]:
    """The session's own counts for the summary line (none when the server no longer answers)."""
    try:
        info = session.info()
    except SystemExit:
        return {}
    return {k: info[k] for k in ("frames_read", "frames_processed", "dropped_frames", "reconnects")}
