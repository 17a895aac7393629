"""A video file is demuxed from memory: nothing in it makes the server open a URL. Files that would (an
HLS playlist naming segments or variants, a concat script, a data URI) are sent as the video; a listener
on 127.0.0.1 that they name counts the connections it accepts, which must be none."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path

import av
import pytest
from detect_testkit import MakeClient
from listener_testkit import CountingListener

from service.errors import BadRequest
from service.video.decoding import VideoLimits, VideoReader

LIMITS = VideoLimits(max_pixels=1 << 20, max_read_frames=100, max_duration_s=10)
HLS_HEAD = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-PLAYLIST-TYPE:VOD\n"

Body = Callable[[CountingListener], bytes]
BODIES: dict[str, Body] = {
    "hls segments": lambda at: f"{HLS_HEAD}#EXTINF:1.0,\n{at.url('a.ts')}\n#EXT-X-ENDLIST\n".encode(),
    "hls variant": lambda at: f"#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\n{at.url('v.m3u8')}\n".encode(),
    "hls key": lambda at: (
        f'{HLS_HEAD}#EXT-X-KEY:METHOD=AES-128,URI="{at.url("k.key")}"\n#EXTINF:1.0,\n'
        f"{at.url('a.ts')}\n#EXT-X-ENDLIST\n"
    ).encode(),
    "concat": lambda at: f"ffconcat version 1.0\nfile '{at.url('x.mp4')}'\n".encode(),
    "concat subfile": lambda at: (
        f"ffconcat version 1.0\nfile 'subfile,,start,0,end,9,,:{at.url()}'\n".encode()
    ),
    "hls data uri": lambda at: (
        f"{HLS_HEAD}#EXTINF:1.0,\ndata:video/mp2t;base64,AAAA\n#EXT-X-ENDLIST\n".encode()
    ),
}


@pytest.fixture
def listener() -> Iterator[CountingListener]:
    with CountingListener() as counting:
        yield counting


@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_file_naming_urls_is_refused_and_opens_none(listener: CountingListener, name: str) -> None:
    with pytest.raises(BadRequest, match="not a readable video file"):
        VideoReader.open(BODIES[name](listener), LIMITS)
    assert listener.accepted == 0


def test_the_listener_counts_what_ffmpeg_would_open_without_the_limits(listener: CountingListener) -> None:
    # The control: the same playlist demuxed as HLS with http allowed does connect to the listener.
    body = BODIES["hls segments"](listener)
    options = {"protocol_whitelist": "http,tcp", "rw_timeout": "500000"}
    with pytest.raises(av.FFmpegError):
        av.open(io.BytesIO(body), "r", format="hls", options=options, timeout=1.0).close()
    assert listener.accepted >= 1


@pytest.mark.parametrize("name", sorted(BODIES))
def test_posted_as_a_video_it_is_a_400_and_opens_nothing(
    make_client: MakeClient, toy_repo: Path, listener: CountingListener, name: str
) -> None:
    client = make_client(toy_repo)
    body = BODIES[name](listener)
    response = client.post("/detect", content=body, headers={"content-type": "video/mp4"})
    assert response.status_code == 400 and response.json()["field"] == "video"
    assert listener.accepted == 0
