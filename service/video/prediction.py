"""An answer for every frame: detected frames update the tracker, the frames in between get its tracks
advanced to their time by the Kalman filter.

::

    predictor = TrackPredictor(Tracker(TrackerConfig.for_fps(15.0)), max_predicted_frames=15)
    ids = predictor.detected(position, detections)  # a detected frame: its detections' track ids
    carried = predictor.predicted(position)          # a frame in between: the live tracks moved there

``position`` is the frame's time in frames at the tracker's rate (a frame count for a video, the seconds
since the session started times its fps for a camera): the tracker advances by the distance between
positions, never by empty updates, so a track is not counted as missed on frames nobody looked at. A
position that goes back or stands still (a camera's clock jumping) advances nothing. Predicted boxes
are the confirmed tracks that matched at the last detection, with that detection's class and score; after
``max_predicted_frames`` frames without a detection a frame gets no predicted boxes at all, so a box
never drifts on its own for long.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from service.imaging.postprocess import KeptDetections
from service.video.tracking import Tracker


@dataclass(frozen=True)
class Predicted:
    """The boxes of a frame between detections (original-image pixels)."""

    boxes: np.ndarray  # float32 [M, 4] x1, y1, x2, y2
    scores: np.ndarray  # float32 [M], each track's score at its last detection
    classes: np.ndarray  # int32 [M], each track's class at its last detection
    track_ids: np.ndarray  # int64 [M]
    frames_since_detection: int

    def __len__(self) -> int:
        return len(self.track_ids)

    def as_detections(self) -> KeptDetections:
        """The boxes in the detections' layout (to draw or serialize them the same way)."""
        rows = np.full(len(self), -1, dtype=np.int64)
        return KeptDetections(self.boxes, self.scores, self.classes, rows)


class TrackPredictor:
    """A tracker that answers every frame (see the module's docstring). One caller, frames in order."""

    def __init__(self, tracker: Tracker, max_predicted_frames: int):
        if max_predicted_frames < 0:
            raise ValueError(f"max_predicted_frames must be >= 0, got {max_predicted_frames!r}")
        self.tracker = tracker
        self.max_predicted_frames = max_predicted_frames
        self._last: float | None = None  # position of the last detected frame
        self._since = 0  # frames answered by prediction since then
        self._seen: dict[int, tuple[int, float]] = {}  # track id -> class, score at its last detection
        self.new_tracks = 0  # tracks the last detected frame started or confirmed

    @property
    def frames_since_detection(self) -> int:
        return self._since

    @property
    def live_tracks(self) -> int:
        """Confirmed tracks matched at the last detection (what predicted frames show)."""
        return len(self._seen)

    def reset(self) -> None:
        """Forget every track (new ids from here) and the last detection."""
        self.tracker.reset()
        self._last, self._since, self._seen, self.new_tracks = None, 0, {}, 0

    def detected(self, position: float, detections: KeptDetections) -> np.ndarray:
        """The detections of the frame at ``position`` -> their track ids, int64 [N] (-1: none yet)."""
        steps = 1.0 if self._last is None else max(0.0, position - self._last)
        # Past the tracker's memory every track ends anyway; a bounded step keeps the filter's numbers sane.
        steps = min(steps, float(self.tracker.config.lost_frames + 1))
        given = self.tracker.ids_given
        ids = self.tracker.update(detections.boxes, detections.scores, steps)
        # New objects: ids first given now, and tracks started but not confirmed (they need the next frame).
        self.new_tracks = self.tracker.ids_given - given + self.tracker.tentative
        self._last = position if self._last is None else max(self._last, position)
        self._since = 0
        self._seen = {
            int(track_id): (int(detections.classes[i]), float(detections.scores[i]))
            for i, track_id in enumerate(ids)
            if track_id >= 0
        }
        return ids

    def drift(self, position: float) -> float:
        """How far the fastest live track has moved since the last detection, at ``position``, in box
        sizes (its centre's displacement over its box's shorter side): what a detection would correct."""
        if self._last is None or not self._seen:
            return 0.0
        start, _ = self.tracker.predicted(0.0)
        moved, _ = self.tracker.predicted(max(0.0, position - self._last))
        if not len(start):
            return 0.0
        shift = np.hypot(*((moved[:, :2] + moved[:, 2:]) / 2 - (start[:, :2] + start[:, 2:]) / 2).T)
        side = np.maximum(np.minimum(start[:, 2] - start[:, 0], start[:, 3] - start[:, 1]), 1.0)
        return float(np.max(shift / side))

    def predicted(self, position: float, size: tuple[int, int] | None = None) -> Predicted:
        """The frame at ``position`` (after the last detected one): the live tracks advanced to it, or no
        box once ``max_predicted_frames`` frames have passed without a detection (or before the first).
        With the frame's ``size`` (width, height), boxes are clipped to it and a track predicted wholly
        out of it is left out (its object has left the picture)."""
        self._since += 1
        if self._last is None or self._since > self.max_predicted_frames or not self._seen:
            return _empty(self._since)
        boxes, ids = self.tracker.predicted(max(0.0, position - self._last))
        known = [i for i, track_id in enumerate(ids) if int(track_id) in self._seen]
        if size is not None:  # inside the frame only: a track predicted out of it has left
            boxes = _inside(boxes, size)
            known = [i for i in known if boxes[i, 2] > boxes[i, 0] and boxes[i, 3] > boxes[i, 1]]
        ids = ids[known]
        seen = [self._seen[int(track_id)] for track_id in ids]
        return Predicted(
            boxes[known].astype(np.float32),
            np.array([score for _, score in seen], dtype=np.float32),
            np.array([cls for cls, _ in seen], dtype=np.int32),
            ids,
            self._since,
        )


def _inside(boxes: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    width, height = size
    inside: np.ndarray = np.clip(boxes, 0.0, np.array([width, height, width, height], dtype=np.float64))
    return inside


def _empty(since: int) -> Predicted:
    return Predicted(
        np.zeros((0, 4), np.float32),
        np.zeros(0, np.float32),
        np.zeros(0, np.int32),
        np.zeros(0, np.int64),
        since,
    )
