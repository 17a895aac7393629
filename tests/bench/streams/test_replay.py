"""The simulated-clock replay of stream sessions: deterministic, every frame answered under the budget,
and the bounds of the schedule held with uneven cameras (1 fps beside 30 fps, 64 sessions)."""

from __future__ import annotations

import numpy as np

from bench.streams.replay import Camera, CostModel, replay_every, replay_scheduled, replay_today
from service.imaging.postprocess import KeptDetections
from service.streams.schedule import SchedulePolicy


def _moving_box(frames: int, speed: float = 3.0, fps: float = 15.0, phase: float = 0.0) -> Camera:
    found = []
    for f in range(frames):
        x = 10.0 + speed * f
        boxes = np.array([[x, 20.0, x + 40.0, 60.0]], np.float32)
        scores, classes = np.array([0.9], np.float32), np.array([1], np.int32)
        found.append(KeptDetections(boxes, scores, classes, np.arange(1)))
    return Camera(found, [0.05] * frames, fps, phase)


def _idle(frames: int, fps: float = 15.0) -> Camera:
    empty = KeptDetections(
        np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(0, np.int64)
    )
    return Camera([empty] * frames, [0.0] * frames, fps)


def _detected(answers: list) -> list[int]:
    return [i for i, a in enumerate(answers) if a is not None and a.source == "detected"]


def test_every_frame_is_answered_under_the_budget_and_not_today() -> None:
    cameras = [_moving_box(60, phase=i / 100) for i in range(16)]
    cost = CostModel()
    scheduled, busy = replay_scheduled(cameras, cost, SchedulePolicy())
    today = replay_today(cameras, cost)
    for answers in scheduled:
        assert all(a is not None for a in answers)
        gaps = np.diff(_detected(answers))
        assert gaps.max() <= 5 + 2  # every K = 5 frames, plus a detection's time in the detector
    assert all(any(a is None for a in answers) for answers in today)  # frames without an answer
    shares = [len(_detected(a)) / 60 for a in scheduled]
    assert min(shares) >= 0.8 * float(np.mean(shares))  # fair: slowest camera within 0.8 of the mean
    assert 0.5 < busy <= 1.0
    again, _ = replay_scheduled(cameras, cost, SchedulePolicy())  # deterministic
    assert [[(a.source, a.boxes.tolist()) for a in c if a] for c in again] == [
        [(a.source, a.boxes.tolist()) for a in c if a] for c in scheduled
    ]


def test_predicted_boxes_carry_the_track_between_detections() -> None:
    answers = replay_every(_moving_box(30), every=3)
    assert [a.source for a in answers[:4]] == ["detected", "predicted", "predicted", "detected"]
    late = answers[-2]
    assert late.source == "predicted" and late.track_ids.tolist() == [0]
    assert abs(float(late.boxes[0, 0]) - (10.0 + 3.0 * 28)) < 1.5


def test_a_1_fps_camera_beside_30_fps_ones_is_detected_on_every_frame() -> None:
    cameras = [_moving_box(10, fps=1.0)] + [_moving_box(300, fps=30.0, phase=i / 97) for i in range(8)]
    scheduled, _ = replay_scheduled(cameras, CostModel(), SchedulePolicy())
    slow = scheduled[0]
    assert len(_detected(slow)) == 10  # each of its frames is a second after the last: always chosen
    for answers in scheduled[1:]:
        assert all(a is not None for a in answers)


def test_64_sessions_none_starved() -> None:
    """64 sessions on the default cost model (54 detections a second for streams): the hard bounds alone
    ask about 130 a second. They give way to fair shares, so every session keeps its turn: every frame
    answered, no session more than 1.5 s without a detection, the detections shared evenly between
    sessions with and without objects, the detector kept busy."""
    cameras = [_idle(90) if i % 2 else _moving_box(90, phase=i / 1000) for i in range(64)]
    scheduled, busy = replay_scheduled(cameras, CostModel(), SchedulePolicy())
    assert busy > 0.9  # the detector never idles while frames wait
    counts = []
    for answers in scheduled:
        assert all(a is not None for a in answers)
        detected = _detected(answers)
        assert detected[0] <= 2 and np.diff(detected).max() <= 22
        counts.append(len(detected))
    moving, idle = counts[0::2], counts[1::2]
    for group in (moving, idle):
        assert min(group) >= 0.8 * float(np.mean(group))
    assert float(np.mean(idle)) >= 0.8 * float(np.mean(moving))
    assert sum(counts) / 6.0 <= CostModel().throughput  # what the detector does, not what the bounds ask


def test_todays_loop_shares_the_detector_fairly_when_cameras_do_not_fit_in_a_batch() -> None:
    """12 cameras, batches of 8: the frames enter the detector's queue oldest first, so no camera (the
    first one, say) is detected more often than the others."""
    cameras = [_moving_box(90, phase=i / 200) for i in range(12)]
    detected = [len(_detected(answers)) for answers in replay_today(cameras, CostModel())]
    assert min(detected) >= 0.8 * max(detected), detected
    assert sum(detected) / 6.0 <= CostModel().throughput * 1.05  # 6 s of frames: at most the ceiling
