"""What a session reports of the frames it answers: its counts and rates, and each frame's event."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

import numpy as np

from contract.manifest import Label
from service.imaging.postprocess import KeptDetections
from service.streams.frame import Frame
from service.streams.reader import RateMeter

# Lag percentiles and the largest run of predicted frames are reported over this many latest answers.
WINDOW = 256


class CountRate:
    """The per-second rate of a growing total, over the last ``window_s`` seconds of samples."""

    def __init__(self, window_s: float = 2.0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def observe(self, now: float, total: int) -> None:
        with self._lock:
            self._samples.append((now, total))
            while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
                self._samples.popleft()

    def rate(self) -> float:
        with self._lock:
            if len(self._samples) < 2:
                return 0.0
            (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
            return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


class AnswerStats:
    """A session's answered frames: detected and predicted counts and rates, lags, runs without a
    detection, the latest motion score."""

    def __init__(self) -> None:
        self.detected = 0
        self.predicted = 0
        self.lags: deque[float] = deque(maxlen=WINDOW)
        self.since: deque[int] = deque(maxlen=WINDOW)
        self.detected_rate = RateMeter()
        self.predicted_rate = RateMeter()
        self.dropped_rate = CountRate()
        self.motion = 0.0

    @property
    def answered(self) -> int:
        return self.detected + self.predicted

    def count(self, now: float, lag: float, since: int) -> None:
        self.lags.append(lag)
        self.since.append(since)
        if since:
            self.predicted += 1
            self.predicted_rate.tick(now)
        else:
            self.detected += 1
            self.detected_rate.tick(now)

    def answered_fps(self, now: float) -> float:
        return self.detected_rate.rate(now) + self.predicted_rate.rate(now)

    @property
    def since_max(self) -> int:
        return max(self.since, default=0)


def frame_event(
    stream: str,
    frame: Frame,
    size: tuple[int, int],
    found: KeptDetections,
    track_ids: np.ndarray,
    labels: Sequence[Label],
    lag: float,
    since: int,
) -> dict[str, object]:
    """One frame's event: detected (``since`` 0) or predicted (the tracks advanced to it)."""
    return {
        "stream": stream,
        "frame": frame.number,
        "pts": frame.pts,
        "captured_at": round(frame.captured_wall, 3),
        "lag_ms": round(lag * 1000, 1),
        "width": size[0],
        "height": size[1],
        "source": "predicted" if since else "detected",
        "frames_since_detection": since,
        "detections": [
            {
                "track_id": int(track_ids[i]) if track_ids[i] >= 0 else None,
                "class_id": int(found.classes[i]),
                "label": labels[int(found.classes[i])].name,
                "score": round(float(found.scores[i]), 4),
                "box": [round(float(v), 1) for v in found.boxes[i]],
            }
            for i in range(len(found))
        ],
    }
