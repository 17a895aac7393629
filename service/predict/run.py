"""What `detect-predict` does once its arguments are read (`service.predict.cli`): detect, track, write."""

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
from service.predict.detectors import Found, LocalDetector, RemoteDetector, coco_rows, track
from service.predict.stream import is_stream_url, predict_stream
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


def _draw(image_rgb: Any, found: Found) -> Any:
    ids = found.track_ids.tolist() if len(found.track_ids) else None
    return draw_detections(image_rgb, found.detections, found.labels, track_ids=ids)


Detector = LocalDetector | RemoteDetector


def predict_images(
    args: argparse.Namespace, detector: Detector, files: list[Path], params: DetectParams, out: Path
) -> int:
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
        results.extend(coco_rows(found, image_id))
        names[image_id] = path.name
        if args.save and image is not None:
            cv2.imwrite(str(out / "boxed" / f"{path.stem}.jpg"), _draw(image, found))
    (out / "results.json").write_text(json.dumps(results))
    (out / "images.json").write_text(json.dumps(names, indent=1))
    return len(files)


def _local_video(
    args: argparse.Namespace, detector: LocalDetector, path: Path, params: DetectParams
) -> Iterator[Found | dict[str, Any]]:
    labels = detector.manifest.labels
    with path.open("rb") as handle, open_video(handle, LOCAL_VIDEO) as video:
        rates = [rate for rate in (args.fps, video.info.fps) if rate]
        fps = min(rates) if rates else 30.0  # frames processed per second of video
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


def predict_video(
    args: argparse.Namespace, detector: Detector, path: Path, params: DetectParams, out: Path
) -> int:
    if isinstance(detector, RemoteDetector):
        answers = detector.detect_video(path, params, args.fps, args.max_frames, not args.no_track)
    else:
        answers = _local_video(args, detector, path, params)
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
            rows = list(coco_rows(answer, image_id))
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
    with path.open("rb") as handle, open_video(handle, LOCAL_VIDEO) as video:
        rate = video.info.fps or 30.0
    return min(rate, asked) if asked else rate


class _FrameLookup:
    """A video's frames by index, decoded in order as they are asked for (to draw a server's answers,
    which come in frame order)."""

    def __init__(self, path: Path):
        self._handle = path.open("rb")
        self._video = VideoReader.open(self._handle, LOCAL_VIDEO)
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
        self._handle.close()


def _starts_like_video(path: Path) -> bool:
    with path.open("rb") as handle:
        return looks_like_video(handle.read(16))


def _predict_stream(args: argparse.Namespace) -> None:
    if not args.url:
        raise SystemExit(
            f"detect-predict: {args.source} is a stream URL: a server watches streams; give its address with"
            " --url http://host:port (its DETECT_STREAM_SOURCES must allow the URL)"
        )
    if args.save:
        raise SystemExit("detect-predict: --save is for folders and videos, not stream URLs")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    detector = RemoteDetector(args.url, args.model, args.api_key)
    classes = parse_class_filter(args.classes, detector.labels) if args.classes else None
    params = DetectParams(args.score_threshold, None, classes)
    count = predict_stream(args.source, detector, params, out, args)
    print(json.dumps({"source": args.source, "frames": count, "out": str(out)}), file=sys.stdout)


def predict(args: argparse.Namespace) -> None:
    """Run ``detect-predict`` with parsed ``args`` (see `service.predict.cli`)."""
    if is_stream_url(args.source):
        _predict_stream(args)
        return
    if args.duration is not None:
        raise SystemExit("detect-predict: --duration is for stream URLs; give --max-frames for a video")
    source = Path(args.source)
    if not source.exists():
        raise SystemExit(f"detect-predict: {source} does not exist")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    is_video = not source.is_dir() and (source.suffix.lower() in VIDEO_SUFFIXES or _starts_like_video(source))
    if not source.is_dir() and not is_video:
        raise SystemExit(f"detect-predict: {source} is neither a folder of images nor a video file")
    files = [] if is_video else _images(source)
    detector: Detector = RemoteDetector(args.url, args.model, args.api_key) if args.url else _local(args)
    labels = detector.labels if isinstance(detector, RemoteDetector) else detector.manifest.labels
    classes = parse_class_filter(args.classes, labels) if args.classes else None
    params = DetectParams(args.score_threshold, None, classes)
    if is_video:
        count = predict_video(args, detector, source, params, out)
        kind = "frames"
    else:
        count = predict_images(args, detector, files, params, out)
        kind = "images"
    print(json.dumps({"source": str(source), kind: count, "out": str(out)}), file=sys.stdout)
