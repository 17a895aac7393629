"""Capture decisions: the band, the few-detections rule, the random share, and the rate limit."""

from __future__ import annotations

import numpy as np
import pytest

from service.capture.policy import CapturePolicy, RateLimit
from service.settings import Settings


def scores(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def test_top_score_inside_the_band_is_captured() -> None:
    policy = CapturePolicy(band=(0.3, 0.6), min_detections=0)
    assert policy.reason(scores(0.45, 0.2), 0.5, draw=0.99) == "score_band"
    assert policy.reason(scores(0.3), 0.5, draw=0.99) == "score_band"  # the band is closed
    assert policy.reason(scores(0.61, 0.45), 0.5, draw=0.99) is None  # the top score decides
    assert policy.reason(scores(0.29), 0.5, draw=0.99) is None
    assert policy.reason(scores(), 0.5, draw=0.99) is None  # no detection: no top score


def test_few_detections_above_the_display_threshold() -> None:
    policy = CapturePolicy(band=None, min_detections=2)
    assert policy.reason(scores(0.9, 0.49), 0.5, draw=0.99) == "few_detections"
    assert policy.reason(scores(0.9, 0.5), 0.5, draw=0.99) is None
    assert policy.reason(scores(), 0.5, draw=0.99) == "few_detections"
    assert CapturePolicy(band=None, min_detections=0).reason(scores(), 0.5, draw=0.99) is None


def test_random_share() -> None:
    policy = CapturePolicy(band=None, min_detections=0, random_share=0.25)
    assert policy.reason(scores(0.9), 0.5, draw=0.2) == "random"
    assert policy.reason(scores(0.9), 0.5, draw=0.25) is None
    assert CapturePolicy(band=None, min_detections=0, random_share=0.0).reason(scores(), 0.5, 0.0) is None
    assert (
        CapturePolicy(band=None, min_detections=0, random_share=1.0).reason(scores(), 0.5, 0.999) == "random"
    )


def test_uncertainty_rules_come_before_the_random_share() -> None:
    policy = CapturePolicy(band=(0.3, 0.6), min_detections=1, random_share=1.0)
    assert policy.reason(scores(0.4), 0.5, draw=0.0) == "score_band"
    assert policy.reason(scores(0.2), 0.5, draw=0.0) == "few_detections"
    assert policy.reason(scores(0.9), 0.5, draw=0.0) == "random"


def test_rate_limit_per_sliding_minute() -> None:
    rate = RateLimit(3)
    assert [rate.admit(t) for t in (0.0, 1.0, 2.0, 3.0)] == [True, True, True, False]
    assert rate.admit(59.9) is False
    assert rate.admit(60.0) is True  # the first admission left the window
    assert rate.admit(60.5) is False


def test_band_setting_is_parsed_and_checked() -> None:
    assert Settings(capture_score_band="0.2, 0.7").capture_band == (0.2, 0.7)
    assert Settings(capture_score_band="off").capture_band is None
    for bad in ("0.7,0.2", "0.2,1.5", "0.2", "a,b", "0.1.2,0.5"):
        with pytest.raises(ValueError):
            Settings(capture_score_band=bad)
    assert Settings().capture_dir is None  # off unless asked for
