"""The service's ByteTrack against Roboflow's (``trackers.ByteTrackTracker``) on the same detections."""

from __future__ import annotations

import numpy as np
import pytest
import supervision as sv
from trackers import ByteTrackTracker

from service.video.tracking import Tracker, TrackerConfig, box_iou


def _scene(seed: int, frames: int, objects: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Boxes moving at constant speed with jitter, entering and leaving at random frames, some frames
    missed, scores above and below the high threshold; each frame's detections in shuffled order."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(0, 500, (objects, 2))
    size = rng.uniform(20, 80, (objects, 2))
    speed = rng.uniform(-6, 6, (objects, 2))
    enter = rng.integers(0, frames // 2, objects)
    leave = enter + rng.integers(frames // 4, frames, objects)
    out = []
    for f in range(frames):
        boxes, scores = [], []
        for o in range(objects):
            if not enter[o] <= f < leave[o] or rng.random() < 0.08:
                continue
            xy = start[o] + speed[o] * (f - enter[o]) + rng.normal(0, 1.5, 2)
            boxes.append([*xy, *(xy + size[o])])
            scores.append(rng.choice([rng.uniform(0.7, 1.0), rng.uniform(0.6, 0.7), rng.uniform(0.1, 0.6)]))
        if rng.random() < 0.2:  # a stray low-score detection far from every object
            boxes.append([900.0, 900.0, 905.0, 905.0])
            scores.append(0.4)
        order = rng.permutation(len(boxes))
        out.append((np.array(boxes, dtype=np.float64).reshape(-1, 4)[order], np.array(scores)[order]))
    return out


def _library_ids(tracker: ByteTrackTracker, boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    index = np.arange(len(boxes))
    detections = sv.Detections(xyxy=boxes, confidence=scores, data={"index": index})
    if len(boxes) == 0:
        detections = sv.Detections.empty()
    result = tracker.update(detections)
    ids = np.full(len(boxes), -2, dtype=np.int64)  # -2: the library dropped it (never, by its contract)
    if len(result):
        ids[result.data["index"]] = result.tracker_id
    return ids


@pytest.mark.parametrize("seed", range(6))
def test_same_track_ids_as_the_library(seed: int) -> None:
    ours, theirs = Tracker(TrackerConfig()), ByteTrackTracker()
    tracked = 0
    for frame, (boxes, scores) in enumerate(_scene(seed, frames=80, objects=8)):
        expected = _library_ids(theirs, boxes, scores)
        got = ours.update(boxes, scores)
        np.testing.assert_array_equal(got, expected, err_msg=f"frame {frame}")
        tracked += int((got >= 0).sum())
    assert tracked > 200  # the scenes really are tracked, not all -1
    assert ours.ids_given >= 5


def test_ids_stay_with_their_objects_and_end_after_lost_frames() -> None:
    tracker = Tracker(TrackerConfig(lost_frames=3))
    a = np.array([[0.0, 0.0, 10.0, 10.0]])
    b = np.array([[100.0, 100.0, 120.0, 120.0]])
    first = tracker.update(np.vstack([a, b]), np.array([0.9, 0.9]))
    assert first.tolist() == [-1, -1]  # an id after min_frames=2 matched frames
    second = tracker.update(np.vstack([b + 2, a + 1]), np.array([0.9, 0.9]))
    assert sorted(second.tolist()) == [0, 1]
    id_b, id_a = second.tolist()
    third = tracker.update(np.vstack([a + 2, b + 4]), np.array([0.3, 0.95]))  # a's score dropped: 2nd stage
    assert third.tolist() == [id_a, id_b] and tracker.active == 2
    for _ in range(4):  # b alone: a is lost, then ends after 3 missed frames
        tracker.update(b + 4, np.array([0.9]))
    assert tracker.active == 1
    assert tracker.update(a + 2, np.array([0.9])).tolist() == [-1]  # a new track, not a's old id


def test_empty_frames_and_bad_shapes() -> None:
    tracker = Tracker()
    assert tracker.update(np.zeros((0, 4)), np.zeros(0)).shape == (0,)
    with pytest.raises(ValueError, match="2 boxes but 1 scores"):
        tracker.update(np.zeros((2, 4)), np.zeros(1))
    with pytest.raises(ValueError, match="fps must be > 0"):
        TrackerConfig.for_fps(0)
    assert TrackerConfig.for_fps(15, lost_s=2).lost_frames == 30


def test_box_iou() -> None:
    iou = box_iou(
        np.array([[0.0, 0, 10, 10]]), np.array([[5.0, 5, 15, 15], [20, 20, 30, 30], [0, 0, 10, 10]])
    )
    np.testing.assert_allclose(iou, [[25 / 175, 0.0, 1.0]])


def _fast(frame: int, speed: float) -> np.ndarray:
    x = 10.0 + speed * frame
    return np.array([[x, 100.0, x + 50.0, 150.0]])


@pytest.mark.parametrize("start_velocity", [False, True])
def test_a_fast_object_detected_every_third_frame_keeps_its_track_with_start_velocity(
    start_velocity: bool,
) -> None:
    """An object moving half a box width per frame, detected on frames 0, 3, 6, ...: its first two
    detections are 75 px apart (no overlap), so ByteTrack's zero-velocity start never confirms it; with
    ``start_velocity`` the two are paired and the third detection matches the predicted box."""
    tracker = Tracker(TrackerConfig(start_velocity=start_velocity))
    ids = []
    for frame in range(0, 30, 3):
        steps = 1.0 if frame == 0 else 3.0
        ids.append(int(tracker.update(_fast(frame, 25.0), np.array([0.9]), steps=steps)[0]))
    if start_velocity:
        assert ids == [-1] + [0] * 9
        assert tracker.ids_given == 1
    else:
        assert ids == [-1] * 10  # a new tentative track on every detection, never confirmed


def test_start_velocity_pairs_only_within_reach() -> None:
    tracker = Tracker(TrackerConfig(start_velocity=True, start_max_speed=0.6))
    tracker.update(_fast(0, 0.0), np.array([0.9]))
    # 2 frames later 100 px away: 2 box sides, more than 0.6 x 50 px x 2 frames.
    moved = _fast(0, 0.0) + np.array([100.0, 0.0, 100.0, 0.0])
    assert tracker.update(moved, np.array([0.9]), steps=2.0).tolist() == [-1]
    assert tracker.tentative == 1  # the far one starts its own track; the first one ended unmatched
    assert not TrackerConfig().start_velocity  # ByteTrack's start unless asked (the parity tests above)
