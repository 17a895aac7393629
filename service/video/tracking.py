"""ByteTrack: track ids for the detections of successive frames of one video or stream.

One `Tracker` per video request or stream session; frames are given in order::

    tracker = Tracker(TrackerConfig.for_fps(15.0))
    for detections in frames:  # boxes float [N, 4] x1, y1, x2, y2 (any pixel unit), scores float [N]
        track_ids = tracker.update(detections.boxes, detections.scores)  # int64 [N], -1 = no track (yet)

The algorithm is ByteTrack (Zhang et al., ECCV 2022) as Roboflow's ``trackers`` package (2.6,
``ByteTrackTracker``) runs it at a fixed frame rate, and it gives the same track ids on the same inputs
(tests/service/video/test_tracking.py): a constant-velocity Kalman filter on the box corners predicts
every track; high-score detections are matched to all tracks by IoU (optimal assignment), then low-score
detections to the tracks left over (this recovers occluded objects whose score dropped); a high-score
detection left unmatched starts a track, which gets its id once it has been matched on
``min_frames`` consecutive frames; a track unmatched for more than ``lost_frames`` frames ends.

Frames need not all be detected: ``update(boxes, scores, steps=k)`` advances every track by ``k`` frames
(the filter's time step, not ``k`` empty updates, which would count each as a miss) before matching, and
`Tracker.predicted` gives the confirmed tracks advanced to a frame between detections without changing
them (`service.video.prediction` builds the frames in between from it). Where detections are frames
apart, ``TrackerConfig(start_velocity=True)`` starts tracks with their velocity (see the field); off by
default, which is ByteTrack's start and the library's ids.

Written here rather than imported because the library needs supervision (matplotlib, scipy) and
opencv-python, about 170 MB more in the serving install and an OpenCV that conflicts with the service's
opencv-python-headless; this module needs numpy and ``lap`` (2.4 MB), the assignment solver of ByteTrack's
reference code. Tracking is class-agnostic, as the library's: a track keeps its id if the class flips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import lap
import numpy as np


@dataclass(frozen=True)
class TrackerConfig:
    """ByteTrack's knobs (the library's defaults at 30 frames per second)."""

    high_threshold: float = 0.6  # detections at or above: first association; below: second
    activation_threshold: float = 0.7  # an unmatched detection at or above starts a track
    match_iou: float = 0.1  # an assignment needs at least this IoU
    lost_frames: int = 30  # a track unmatched for more frames than this ends
    min_frames: int = 2  # consecutive matched frames before a track gets its id
    # Where frames are skipped: a new track's second match sets its velocity to the displacement between
    # its two detections per frame (False: the filter's estimate, ByteTrack's, about half of it), and a
    # new track left unmatched by IoU (its zero-velocity prediction missed a fast object) takes the
    # nearest unmatched high-score detection whose centre moved at most ``start_max_speed`` box sizes
    # (its shorter side) per frame since, of an area within a factor of 2 of its own.
    start_velocity: bool = False
    start_max_speed: float = 0.6

    @classmethod
    def for_fps(cls, fps: float, lost_s: float = 1.0, start_velocity: bool = False) -> TrackerConfig:
        """The defaults for frames processed at ``fps`` per second, keeping lost tracks ``lost_s`` seconds."""
        if not fps > 0:
            raise ValueError(f"fps must be > 0, got {fps!r}")
        return cls(lost_frames=max(1, math.ceil(lost_s * fps)), start_velocity=start_velocity)


class _BoxFilter:
    """Constant-velocity Kalman filter on ``[x1, y1, x2, y2, vx1, vy1, vx2, vy2]``, measuring the corners;
    ByteTrack's noise: measurement 0.1, process 0.01, initial state covariance identity."""

    _F = np.eye(8) + np.eye(8, k=4)  # position += velocity, one frame per step
    _H = np.eye(4, 8)
    _Q = np.eye(8) * 0.01
    _R = np.eye(4) * 0.1

    def __init__(self, box: np.ndarray):
        self.x = np.zeros(8)
        self.x[:4] = box
        self.p = np.eye(8)

    def predict(self, steps: float = 1.0) -> None:
        """Advance ``steps`` frames (any real >= 0): position += steps x velocity; the process noise grows
        with the time step (one step is ByteTrack's filter exactly)."""
        f = self._F if steps == 1.0 else np.eye(8) + steps * np.eye(8, k=4)
        self.x = f @ self.x
        self.p = f @ self.p @ f.T + self._Q * steps

    def box_after(self, steps: float) -> np.ndarray:
        """The box ``steps`` frames ahead of the current state, the state unchanged."""
        box: np.ndarray = self.x[:4] + steps * self.x[4:]
        return box

    def start_velocity(self, box: np.ndarray, first: np.ndarray, frames: float) -> None:
        """Position ``box``, velocity its displacement from ``first`` over ``frames`` frames."""
        self.x[:4] = box
        self.x[4:] = (box - first) / frames

    def update(self, box: np.ndarray) -> None:
        innovation = box - self._H @ self.x
        pht = self.p @ self._H.T
        gain = pht @ np.linalg.inv(self._H @ pht + self._R)
        self.x = self.x + gain @ innovation
        i_kh = np.eye(8) - gain @ self._H
        self.p = i_kh @ self.p @ i_kh.T + gain @ self._R @ gain.T  # Joseph form: stays symmetric

    @property
    def box(self) -> np.ndarray:
        return self.x[:4]


class _Track:
    def __init__(self, box: np.ndarray):
        self.filter = _BoxFilter(box)
        self.first = np.asarray(box, dtype=np.float64).copy()  # the detection that started it
        self.track_id = -1  # until matched on min_frames consecutive frames
        self.missed = 0.0  # frames since the last match
        self.streak = 1  # consecutive matched frames (the first detection counts)
        self.matches = 1  # detections matched in all (the first counts)

    def predict(self, steps: float = 1.0) -> None:
        self.filter.predict(steps)
        if self.missed > 0:
            self.streak = 0
        self.missed += steps

    def update(self, box: np.ndarray, start_velocity: bool = False) -> None:
        self.filter.update(box)
        if start_velocity and self.matches == 1 and self.missed > 0:  # its second detection
            self.filter.start_velocity(box, self.first, self.missed)
        self.missed = 0.0
        self.streak += 1
        self.matches += 1


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` [N, 4] with every box of ``b`` [M, 4] (x1, y1, x2, y2) -> [N, M]."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)))
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=2)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0, None), axis=1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0, None), axis=1)
    union = area_a[:, None] + area_b[None, :] - inter
    iou: np.ndarray = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    return iou


def _assign(iou: np.ndarray, min_iou: float) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """The assignment of rows (tracks) to columns (detections) of largest total IoU, keeping pairs with at
    least ``min_iou``; then the rows and the columns left unmatched, in order."""
    rows, cols = iou.shape
    matched: list[tuple[int, int]] = []
    if rows and cols:
        _, row_to_col, _ = lap.lapjv(1.0 - iou, extend_cost=True)
        matched = [(r, int(c)) for r, c in enumerate(row_to_col) if c >= 0 and iou[r, c] >= min_iou]
    used_rows = {r for r, _ in matched}
    used_cols = {c for _, c in matched}
    return (
        matched,
        [r for r in range(rows) if r not in used_rows],
        [c for c in range(cols) if c not in used_cols],
    )


class Tracker:
    """The tracks of one sequence of frames (see the module's docstring). Not thread-safe: one caller."""

    def __init__(self, config: TrackerConfig | None = None):
        self.config = config or TrackerConfig()
        self._tracks: list[_Track] = []
        self._next_id = 0
        self.frames = 0

    @property
    def ids_given(self) -> int:
        """Track ids handed out so far (ids are 0, 1, ... in order of confirmation)."""
        return self._next_id

    @property
    def tentative(self) -> int:
        """Tracks started but not confirmed yet (no id): each needs another detection soon."""
        return sum(1 for track in self._tracks if track.track_id < 0)

    @property
    def active(self) -> int:
        """Confirmed tracks alive now (matched on this frame, or lost for at most ``lost_frames``)."""
        return sum(1 for track in self._tracks if track.track_id >= 0)

    def update(self, boxes: np.ndarray, scores: np.ndarray, steps: float = 1.0) -> np.ndarray:
        """The detections of the frame ``steps`` frames after the last update (1: the next frame; a
        fraction or more where frames were not detected), ``boxes`` float [N, 4] (x1, y1, x2, y2) and
        ``scores`` float [N] -> each detection's track id, int64 [N] in the input's order (-1: not tracked,
        or not yet).

        Raises `ValueError` when the shapes disagree or ``steps`` is negative or not finite.
        """
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        if len(boxes) != len(scores):
            raise ValueError(f"{len(boxes)} boxes but {len(scores)} scores")
        if not (math.isfinite(steps) and steps >= 0):
            raise ValueError(f"steps must be a finite number >= 0, got {steps!r}")
        self.frames += 1
        ids = np.full(len(boxes), -1, dtype=np.int64)
        cfg = self.config
        for track in self._tracks:
            track.predict(steps)
        predicted = np.array([t.filter.box for t in self._tracks]).reshape(-1, 4)
        high = np.flatnonzero(scores >= cfg.high_threshold)
        low = np.flatnonzero(scores < cfg.high_threshold)

        matched, left_tracks, left_high = _assign(box_iou(predicted, boxes[high]), cfg.match_iou)
        for row, col in matched:
            ids[high[col]] = self._matched(self._tracks[row], boxes[high[col]])
        remaining = [self._tracks[r] for r in left_tracks]
        matched, _, _ = _assign(box_iou(predicted[left_tracks], boxes[low]), cfg.match_iou)
        for row, col in matched:
            ids[low[col]] = self._matched(remaining[row], boxes[low[col]])
        if cfg.start_velocity:
            left_high = self._paired_starts(boxes, high, left_high, ids)
        for col in left_high:
            if scores[high[col]] >= cfg.activation_threshold:
                self._tracks.append(_Track(boxes[high[col]]))
        self._tracks = [
            t
            for t in self._tracks
            if t.missed <= cfg.lost_frames
            and (t.track_id >= 0 or t.streak >= cfg.min_frames or t.missed == 0)
        ]
        return ids

    def _paired_starts(
        self, boxes: np.ndarray, high: np.ndarray, left_high: list[int], ids: np.ndarray
    ) -> list[int]:
        """Pair new tracks unmatched on this frame (one detection so far) with the unmatched high-score
        detections their object can have reached (`TrackerConfig.start_velocity`); the columns of
        ``high`` still unmatched."""
        starts = [t for t in self._tracks if t.track_id < 0 and t.matches == 1 and t.missed > 0]
        if not starts or not left_high:
            return left_high
        firsts = np.array([t.first for t in starts])
        found = boxes[high[left_high]]
        centre_a = (firsts[:, :2] + firsts[:, 2:]) / 2
        centre_b = (found[:, :2] + found[:, 2:]) / 2
        moved = np.linalg.norm(centre_a[:, None, :] - centre_b[None, :, :], axis=2)
        side = np.maximum(np.min(firsts[:, 2:] - firsts[:, :2], axis=1), 1.0)
        reach = self.config.start_max_speed * side * np.array([t.missed for t in starts])
        closeness = np.clip(1.0 - moved / reach[:, None], 0.0, None)  # 1: same place, 0: out of reach
        area_a, area_b = (
            np.prod(firsts[:, 2:] - firsts[:, :2], axis=1),
            np.prod(found[:, 2:] - found[:, :2], axis=1),
        )
        ratio = area_a[:, None] / np.maximum(area_b[None, :], 1.0)
        closeness[(ratio > 2.0) | (ratio < 0.5)] = 0.0  # not the same object
        matched, _, unmatched = _assign(closeness, 1e-9)
        for row, col in matched:
            ids[high[left_high[col]]] = self._matched(starts[row], found[col])
        return [left_high[col] for col in unmatched]

    def reset(self) -> None:
        """End every track (the frames changed size: old boxes mean nothing); ids keep counting up."""
        self._tracks = []

    def predicted(self, steps: float) -> tuple[np.ndarray, np.ndarray]:
        """The confirmed tracks matched at the last update, advanced ``steps`` frames past it without
        changing any track: boxes float [M, 4] and track ids int64 [M]."""
        shown = [t for t in self._tracks if t.track_id >= 0 and t.missed == 0]
        boxes = np.array([t.filter.box_after(steps) for t in shown], dtype=np.float64).reshape(-1, 4)
        return boxes, np.array([t.track_id for t in shown], dtype=np.int64)

    def _matched(self, track: _Track, box: np.ndarray) -> int:
        track.update(box, self.config.start_velocity)
        if track.track_id < 0 and track.streak >= self.config.min_frames:
            track.track_id = self._next_id
            self._next_id += 1
        return track.track_id
