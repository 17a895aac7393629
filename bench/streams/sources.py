"""Stream sources on 127.0.0.1 for the streams benchmark and tests: synthetic MJPEG cameras, an MP4 file,
and broken sources.

`SourceServer` is an HTTP server in a background thread (a context manager). Its paths:

- ``/mjpeg/<name>``: an endless ``multipart/x-mixed-replace`` MJPEG stream at ``fps`` of ``width x height``
  frames: the web page's sample shapes images, moving (a cycle of ``cycle`` frames, pre-encoded, so
  serving costs almost no CPU). Each client gets its own pacing.
- ``/clip.mp4``: a short H.264 MP4 of the same frames (played to the end, then the client reconnects).
- ``/hls/index.m3u8``: the same clip as an HLS playlist of MPEG-TS segments (``/hls/*.ts``); a test may
  add its own files to ``hls``.
- ``/garbage``: random-looking bytes (always the same); ``/silent``: accepts the request and never
  answers; ``/stall``: answers the headers of an MJPEG stream, then nothing.
"""

from __future__ import annotations

import io
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

import av
import cv2
import numpy as np
import simplejpeg

import service

# The web page's sample images, shipped with the service package.
SAMPLES = Path(service.__file__).resolve().parent / "static" / "samples"
BOUNDARY = "frame"
# /garbage's body: random-looking bytes, the same every time (fresh random bytes now and then probe as some
# format, and a test of the error would change with the draw).
GARBAGE = np.random.default_rng(0).bytes(256 * 1024)


def _read_rgb(path: Path) -> np.ndarray:
    image = cv2.imread(str(path))
    if image is None:
        raise FileNotFoundError(f"cannot read the sample image {str(path)!r}")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def synthetic_frames(width: int, height: int, count: int) -> list[np.ndarray]:
    """``count`` RGB frames: the synthetic sample images (``shapes-*.jpg``) side by side, sliding one pixel
    step per frame."""
    tiles = [_read_rgb(p) for p in sorted(SAMPLES.glob("shapes-*.jpg"))]
    strip = np.concatenate([cv2.resize(t, (height, height), interpolation=cv2.INTER_AREA) for t in tiles], 1)
    strip = np.concatenate([strip, strip], axis=1)  # wraps around
    span = strip.shape[1] // 2
    step = max(1, span // count)
    return [np.ascontiguousarray(strip[:, (i * step) % span :][:, :width]) for i in range(count)]


def encode_hls(frames: list[np.ndarray], fps: int) -> dict[str, bytes]:
    """The frames as an HLS VOD playlist (``index.m3u8``) and its one-second MPEG-TS segments, by name."""
    with tempfile.TemporaryDirectory() as folder:
        options = {"hls_time": "1", "hls_playlist_type": "vod", "hls_segment_type": "mpegts"}
        with av.open(str(Path(folder) / "index.m3u8"), "w", format="hls", options=options) as container:
            stream = container.add_stream("libx264", rate=fps, options={"g": str(fps)})
            stream.height, stream.width = frames[0].shape[:2]
            stream.pix_fmt = "yuv420p"
            for image in frames:
                container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
            container.mux(stream.encode(None))
        files = {path.name: path.read_bytes() for path in Path(folder).iterdir()}
    return files


def encode_mp4(frames: list[np.ndarray], fps: int) -> bytes:
    """The frames as an H.264 MP4 (yuv420p), in memory."""
    out = io.BytesIO()
    # Fragmented: playable while it downloads, without range requests (the index is not at the end).
    flags = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}
    with av.open(out, "w", format="mp4", options=flags) as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        for image in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode(None))
    return out.getvalue()


class SourceServer:
    """See the module docstring. ``url(path)`` is the address of a path on this server."""

    def __init__(
        self,
        fps: float = 15.0,
        width: int = 640,
        height: int = 480,
        cycle: int = 30,
        frames: list[np.ndarray] | None = None,
    ):
        """``frames`` (RGB) replace the synthetic ones (``width``, ``height``, ``cycle`` then unused)."""
        frames = frames if frames is not None else synthetic_frames(width, height, cycle)
        self.fps = fps
        self.jpegs = [simplejpeg.encode_jpeg(f, quality=85, colorspace="RGB") for f in frames]
        self.mp4 = encode_mp4(frames, round(fps))
        self.hls = encode_hls(frames, round(fps))
        self.stop_event = threading.Event()
        self.sent: dict[str, int] = {}  # frames sent per MJPEG path
        handler = type("Handler", (_Handler,), {"source": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="source-server", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    def url(self, path: str) -> str:
        return self.base_url + path.lstrip("/")

    def __enter__(self) -> SourceServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_event.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class _Handler(BaseHTTPRequestHandler):
    source: SourceServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        src = self.source
        try:
            if self.path.startswith("/mjpeg/"):
                self._mjpeg(self.path)
            elif self.path == "/clip.mp4":
                self._send(200, "video/mp4", src.mp4)
            elif self.path.startswith("/hls/") and self.path[5:] in src.hls:
                kind = "application/vnd.apple.mpegurl" if self.path.endswith(".m3u8") else "video/mp2t"
                self._send(200, kind, src.hls[self.path[5:]])
            elif self.path == "/garbage":
                self._send(200, "application/octet-stream", GARBAGE)
            elif self.path == "/silent":
                src.stop_event.wait(60)
            elif self.path == "/stall":
                self._mjpeg_headers()
                src.stop_event.wait(60)
            else:
                self._send(404, "text/plain", b"not found")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _mjpeg_headers(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY}")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

    def _mjpeg(self, path: str) -> None:
        src = self.source
        self._mjpeg_headers()
        period = 1.0 / src.fps
        next_at = time.monotonic()
        number = 0
        while not src.stop_event.is_set():
            jpeg = src.jpegs[number % len(src.jpegs)]
            part = f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n"
            self.wfile.write(part.encode() + jpeg + b"\r\n")
            self.wfile.flush()
            number += 1
            src.sent[path] = src.sent.get(path, 0) + 1
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                src.stop_event.wait(delay)
            else:
                next_at = time.monotonic()  # fell behind (a busy machine): do not burst to catch up
