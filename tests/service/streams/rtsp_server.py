"""A live RTSP camera on 127.0.0.1 for the stream tests: GStreamer's RTSP server (gst-rtsp-server).

Run with the system Python, which has PyGObject and the GStreamer bindings (Debian packages
`python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good
gstreamer1.0-plugins-ugly`, see scripts/dev/install-system-deps.sh); the project's virtual environment has
neither:

    /usr/bin/python3 tests/service/streams/rtsp_server.py --width 160 --height 120 --fps 15

It serves a live test pattern (``--pattern``: a moving ball by default; any `videotestsrc` pattern) at
two mounts:

    rtsp://127.0.0.1:PORT/jpeg   RTP/JPEG (RFC 2435), every frame a JPEG
    rtsp://127.0.0.1:PORT/h264   RTP/H.264 (x264, a key frame every second; only where x264enc is
                                 installed, from gstreamer1.0-plugins-ugly)

With ``--user`` and ``--password`` it asks clients for them (HTTP basic authentication, RFC 2326):
``rtsp://USER:PASSWORD@127.0.0.1:PORT/jpeg``.

It listens on 127.0.0.1 only, on ``--port`` (0, the default: a free port the system picks), and prints
``READY <port> <mount> ...`` on stdout once clients can connect. It exits when its stdin is closed (its
parent ended or closed the pipe) or on SIGTERM/SIGINT.

This file is run as a script and never imported by the tests (they cannot import `gi`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

ADDRESS = "127.0.0.1"
# What an authenticated client may do with a mount (only with --user/--password).
ROLE = "camera, media.factory.access=(boolean)true, media.factory.construct=(boolean)true"


def _source(width: int, height: int, fps: int, pattern: str) -> str:
    return (
        f"videotestsrc is-live=true pattern={pattern} ! video/x-raw,width={width},height={height},"
        f"framerate={fps}/1 ! videoconvert ! video/x-raw,format=I420"
    )


def launch_lines(width: int, height: int, fps: int, pattern: str) -> dict[str, str]:
    """The mount paths and the pipeline each one serves (the H.264 one only where x264enc exists)."""
    source = _source(width, height, fps, pattern)
    lines = {"/jpeg": f"( {source} ! jpegenc quality=80 ! rtpjpegpay name=pay0 pt=26 )"}
    if Gst.ElementFactory.find("x264enc") is not None:
        lines["/h264"] = (
            f"( {source} ! x264enc tune=zerolatency speed-preset=ultrafast "
            f"key-int-max={fps} bitrate=500 ! video/x-h264,profile=baseline ! "
            "rtph264pay name=pay0 pt=96 config-interval=1 )"
        )
    return lines


def basic_auth(user: str, password: str) -> GstRtspServer.RTSPAuth:
    """Clients that give ``user`` and ``password`` get the role `ROLE` grants; others get 401."""
    auth = GstRtspServer.RTSPAuth()
    token = GstRtspServer.RTSPToken()
    token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, ROLE.split(",")[0])
    auth.add_basic(GstRtspServer.RTSPAuth.make_basic(user, password), token)
    return auth


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--height", type=int, default=120)
    parser.add_argument("--fps", type=int, default=15)
    parser.add_argument("--pattern", default="ball")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--user")
    parser.add_argument("--password")
    args = parser.parse_args()
    if (args.user is None) != (args.password is None):
        parser.error("--user and --password go together")

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address(ADDRESS)
    server.set_service(str(args.port))  # 0: a free port, read back below
    mounts = server.get_mount_points()
    lines = launch_lines(args.width, args.height, args.fps, args.pattern)
    for path, line in lines.items():
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(line)
        factory.set_shared(True)  # clients of one mount share one encoder
        if args.user is not None:
            factory.add_role_from_structure(Gst.Structure.new_from_string(ROLE))
        mounts.add_factory(path, factory)
    if args.user is not None:
        server.set_auth(basic_auth(args.user, args.password))
    if server.attach(None) == 0:
        print("rtsp_server: could not listen", file=sys.stderr)
        return 1

    loop = GLib.MainLoop()

    def on_stdin(fd: int, _condition: GLib.IOCondition) -> bool:
        # Readable with no data (EOF) or hung up: the parent is gone; data is ignored.
        if not os.read(fd, 4096):
            loop.quit()
            return False
        return True

    GLib.io_add_watch(sys.stdin.fileno(), GLib.PRIORITY_DEFAULT, GLib.IO_IN | GLib.IO_HUP, on_stdin)

    def on_signal() -> bool:
        loop.quit()
        return False  # the handler is removed

    for signum in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_HIGH, signum, on_signal)
    print("READY", server.get_bound_port(), *lines, flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
