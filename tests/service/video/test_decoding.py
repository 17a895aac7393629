"""Video files -> frames: containers and codecs, frame skipping, limits, and bad files."""

from __future__ import annotations

import numpy as np
import pytest
from video_testkit import frame_image, make_video

from service.errors import BadRequest, PayloadTooLarge
from service.video.decoding import VideoLimits, looks_like_video, open_video

LIMITS = VideoLimits(max_pixels=64 * 48, max_read_frames=1000, max_duration_s=3600)


@pytest.mark.parametrize("container", ["mp4", "matroska", "webm", "mov"])
def test_every_container_decodes_every_frame(container: str) -> None:
    data = make_video(container=container)
    assert looks_like_video(data)
    with open_video(data, LIMITS) as video:
        assert (video.info.width, video.info.height) == (64, 48)
        assert video.info.fps == pytest.approx(10)
        frames = list(video.frames())
    assert [f.index for f in frames] == list(range(10))
    np.testing.assert_allclose([f.pts for f in frames], np.arange(10) / 10, atol=1e-3)
    # Lossy, but the square is where it was drawn.
    assert np.abs(frames[3].image.astype(int) - frame_image(64, 48, 3)).mean() < 8
    assert video.read == 10 and video.stopped_by is None


def test_fps_keeps_at_most_that_many_frames_per_second_of_video_time() -> None:
    with open_video(make_video(frames=30, fps=30), LIMITS) as video:
        frames = list(video.frames(fps=10))
    assert [f.index for f in frames] == list(range(0, 30, 3))
    assert video.read == 30


def test_max_frames_and_the_read_limits_stop_reading() -> None:
    data = make_video(frames=20, fps=10)
    with open_video(data, LIMITS) as video:
        assert len(list(video.frames(max_frames=4))) == 4
        assert video.stopped_by == "max_frames"
    with open_video(data, VideoLimits(64 * 48, max_read_frames=7, max_duration_s=3600)) as video:
        assert len(list(video.frames())) == 7
        assert video.stopped_by == "max_read_frames"
    with open_video(data, VideoLimits(64 * 48, max_read_frames=1000, max_duration_s=0.55)) as video:
        assert [f.pts for f in video.frames()][-1] == pytest.approx(0.5, abs=1e-3)
        assert video.stopped_by == "max_duration_s"


def test_frames_over_the_pixel_limit_are_refused_before_decoding() -> None:
    data = make_video(width=640, height=480, frames=2)
    with (
        pytest.raises(PayloadTooLarge, match=r"640x480 = 307200 pixels; the limit is 3072"),
        open_video(data, LIMITS),
    ):
        pass


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "not a readable video"),
        (b"\x00\x00\x00\x18ftypmp42" + bytes(200), "not a readable video"),
        # Only the served containers' demuxers are probed: another format is not read at all.
        (b"GIF89a not a video at all", r"not a readable video file .*; send MP4, MOV, MKV or WebM"),
    ],
)
def test_garbage_is_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message), open_video(data, LIMITS) as video:
        list(video.frames())


@pytest.mark.parametrize("container", ["mp4", "matroska"])
def test_a_truncated_file_is_an_error_or_ends_early_never_a_hang(container: str) -> None:
    data = make_video(frames=20, container=container)
    for cut in (len(data) // 3, len(data) // 2):
        try:
            with open_video(data[:cut], LIMITS) as video:
                frames = list(video.frames())
        except BadRequest as err:
            assert "video" in str(err)
        else:
            assert len(frames) < 20
