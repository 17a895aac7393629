"""``detect-predict SOURCE``: detections for a folder of images, a video file or a stream, to ``--out``.

::

    detect-predict photos/ --out runs/photos                 # the default model of ./models, run here
    detect-predict clip.mp4 --out runs/clip --save           # + the boxed video, with track ids
    detect-predict clip.mp4 --url http://127.0.0.1:8000      # through a running server's POST /detect

Writes ``results.json`` (COCO results: image_id, category_id, bbox [x, y, w, h], score; a video's frames
are images 1, 2, ... and its detections carry ``track_id``), ``images.json`` (image id -> file name, or
frame -> pts), for a video also ``frames.ndjson`` (the lines ``POST /detect`` answers), and with
``--save`` the boxed images (``boxed/``) or video (``boxed.mp4``).

A stream URL as SOURCE (rtsp://, http(s):// MJPEG, HLS, MP4) needs a running server (``--url``) that allows
it (``DETECT_STREAM_SOURCES``): it opens a stream session there, writes each processed frame's event to
``frames.ndjson`` and the COCO results (with ``track_id``) until ``--max-frames`` frames, ``--duration``
seconds or Ctrl-C, then closes the session::

    detect-predict rtsp://cameras.local/door --url http://127.0.0.1:8000 --duration 60 --fps 5
"""

from __future__ import annotations

import argparse


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="detect-predict", description=__doc__.split("\n")[0])
    parser.add_argument(
        "source", help="a folder of images, a video file (MP4, MOV, MKV, WebM), or a stream URL (with --url)"
    )
    parser.add_argument("--out", default="predictions", help="output folder (default: predictions)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", help="a running server (http://host:port): send it the images / video")
    where.add_argument("--artifact", help="a model version folder (models/<name>/<version>) to run here")
    parser.add_argument("--model-repository", default="models", help="where --model is looked up")
    parser.add_argument("--model", help="model name (default: the repository's or the server's default)")
    parser.add_argument("--api-key", help="--url: the server's API key")
    parser.add_argument("--backend", default="auto", help="local runs: DETECT_BACKEND value (auto, cpu, ...)")
    parser.add_argument("--score-threshold", type=float, help="default: the model's display threshold")
    parser.add_argument("--classes", help="comma-separated classes to keep (names or ids)")
    parser.add_argument("--fps", type=float, help="video, stream: at most this many frames per second")
    parser.add_argument("--max-frames", type=int, help="video, stream: at most this many frames")
    parser.add_argument("--duration", type=_positive, help="stream: stop after this many seconds")
    parser.add_argument("--no-track", action="store_true", help="video: no track ids")
    parser.add_argument("--save", action="store_true", help="also write the boxed images or video")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from service.predict.run import predict  # after parsing: --help stays light

    predict(args)


if __name__ == "__main__":
    main()
