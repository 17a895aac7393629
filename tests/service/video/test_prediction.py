"""Frames between detections: the tracker advanced by frame distance, predicted boxes, their bound."""

from __future__ import annotations

import numpy as np
import pytest

from service.imaging.postprocess import KeptDetections
from service.video.prediction import TrackPredictor
from service.video.tracking import Tracker, TrackerConfig


def _kept(boxes: list[list[float]], score: float = 0.9, cls: int = 2) -> KeptDetections:
    array = np.array(boxes, dtype=np.float32).reshape(-1, 4)
    n = len(array)
    return KeptDetections(
        array, np.full(n, score, np.float32), np.full(n, cls, np.int32), np.arange(n, dtype=np.int64)
    )


def _box(frame: int, speed: float = 6.0) -> list[float]:
    x = 20.0 + speed * frame
    return [x, 50.0, x + 40.0, 90.0]


def test_predicted_boxes_follow_a_moving_object_between_detections() -> None:
    predictor = TrackPredictor(Tracker(TrackerConfig.for_fps(15.0)), max_predicted_frames=10)
    errors = []
    for frame in range(60):
        if frame % 3 == 0:
            ids = predictor.detected(float(frame), _kept([_box(frame)]))
            assert frame < 6 or ids.tolist() == [0]
        else:
            carried = predictor.predicted(float(frame))
            assert carried.frames_since_detection == frame % 3
            if frame > 12:
                assert carried.track_ids.tolist() == [0]
                assert carried.classes.tolist() == [2] and carried.scores[0] == pytest.approx(0.9)
                errors.append(np.abs(carried.boxes[0] - np.array(_box(frame))).max())
    assert errors and max(errors) < 2.0, max(errors)


def test_tracks_survive_sparse_detections_of_a_fast_object() -> None:
    """20 px a frame, seen on 3 frames in a row (its velocity learned), then every 5th frame (100 px apart,
    no overlap between detections): stepping by the frames in between keeps one id; treating each
    detection as the next frame does not."""
    stepped = TrackPredictor(Tracker(TrackerConfig.for_fps(15.0)), max_predicted_frames=10)
    naive = Tracker(TrackerConfig.for_fps(15.0))
    stepped_ids, naive_ids = [], []
    for frame in [0, 1, 2, *range(5, 80, 5)]:
        found = _kept([_box(frame, speed=20.0)])
        stepped_ids += stepped.detected(float(frame), found).tolist()
        naive_ids += naive.update(found.boxes, found.scores).tolist()
    assert stepped_ids[1:] == [0] * (len(stepped_ids) - 1)
    assert naive_ids[3:] != [0] * (len(naive_ids) - 3)  # the control: without the time step it is lost


def test_no_predicted_boxes_past_the_bound_or_before_a_detection() -> None:
    predictor = TrackPredictor(Tracker(TrackerConfig.for_fps(15.0)), max_predicted_frames=4)
    assert len(predictor.predicted(0.0)) == 0
    for frame in range(4):
        predictor.detected(float(frame), _kept([_box(frame)]))
    assert predictor.live_tracks == 1
    shown = [len(predictor.predicted(float(frame))) for frame in range(4, 10)]
    assert shown == [1, 1, 1, 1, 0, 0]
    predictor.detected(10.0, _kept([_box(10)]))
    assert len(predictor.predicted(11.0)) == 1


def test_positions_going_back_or_standing_still_advance_nothing() -> None:
    predictor = TrackPredictor(Tracker(TrackerConfig.for_fps(15.0)), max_predicted_frames=5)
    for frame in range(4):
        predictor.detected(float(frame), _kept([_box(frame)]))
    still = predictor.predicted(3.0).boxes
    back = predictor.predicted(-100.0).boxes
    assert np.allclose(still, back)
    ids = predictor.detected(1.0, _kept([_box(3)]))  # a clock that jumped back: same object, same id
    assert ids.tolist() == [0]


def test_steps_must_be_finite_and_not_negative() -> None:
    tracker = Tracker()
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="steps"):
            tracker.update(np.zeros((0, 4)), np.zeros(0), bad)
    with pytest.raises(ValueError, match="max_predicted_frames"):
        TrackPredictor(tracker, -1)


def test_predicted_boxes_stay_inside_the_frame() -> None:
    """A track predicted past the frame's edge is clipped to it, and left out once wholly outside."""
    predictor = TrackPredictor(Tracker(TrackerConfig.for_fps(15.0)), max_predicted_frames=15)
    for frame in range(6):
        predictor.detected(float(frame), _kept([_box(frame, speed=20.0)]))
    size = (200, 160)  # the box's right edge is at 160 px on frame 5, moving 20 px a frame
    near = predictor.predicted(6.0, size)
    assert near.track_ids.tolist() == [0] and near.boxes[0, 2] == pytest.approx(180.0, abs=2.0)
    clipped = predictor.predicted(8.0, size)
    assert clipped.track_ids.tolist() == [0] and clipped.boxes[0, 2] == 200.0
    assert predictor.predicted(12.0, size).track_ids.tolist() == []  # its left edge is past 200 px
    assert predictor.predicted(12.0).track_ids.tolist() == [0]  # without a size: not bounded
