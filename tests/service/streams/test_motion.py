"""The motion score: from a 1/8-scale grey image, 0 for a still camera, high for flicker or movement,
comparable across a resolution change, 0 for a frame that does not decode."""

from __future__ import annotations

import av
import numpy as np
import pytest
import simplejpeg

from service.streams.motion import MotionMeter


def _scene(width: int = 320, height: int = 240, x: int = 40, level: int = 60) -> np.ndarray:
    image = np.full((height, width, 3), level, np.uint8)
    image[height // 3 : height // 3 + height // 4, x : x + width // 5] = 230
    return image


def _jpeg(image: np.ndarray) -> bytes:
    return bytes(simplejpeg.encode_jpeg(image, quality=85, colorspace="RGB"))


@pytest.mark.parametrize("kind", ["mjpeg", "decoded"])
def test_still_moving_and_flickering_frames(kind: str) -> None:
    def frame(image: np.ndarray) -> bytes | av.VideoFrame:
        return _jpeg(image) if kind == "mjpeg" else av.VideoFrame.from_ndarray(image, format="rgb24")

    meter = MotionMeter()
    first = meter.glance(frame(_scene()), "mjpeg")
    assert (first.motion, first.width, first.height) == (0.0, 320, 240)
    assert meter.glance(frame(_scene()), "mjpeg").motion == 0.0
    moved = meter.glance(frame(_scene(x=160)), "mjpeg").motion
    assert 0.03 < moved < 0.3  # the square's old and new places
    flicker = meter.glance(frame(_scene(x=160, level=160)), "mjpeg").motion
    assert flicker > 0.6


def test_a_resolution_change_is_compared_and_reported() -> None:
    meter = MotionMeter()
    meter.glance(_jpeg(_scene(320, 240)), "mjpeg")
    glance = meter.glance(_jpeg(_scene(640, 480, x=80)), "mjpeg")
    assert (glance.width, glance.height) == (640, 480)
    assert glance.motion < 0.05  # the same scene, twice the size


def test_a_frame_that_does_not_decode_scores_zero_and_is_not_remembered() -> None:
    meter = MotionMeter()
    meter.glance(_jpeg(_scene()), "mjpeg")
    broken = meter.glance(b"\xff\xd8 not a jpeg", "mjpeg")
    assert (broken.motion, broken.width) == (0.0, 0)
    assert meter.glance(_jpeg(_scene()), "mjpeg").motion == 0.0  # still compared with the good one
    assert meter.glance(b"\x00\x01", "h264").width == 0  # a packet of another codec: not measured
