"""Stream sessions replayed on a simulated clock, for a deterministic measure of what the detection
budget costs in accuracy (scripts/video/stream_quality.py scores the answers against ground truth).

Each camera is a sequence of frames whose detections were computed beforehand (the model's output on
every frame, so only the choice of frames differs between runs) and whose motion scores were measured.
Frames arrive at the camera's fps from its phase; one detector runs batches whose time follows a cost
model (``per_image_s * n + fixed_s``, the batch-time fit the service makes), taking the queued frames in
order, at most ``max_batch`` at a time. Three ways to answer:

- `replay_every`: offline, the detector on every ``every``-th frame, the tracker in between (``every``
  1: detect every frame);
- `replay_today`: the newest-frame loop without prediction: each camera keeps one frame in the
  detector's queue, the frames that arrive meanwhile are replaced by newer ones, and only detected
  frames are answered (the others have no output);
- `replay_scheduled`: the detection budget (`service.streams.schedule`, the same rule and budget as the
  live `service.streams.scheduler`): rounds every ``interval_s``, the chosen frames queued for the
  detector, every other frame answered by the tracker (`service.video.prediction`).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from service.imaging.postprocess import KeptDetections
from service.streams.schedule import Candidate, SchedulePolicy, TokenBudget, choose
from service.video.prediction import TrackPredictor
from service.video.tracking import Tracker, TrackerConfig


@dataclass(frozen=True)
class CostModel:
    """Batch time ``per_image_s * n + fixed_s`` of one detector running batches of at most ``max_batch``.
    The defaults give 67 frames/s at batch 8: the default model's measured stream ceiling on 2 cores
    (docs/streams.md)."""

    per_image_s: float = 0.0137
    fixed_s: float = 0.0098
    max_batch: int = 8

    def batch_s(self, size: int) -> float:
        return self.per_image_s * size + self.fixed_s

    @property
    def throughput(self) -> float:
        """Frames per second at full batches."""
        return self.max_batch / self.batch_s(self.max_batch)


@dataclass(frozen=True)
class Camera:
    """One camera's frames: the detections of each (kept by the score threshold) and its motion score."""

    detections: list[KeptDetections]
    motion: list[float]
    fps: float = 15.0
    phase_s: float = 0.0
    size: tuple[int, int] | None = None  # width, height: predicted boxes are kept inside it

    def arrival(self, frame: int) -> float:
        return self.phase_s + frame / self.fps


@dataclass(frozen=True)
class Answer:
    """A frame's answer: boxes with track ids (-1: none yet), detected or predicted."""

    boxes: np.ndarray  # float [N, 4]
    scores: np.ndarray  # float [N]
    track_ids: np.ndarray  # int64 [N]
    source: str  # detected | predicted


@dataclass
class _State:
    camera: Camera
    predictor: TrackPredictor | None
    answers: list[Answer | None]
    in_flight: int | None = None  # frame queued for or inside the detector
    newest: int | None = None  # frame waiting in the slot (today's loop)
    waiting: list[int] = field(default_factory=list)  # frames to answer after the detection
    last_detected_at: float | None = None
    ready_at: tuple[float, int] = (0.0, 0)  # today's loop: when it could queue a frame (FIFO order)


def _tracker(fps: float, start_velocity: bool = False) -> Tracker:
    return Tracker(TrackerConfig.for_fps(fps, start_velocity=start_velocity))


def _detected(state: _State, frame: int) -> None:
    found = state.camera.detections[frame]
    if state.predictor is None:
        return
    ids = state.predictor.detected(float(frame), found)
    state.answers[frame] = Answer(found.boxes, found.scores, ids, "detected")


def _predicted(state: _State, frame: int) -> None:
    assert state.predictor is not None
    carried = state.predictor.predicted(float(frame), state.camera.size)
    state.answers[frame] = Answer(carried.boxes, carried.scores, carried.track_ids, "predicted")


def replay_every(
    camera: Camera, every: int, max_predicted: int = 15, start_velocity: bool | None = None
) -> list[Answer | None]:
    """The detector on frames 0, every, 2 x every, ...; the tracker answers the others. Its tracks start
    with the velocity of their first two detections when ``start_velocity`` (None: when ``every`` > 1, as
    the service's video files)."""
    if start_velocity is None:
        start_velocity = every > 1
    tracker = _tracker(camera.fps, start_velocity)
    state = _State(camera, TrackPredictor(tracker, max_predicted), [None] * len(camera.motion))
    for frame in range(len(camera.motion)):
        if frame % every == 0:
            _detected(state, frame)
        else:
            _predicted(state, frame)
    return state.answers


class _Detector:
    """One worker running batches of queued (camera, frame) items, by the cost model."""

    def __init__(self, cost: CostModel):
        self.cost = cost
        self.queue: deque[tuple[int, int]] = deque()
        self.busy_until = 0.0
        self.running: list[tuple[int, int]] = []
        self.images = 0

    def start_if_free(self, now: float) -> None:
        if self.running or not self.queue:
            return
        size = min(self.cost.max_batch, len(self.queue))
        self.running = [self.queue.popleft() for _ in range(size)]
        self.busy_until = now + self.cost.batch_s(size)
        self.images += size

    def finish(self, now: float) -> list[tuple[int, int]]:
        if not self.running or now < self.busy_until:
            return []
        done, self.running = self.running, []
        return done


def _ticks(cameras: list[Camera], interval_s: float) -> tuple[list[tuple[float, int, int]], float]:
    """Every (arrival, camera, frame), by arrival; and the time after the last one."""
    arrivals = [(cam.arrival(f), c, f) for c, cam in enumerate(cameras) for f in range(len(cam.motion))]
    heapq.heapify(arrivals)
    ordered = [heapq.heappop(arrivals) for _ in range(len(arrivals))]
    return ordered, (ordered[-1][0] if ordered else 0.0) + 1.0 + interval_s


def replay_today(
    cameras: list[Camera], cost: CostModel, interval_s: float = 0.005
) -> list[list[Answer | None]]:
    """The newest-frame loop, every taken frame detected, nothing answered in between."""
    states = [_State(cam, TrackPredictor(_tracker(cam.fps), 0), [None] * len(cam.motion)) for cam in cameras]
    detector = _Detector(cost)
    arrivals, end = _ticks(cameras, interval_s)
    index, now = 0, 0.0
    while now <= end:
        for place, (c, frame) in enumerate(detector.finish(now)):
            state = states[c]
            found = state.camera.detections[frame]
            assert state.predictor is not None
            ids = state.predictor.tracker.update(found.boxes, found.scores)  # one step per processed frame
            state.answers[frame] = Answer(found.boxes, found.scores, ids, "detected")
            state.in_flight, state.ready_at = None, (now, place)
        while index < len(arrivals) and arrivals[index][0] <= now:
            at, c, frame = arrivals[index]
            if states[c].in_flight is None and states[c].newest is None:
                states[c].ready_at = (at, -1)
            states[c].newest = frame  # replaces a frame not taken yet (dropped as stale)
            index += 1
        ready = [c for c, state in enumerate(states) if state.in_flight is None and state.newest is not None]
        # First come, first queued (a batch's cameras in their order in it), as the sessions' tasks would
        # queue them: no camera goes first every time.
        for c in sorted(ready, key=lambda c: states[c].ready_at):
            state, taken = states[c], states[c].newest
            assert taken is not None
            state.in_flight, state.newest = taken, None
            detector.queue.append((c, taken))
        detector.start_if_free(now)
        now += interval_s
    return [state.answers for state in states]


def replay_scheduled(
    cameras: list[Camera],
    cost: CostModel,
    policy: SchedulePolicy,
    share: float = 0.8,
    max_predicted: int = 15,
    interval_s: float = 0.01,
    start_velocity: bool = True,
) -> tuple[list[list[Answer | None]], float]:
    """The detection budget: each camera's every frame answered; and the detector's busy share. Tracks
    start with the velocity of their first two detections unless ``start_velocity`` is False."""
    states = [
        _State(
            cam, TrackPredictor(_tracker(cam.fps, start_velocity), max_predicted), [None] * len(cam.motion)
        )
        for cam in cameras
    ]
    detector = _Detector(cost)
    budget = TokenBudget(share * cost.throughput)
    arrivals, end = _ticks(cameras, interval_s)
    index, now, busy = 0, 0.0, 0.0
    while now <= end:
        for c, frame in detector.finish(now):
            state = states[c]
            _detected(state, frame)
            state.last_detected_at = state.camera.arrival(frame)
            for later in state.waiting:
                _predicted(state, later)
            state.waiting, state.in_flight = [], None
        candidates: list[Candidate] = []
        while index < len(arrivals) and arrivals[index][0] <= now:
            _, c, frame = arrivals[index]
            index += 1
            state = states[c]
            if state.in_flight is not None:
                state.waiting.append(frame)
                continue
            state.newest = frame
            candidates.append(_candidate(c, state, now))
        budget.refill(now)
        wanted = len(candidates)
        fair_age = len(cameras) / budget.rate
        slots, room = budget.slots(wanted), budget.forced_room(wanted)
        # Work-conserving as the live scheduler: while nothing waits for the detector (a batch may be
        # running), up to a batch goes on deck beyond the budget.
        on_deck = 0 if detector.queue else min(wanted, cost.max_batch)
        picked = set(choose(candidates, max(slots, on_deck), policy, room, fair_age))
        budget.spend(max(0, len(picked) - max(0, on_deck - slots)))
        for candidate in candidates:
            c = int(candidate.key)
            state = states[c]
            assert state.newest is not None
            if candidate.key in picked:
                state.in_flight = state.newest
                detector.queue.append((c, state.newest))
            else:
                _predicted(state, state.newest)
            state.newest = None
        was_running = bool(detector.running)
        detector.start_if_free(now)
        busy += interval_s if (was_running or detector.running) else 0.0
        now += interval_s
    duration = max(cam.arrival(len(cam.motion) - 1) for cam in cameras) if cameras else 1.0
    return [state.answers for state in states], min(1.0, busy / max(duration, interval_s))


def _candidate(key: int, state: _State, now: float) -> Candidate:
    predictor = state.predictor
    assert predictor is not None and state.newest is not None
    last = state.last_detected_at
    return Candidate(
        str(key),
        None if last is None else predictor.frames_since_detection,
        float("inf") if last is None else max(0.0, now - last),
        predictor.live_tracks,
        predictor.new_tracks,
        state.camera.motion[state.newest],
        predictor.drift(float(state.newest)),
    )
