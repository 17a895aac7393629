"""Which images to capture, decided on the request path in microseconds: `CapturePolicy` and `RateLimit`.

An image is captured for the first rule it meets, in this order: its top score lies inside the uncertainty
band (``score_band``), fewer than ``min_detections`` of its detections reach the display threshold
(``few_detections``), or it falls in the random baseline share (``random``). During a rollout with a
shadow share, an image the serving and candidate versions disagree on is kept as ``disagreement``
(decided once the candidate answered: `SampleCapture.offer_disagreement`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

REASONS = ("score_band", "few_detections", "random", "disagreement")


@dataclass(frozen=True)
class CapturePolicy:
    """The capture rules; `reason` applies them to one image's detection scores."""

    band: tuple[float, float] | None = (0.3, 0.6)
    min_detections: int = 1
    random_share: float = 0.0

    def reason(self, scores: np.ndarray, display_threshold: float, draw: float) -> str | None:
        """Why an image with detection ``scores`` (float [N]) is captured, or None.

        ``draw`` is a uniform random number in [0, 1) (the random baseline share is ``draw < share``).
        """
        if self.band is not None and len(scores):
            low, high = self.band
            if low <= float(scores.max()) <= high:
                return "score_band"
        if self.min_detections and int(np.count_nonzero(scores >= display_threshold)) < self.min_detections:
            return "few_detections"
        if draw < self.random_share:
            return "random"
        return None


class RateLimit:
    """At most ``per_minute`` admissions in any 60-second window; thread-safe."""

    WINDOW_S = 60.0

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        self._times: deque[float] = deque()
        self._lock = threading.Lock()

    def admit(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._times and now - self._times[0] >= self.WINDOW_S:
                self._times.popleft()
            if len(self._times) >= self.per_minute:
                return False
            self._times.append(now)
            return True
