"""``detect-predict SOURCE``: detections for a folder of images or a video file, written to ``--out``.

::

    detect-predict photos/ --out runs/photos                 # the default model of ./models, run here
    detect-predict clip.mp4 --out runs/clip --save           # + the boxed video, with track ids
    detect-predict clip.mp4 --url http://127.0.0.1:8000      # through a running server's POST /detect

Writes ``results.json`` (COCO results: image_id, category_id, bbox [x, y, w, h], score; a video's frames
are images 1, 2, ... and its detections carry ``track_id``), ``images.json`` (image id -> file name, or
frame -> pts), for a video also ``frames.ndjson`` (the lines ``POST /detect`` answers), and with
``--save`` the boxed images (``boxed/``) or video (``boxed.mp4``). A stream URL as SOURCE is not
supported here: a server watches streams (``POST /v1/streams``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from tqdm import tqdm

from service.imaging.decoding import decode_image
from service.imaging.postprocess import DetectParams, parse_class_filter
from service.imaging.render import draw_detections
from service.predict.detectors import Found, LocalDetector, RemoteDetector, track
from service.runtime.default_model import DefaultModelError, resolve_default_model
from service.runtime.repository import RepositoryError, scan_model
from service.video.decoding import VideoLimits, VideoReader, looks_like_video, open_video
from service.video.encoding import Mp4Writer
from service.video.tracking import Tracker, TrackerConfig

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp"}
VIDEO_SUFFIXES = {".mp4", ".m4v", ".mov", ".mkv", ".webm"}
# Local runs read videos within generous limits: it is the user's own machine and file.
LOCAL_MAX_PIXELS = 1 << 30
LOCAL_VIDEO = VideoLimits(max_pixels=8192 * 8192, max_read_frames=10_000_000, max_duration_s=1e9)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="detect-predict", description=__doc__.split("\n")[0])
    parser.add_argument("source", help="a folder of images, or a video file (MP4, MOV, MKV, WebM)")
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
    parser.add_argument("--fps", type=float, help="video: process at most this many frames per second")
    parser.add_argument("--max-frames", type=int, help="video: process at most this many frames")
    parser.add_argument("--no-track", action="store_true", help="video: no track ids")
    parser.add_argument("--save", action="store_true", help="also write the boxed images or video")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _local(args: argparse.Namespace) -> LocalDetector:
    if args.artifact:
        return LocalDetector(args.artifact, args.backend)
    root = Path(args.model_repository)
    names = [p.name for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    try:
        name = resolve_default_model(args.model, root, names)
        if name is None:
            raise SystemExit(f"detect-predict: name a model (--model); {root} holds {sorted(names)}")
        versions = scan_model(root, name)
    except (RepositoryError, DefaultModelError) as err:
        raise SystemExit(f"detect-predict: {err}") from None
    return LocalDetector(versions[-1].directory, args.backend)


def _images(source: Path) -> list[Path]:
    files = sorted(p for p in source.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise SystemExit(f"detect-predict: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {source}")
    return files


def _coco(found: Found, image_id: int) -> Iterator[dict[str, Any]]:
    kept = found.detections
    for i in range(len(kept)):
        x1, y1, x2, y2 = (round(float(v), 2) for v in kept.boxes[i])
        label = found.labels[int(kept.classes[i])]
        row: dict[str, Any] = {
            "image_id": image_id,
            "category_id": label.coco_id if label.coco_id is not None else int(kept.classes[i]),
            "bbox": [x1, y1, round(x2 - x1, 2), round(y2 - y1, 2)],
            "score": round(float(kept.scores[i]), 5),
            "label": label.name,
        }
        if i < len(found.track_ids) and found.track_ids[i] >= 0:
            row["track_id"] = int(found.track_ids[i])
        yield row


def _draw(image_rgb: Any, found: Found) -> Any:
    ids = found.track_ids.tolist() if len(found.track_ids) else None
    return draw_detections(image_rgb, found.detections, found.labels, track_ids=ids)


def predict_images(args: argparse.Namespace, files: list[Path], params: DetectParams, out: Path) -> int:
    detector = RemoteDetector(args.url, args.model, args.api_key) if args.url else _local(args)
    results: list[dict[str, Any]] = []
    names: dict[int, str] = {}
    if args.save:
        (out / "boxed").mkdir(exist_ok=True)
    for image_id, path in enumerate(tqdm(files, unit="image", disable=args.quiet), start=1):
        data = path.read_bytes()
        local = isinstance(detector, LocalDetector)
        image = decode_image(data, max_pixels=LOCAL_MAX_PIXELS) if args.save or local else None
        if isinstance(detector, RemoteDetector):
            found = detector.detect_image(data, params)
        else:
            assert image is not None
            kept = detector.detect([image], params)[0]
            found = Found(image.shape[1], image.shape[0], kept, detector.manifest.labels)
        results.extend(_coco(found, image_id))
        names[image_id] = path.name
        if args.save and image is not None:
            cv2.imwrite(str(out / "boxed" / f"{path.stem}.jpg"), _draw(image, found))
    (out / "results.json").write_text(json.dumps(results))
    (out / "images.json").write_text(json.dumps(names, indent=1))
    return len(files)


def _local_video(
    args: argparse.Namespace, path: Path, params: DetectParams
) -> Iterator[Found | dict[str, Any]]:
    detector = _local(args)
    labels = detector.manifest.labels
    with open_video(path.open("rb"), LOCAL_VIDEO) as video:
        fps = args.fps or video.info.fps or 30.0
        tracker = None if args.no_track else Tracker(TrackerConfig.for_fps(fps))
        frames = video.frames(args.fps, args.max_frames)
        processed = 0
        while group := [
            frame for _, frame in zip(range(detector.backend.max_batch_size), frames, strict=False)
        ]:
            for frame, kept in zip(group, detector.detect([f.image for f in group], params), strict=True):
                height, width = frame.image.shape[:2]
                ids = track(tracker, kept)
                yield Found(width, height, kept, labels, ids, frame.index, frame.pts, frame.image)
            processed += len(group)
        yield {
            "summary": True,
            "frames_read": video.read,
            "frames_processed": processed,
            "tracks": tracker.ids_given if tracker else 0,
            "stopped_by": video.stopped_by,
        }


def predict_video(args: argparse.Namespace, path: Path, params: DetectParams, out: Path) -> int:
    if args.url:
        remote = RemoteDetector(args.url, args.model, args.api_key)
        answers = remote.detect_video(path, params, args.fps, args.max_frames, not args.no_track)
    else:
        answers = _local_video(args, path, params)
    results: list[dict[str, Any]] = []
    times: dict[int, float] = {}
    writer: Mp4Writer | None = None
    frames_for_drawing = _FrameLookup(path) if args.save and args.url else None
    with (out / "frames.ndjson").open("w") as lines, tqdm(unit="frame", disable=args.quiet) as bar:
        for answer in answers:
            if isinstance(answer, dict):
                lines.write(json.dumps(answer) + "\n")
                continue
            assert answer.frame is not None and answer.pts is not None
            image_id = answer.frame + 1
            rows = list(_coco(answer, image_id))
            results.extend(rows)
            times[image_id] = answer.pts
            lines.write(json.dumps({"frame": answer.frame, "pts": answer.pts, "detections": rows}) + "\n")
            if args.save:
                image = answer.image
                if frames_for_drawing is not None:
                    image = frames_for_drawing.image(answer.frame)
                if image is not None:
                    if writer is None:
                        writer = Mp4Writer(image.shape[1], image.shape[0], _fps(path, args.fps))
                        boxed = (out / "boxed.mp4").open("wb")
                    writer.add(_draw(image, answer))
                    boxed.write(writer.take())
            bar.update()
    if writer is not None:
        writer.close()
        boxed.write(writer.take())
        boxed.close()
    if frames_for_drawing is not None:
        frames_for_drawing.close()
    (out / "results.json").write_text(json.dumps(results))
    (out / "images.json").write_text(json.dumps({str(k): {"pts": v} for k, v in times.items()}, indent=1))
    return len(times)


def _fps(path: Path, asked: float | None) -> float:
    """The frame rate of the boxed video: the source's, or ``asked`` when that is lower."""
    with open_video(path.open("rb"), LOCAL_VIDEO) as video:
        rate = video.info.fps or 30.0
    return min(rate, asked) if asked else rate


class _FrameLookup:
    """A video's frames by index, decoded in order as they are asked for (to draw a server's answers,
    which come in frame order)."""

    def __init__(self, path: Path):
        self._video = VideoReader.open(path.open("rb"), LOCAL_VIDEO)
        self._frames = self._video.frames()

    def image(self, index: int) -> np.ndarray | None:
        for frame in self._frames:
            if frame.index == index:
                return frame.image
            if frame.index > index:
                break
        return None

    def close(self) -> None:
        self._video.close()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    source = Path(args.source)
    if "://" in args.source:
        raise SystemExit(
            "detect-predict: stream URLs are watched by a server (POST /v1/streams); give a folder or a file"
        )
    if not source.exists():
        raise SystemExit(f"detect-predict: {source} does not exist")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    labels = None
    params = DetectParams(args.score_threshold)
    if args.classes:
        if args.url:
            labels = RemoteDetector(args.url, args.model, args.api_key).labels
        else:
            labels = _local(args).manifest.labels
        params = DetectParams(args.score_threshold, None, parse_class_filter(args.classes, labels))
    if source.is_dir():
        count = predict_images(args, _images(source), params, out)
        kind = "images"
    elif source.suffix.lower() in VIDEO_SUFFIXES or looks_like_video(source.open("rb").read(16)):
        count = predict_video(args, source, params, out)
        kind = "frames"
    else:
        raise SystemExit(f"detect-predict: {source} is neither a folder of images nor a video file")
    print(json.dumps({"source": str(source), kind: count, "out": str(out)}), file=sys.stdout)


if __name__ == "__main__":
    main()
