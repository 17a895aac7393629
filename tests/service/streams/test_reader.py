"""The reader thread against sources this test serves on 127.0.0.1: it keeps only the newest frame,
counts what it drops, and turns every broken source into a visible state with its reason, within its
timeouts, never a stuck thread."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from service_testkit import wait_until

from bench.streams.sources import SourceServer
from service.streams.frame import Frame, SourceTooLarge, scaled_size
from service.streams.reader import FrameReader, NewestFrame, RateMeter, ReaderConfig
from service.streams.sources import PROTOCOL_WHITELIST
from service.streams.state import SessionState


@pytest.fixture(scope="module")
def source() -> Iterator[SourceServer]:
    with SourceServer(fps=15, width=160, height=120, cycle=8) as server:
        yield server


def reader_for(
    url: str,
    *,
    fps: float = 15,
    max_pixels: int = 1 << 24,
    attempts: int = 3,
    whitelist: str = PROTOCOL_WHITELIST,
) -> FrameReader:
    config = ReaderConfig(url, fps, max_pixels, 1.0, 1.0, 0.05, 0.2, attempts, whitelist, 1.0)
    reader = FrameReader(config, NewestFrame(lambda: None), SessionState())
    reader.start()
    return reader


def take(reader: FrameReader, timeout: float = 10.0) -> Frame:
    deadline = time.monotonic() + timeout
    while (frame := reader.slot.take()) is None:
        assert time.monotonic() < deadline, f"no frame; state {reader.state.value}: {reader.state.last_error}"
        time.sleep(0.01)
    return frame


def test_an_mjpeg_camera_runs_and_unread_frames_are_dropped_not_queued(source: SourceServer) -> None:
    reader = reader_for(source.url("mjpeg/reader"))
    try:
        first = take(reader)
        assert reader.state.value == "running"
        assert first.codec == "mjpeg" and isinstance(first.source, bytes)  # not decoded by the reader
        image = first.to_rgb(1 << 24)
        assert image.shape == (120, 160, 3) and image.dtype.name == "uint8"
        time.sleep(0.5)  # nobody takes: ~7 frames arrive, the slot keeps one
        newest = take(reader)
        assert newest.number > first.number + 3
        assert reader.slot.dropped >= 3
        assert reader.slot.take() is None  # only one frame was held
    finally:
        assert reader.stop(2.0)


def test_frames_over_the_session_fps_are_skipped_before_conversion(source: SourceServer) -> None:
    reader = reader_for(source.url("mjpeg/slow"), fps=5)
    try:
        take(reader)
        wait_until(lambda: reader.frames_read >= 20, what="20 frames read")
        assert reader.frames_skipped >= reader.frames_read // 2
    finally:
        assert reader.stop(2.0)


def test_a_large_frame_is_scaled_down_to_the_pixel_bound(source: SourceServer) -> None:
    reader = reader_for(source.url("mjpeg/small"))
    try:
        assert take(reader).to_rgb(80 * 60).shape == (60, 80, 3)
    finally:
        assert reader.stop(2.0)
    assert scaled_size(7680, 4320, 1920 * 1080) == (1920, 1080)


def test_an_mp4_over_http_plays_and_is_reopened_at_its_end(source: SourceServer) -> None:
    reader = reader_for(source.url("clip.mp4"))
    try:
        frame = take(reader)
        assert frame.codec == "h264" and frame.to_rgb(1 << 24).shape == (120, 160, 3)
        assert reader.size == (160, 120)
        wait_until(lambda: reader.reconnects >= 1, timeout=10, what="the clip to end and reopen")
        assert reader.state.last_error == "the source ended"
        take(reader)  # frames again after the reconnect
    finally:
        assert reader.stop(2.0)


@pytest.mark.parametrize(
    ("path", "reason"),
    [("garbage", "Invalid data"), ("silent", "timed out"), ("stall", "timed out"), ("nothing-here", "404")],
)
def test_a_broken_source_ends_in_error_with_its_reason(source: SourceServer, path: str, reason: str) -> None:
    reader = reader_for(source.url(path), attempts=2)
    started = time.monotonic()
    wait_until(lambda: reader.state.value == "error", timeout=10, what=f"{path}: state error")
    # Two attempts, each bounded by the 1 s open/read timeout, and one 0.05 s backoff.
    assert time.monotonic() - started < 5
    assert reason in (reader.state.last_error or "")
    assert "2 attempts in a row" in (reader.state.last_error or "")
    assert reader.stop(2.0)


def test_stop_does_not_wait_for_a_silent_source_longer_than_its_read_timeout(source: SourceServer) -> None:
    reader = reader_for(source.url("silent"), attempts=0)
    wait_until(lambda: reader.frames_read == 0 and reader.state.value == "starting", what="opening")
    started = time.monotonic()
    assert reader.stop(3.0)
    assert time.monotonic() - started < 2.0


def test_the_rate_is_counted_over_its_window() -> None:
    meter = RateMeter(window_s=2.0)
    for i in range(31):  # alternating 66 ms and 133 ms gaps: 10 a second, whose mean 1/gap is 11.25
        meter.tick(100.0 + (i // 2) * 0.2 + (i % 2) * 0.0666)
    assert meter.rate(103.0) == pytest.approx(10.0, rel=0.05)
    assert meter.rate(106.0) == 0.0  # nothing in the last 2 s


def test_an_hls_playlist_plays_through_its_segments(source: SourceServer) -> None:
    reader = reader_for(source.url("hls/index.m3u8"))
    try:
        frame = take(reader)
        assert frame.codec == "h264" and frame.to_rgb(1 << 24).shape == (120, 160, 3)
        assert reader.state.value == "running"
    finally:
        assert reader.stop(2.0)


def test_an_hls_playlist_cannot_make_the_server_read_a_local_file(
    source: SourceServer, tmp_path: Path
) -> None:
    segment = tmp_path / "segment.ts"
    segment.write_bytes(next(data for name, data in source.hls.items() if name.endswith(".ts")))
    source.hls["local.m3u8"] = (
        "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-PLAYLIST-TYPE:VOD\n"
        f"#EXTINF:1.0,\n{segment.as_uri()}\n#EXT-X-ENDLIST\n"
    ).encode()
    reader = reader_for(source.url("hls/local.m3u8"), attempts=1)
    wait_until(lambda: reader.state.value == "error", timeout=10, what="state error")
    assert reader.frames_read == 0 and reader.slot.take() is None
    assert reader.stop(2.0)
    # The same playlist with file allowed does read the local segment: the whitelist is what refused it.
    reader = reader_for(source.url("hls/local.m3u8"), whitelist=PROTOCOL_WHITELIST + ",file")
    try:
        take(reader)
    finally:
        assert reader.stop(2.0)


def test_a_source_far_above_the_pixel_bound_is_refused(source: SourceServer) -> None:
    # Decoded frames (H.264): refused when opened, before any frame is decoded.
    reader = reader_for(source.url("clip.mp4"), max_pixels=1000, attempts=1)
    wait_until(lambda: reader.state.value == "error", timeout=10, what="state error")
    assert "160x120 frames are above 4 x stream_max_pixels" in (reader.state.last_error or "")
    assert reader.stop(2.0)
    # MJPEG frames are decoded by their taker: refused there.
    reader = reader_for(source.url("mjpeg/too-large"))
    try:
        with pytest.raises(SourceTooLarge):
            take(reader).to_rgb(1000)
    finally:
        assert reader.stop(2.0)


def test_an_mjpeg_frame_converts_like_ffmpeg_with_its_size_known_before_decoding() -> None:
    import av
    import simplejpeg

    from bench.streams.sources import synthetic_frames

    rgb = synthetic_frames(320, 240, 1)[0]
    data = simplejpeg.encode_jpeg(rgb, quality=90, colorspace="RGB")
    frame = Frame(data, "mjpeg", 1, None, 0.0, 0.0)
    assert frame.pixels == 320 * 240
    ours = frame.to_rgb(1 << 24)
    decoder = av.VideoCodecContext.create("mjpeg", "r")
    theirs = next(iter(decoder.decode(av.Packet(data)))).to_ndarray(format="rgb24")
    assert ours.shape == theirs.shape == (240, 320, 3)
    assert np.abs(ours.astype(np.int16) - theirs.astype(np.int16)).mean() < 2.0
    assert frame.to_rgb(160 * 120).shape == (120, 160, 3)  # scaled down to the bound
    with pytest.raises(SourceTooLarge):
        frame.to_rgb(320 * 240 // 8)  # more than SOURCE_PIXELS_FACTOR x the bound
    broken = Frame(data[: len(data) // 3], "mjpeg", 2, None, 0.0, 0.0)
    with pytest.raises(ValueError):
        broken.to_rgb(1 << 24)
    assert Frame(b"not a jpeg", "mjpeg", 3, None, 0.0, 0.0).pixels == 0
