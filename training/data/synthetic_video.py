"""A synthetic video with ground-truth tracks: the dataset's shapes moving over one cluttered background,
entering, leaving and passing over each other, written as an H.264 MP4 plus MOT-style annotations.

::

    out/video.mp4                   the frames
    out/gt/gt.txt                   MOT Challenge ground truth, one line per visible object per frame:
                                    frame, track id, x, y, w, h, 1, 1, visibility (class 1: MOT's scored
                                    class, so TrackEval-style evaluation scores every shape)
    out/seqinfo.ini                 MOT sequence info (frame rate, length, size)
    out/annotations.json            the same boxes with their shape classes, COCO-style: "categories",
                                    "videos" [{id, width, height, fps, frames}], "annotations" [{frame,
                                    track_id, category_id, bbox [x, y, w, h], visibility}]

Frames are numbered from 1 as MOT's are; boxes are pixel-edge ``x, y, w, h`` of each object's visible
pixels (its painted mask minus the shapes in front of it), exact as in the still dataset. An object is
written in a frame only while at least ``min_visible`` of its painted pixels are visible and its visible
box is at least ``min_box`` pixels a side; ``visibility`` is that visible fraction. Track ids are 1, 2, ...
per object and never reused. Everything is drawn from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from numpy.typing import NDArray

from training.data.synthetic_scene import (
    CATEGORIES,
    _background,
    _paint,
    _rasterize,
    _unit_shape,
    mask_bounds,
)


@dataclass(frozen=True)
class VideoConfig:
    """Knobs of the synthetic video."""

    width: int = 384
    height: int = 288
    frames: int = 150
    fps: int = 15
    objects: int = 10  # over the whole video; at most max_on_screen at once
    max_on_screen: int = 5
    size_range: tuple[float, float] = (0.14, 0.3)  # shape diameter / sqrt(width * height)
    speed_range: tuple[float, float] = (1.0, 5.0)  # pixels per frame
    min_visible: float = 0.3
    min_box: int = 6
    noise: float = 3.0  # per-pixel Gaussian noise, each frame


@dataclass
class _Mover:
    track_id: int
    category_id: int
    shape: NDArray[np.float64]  # polygon around the origin, pixels
    start: NDArray[np.float64]  # centre at frame `enter`
    velocity: NDArray[np.float64]
    spin: float  # radians per frame
    color: NDArray[np.float32]
    enter: int
    leave: int  # exclusive

    def polygon(self, frame: int) -> NDArray[np.float64]:
        t = frame - self.enter
        angle = self.spin * t
        c, s = math.cos(angle), math.sin(angle)
        rotated: NDArray[np.float64] = self.shape @ np.array([[c, s], [-s, c]])
        return rotated + self.start + self.velocity * t


def _movers(rng: np.random.Generator, cfg: VideoConfig) -> list[_Mover]:
    """Objects that cross the frame: each enters from outside one edge (or appears inside) and moves
    across, some overlapping others on the way."""
    movers: list[_Mover] = []
    size = np.array([cfg.width, cfg.height], dtype=np.float64)
    span = cfg.frames // 2
    for index in range(cfg.objects):
        cat_id, name = CATEGORIES[int(rng.integers(len(CATEGORIES)))]
        diameter = rng.uniform(*cfg.size_range) * math.sqrt(cfg.width * cfg.height)
        shape = _unit_shape(name, rng) * diameter / 2
        enter = int(rng.integers(0, max(1, cfg.frames - span // 2)))
        if index < cfg.max_on_screen:
            enter = int(rng.integers(0, max(1, cfg.frames // 8)))
        speed = rng.uniform(*cfg.speed_range)
        if rng.random() < 0.3:  # appears inside the frame and wanders
            start = rng.uniform(0.2, 0.8, 2) * size
            direction = rng.uniform(0, 2 * np.pi)
        else:  # enters from an edge, heading across
            edge = int(rng.integers(4))
            along = rng.uniform(0.15, 0.85)
            start = (
                np.array([(-0.1, along), (1.1, along), (along, -0.1), (along, 1.1)][edge], dtype=np.float64)
                * size
            )
            direction = math.atan2(*(size / 2 + rng.normal(0, 0.15, 2) * size - start)[::-1])
        velocity = speed * np.array([math.cos(direction), math.sin(direction)])
        distance = float(np.linalg.norm(size)) * 1.3
        leave = min(cfg.frames, enter + int(distance / speed))
        color = rng.uniform(0, 255, 3).astype(np.float32)
        movers.append(
            _Mover(index + 1, cat_id, shape, start, velocity, rng.uniform(-0.03, 0.03), color, enter, leave)
        )
    return movers


def render_frame(
    background: NDArray[np.float32],
    movers: list[_Mover],
    frame: int,
    rng: np.random.Generator,
    cfg: VideoConfig,
) -> tuple[NDArray[np.uint8], list[tuple[int, int, tuple[int, int, int, int], float]]]:
    """Frame ``frame`` (0-based) and its ground truth: (track id, category id, x, y, w, h, visibility)."""
    height, width = background.shape[:2]
    image = background.copy()
    painted: list[tuple[_Mover, tuple[int, int, int, int], NDArray[np.bool_], int]] = []
    for mover in movers:  # back to front in track-id order
        if not mover.enter <= frame < mover.leave:
            continue
        polygon = mover.polygon(frame)
        if (polygon.max(axis=0) < 0).any() or (polygon.min(axis=0) >= [width, height]).any():
            continue  # wholly outside
        box, mask = _rasterize(polygon, height, width)
        if not mask.any():
            continue
        # Area of the whole shape (inside the frame or not), for the visible fraction.
        x, y = polygon[:, 0], polygon[:, 1]
        area = 0.5 * abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))))
        _paint(image, box, mask, mover.color, rng)
        painted.append((mover, box, mask, max(1, round(area))))
    truth = []
    for i, (mover, box, mask, area) in enumerate(painted):
        visible = mask.copy()
        x0, y0, x1, y1 = box
        for _, (ox0, oy0, ox1, oy1), other, _ in painted[i + 1 :]:  # shapes painted on top
            ix0, iy0, ix1, iy1 = max(x0, ox0), max(y0, oy0), min(x1, ox1), min(y1, oy1)
            if ix0 < ix1 and iy0 < iy1:
                cover = other[iy0 - oy0 : iy1 - oy0, ix0 - ox0 : ix1 - ox0]
                visible[iy0 - y0 : iy1 - y0, ix0 - x0 : ix1 - x0] &= ~cover
        fraction = min(1.0, float(visible.sum()) / area)
        bounds = mask_bounds(visible)
        if bounds is None or fraction < cfg.min_visible:
            continue
        bx, by, bw, bh = bounds
        if bw < cfg.min_box or bh < cfg.min_box:
            continue
        truth.append((mover.track_id, mover.category_id, (x0 + bx, y0 + by, bw, bh), round(fraction, 3)))
    noisy = image + rng.standard_normal(size=image.shape, dtype=np.float32) * np.float32(cfg.noise)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8), truth


def generate_video(out: str | Path, seed: int = 0, cfg: VideoConfig | None = None) -> dict[str, object]:
    """Write the video and its annotations under ``out`` (see the module's docstring); a summary."""
    cfg = cfg or VideoConfig()
    root = Path(out)
    (root / "gt").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    background = _background(rng, cfg.height, cfg.width)
    movers = _movers(rng, cfg)
    lines: list[str] = []
    annotations: list[dict[str, object]] = []
    seen: set[int] = set()
    with av.open(str(root / "video.mp4"), "w") as container:
        stream = container.add_stream("libx264", rate=Fraction(cfg.fps))
        stream.width, stream.height, stream.pix_fmt = cfg.width, cfg.height, "yuv420p"
        stream.options = {"crf": "18", "preset": "medium"}
        for frame in range(cfg.frames):
            image, truth = render_frame(background, movers, frame, rng, cfg)
            for track_id, category_id, (x, y, w, h), visibility in truth:
                lines.append(f"{frame + 1},{track_id},{x},{y},{w},{h},1,1,{visibility}")
                annotations.append(
                    {
                        "frame": frame + 1,
                        "track_id": track_id,
                        "category_id": category_id,
                        "bbox": [x, y, w, h],
                        "visibility": visibility,
                    }
                )
                seen.add(track_id)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    (root / "gt" / "gt.txt").write_text("\n".join(lines) + "\n")
    sequence = {
        "name": root.name or "synthetic",
        "imDir": "video.mp4",
        "frameRate": cfg.fps,
        "seqLength": cfg.frames,
        "imWidth": cfg.width,
        "imHeight": cfg.height,
        "imExt": ".mp4",
    }
    (root / "seqinfo.ini").write_text("[Sequence]\n" + "".join(f"{k}={v}\n" for k, v in sequence.items()))
    coco_video = {
        "categories": [{"id": cat_id, "name": name} for cat_id, name in CATEGORIES],
        "videos": [{"id": 1, "width": cfg.width, "height": cfg.height, "fps": cfg.fps, "frames": cfg.frames}],
        "annotations": annotations,
    }
    (root / "annotations.json").write_text(json.dumps(coco_video) + "\n")
    return {
        "video": str(root / "video.mp4"),
        "annotations": str(root / "annotations.json"),
        "mot_ground_truth": str(root / "gt" / "gt.txt"),
        "frames": cfg.frames,
        "fps": cfg.fps,
        "size": [cfg.width, cfg.height],
        "tracks": len(seen),
        "boxes": len(lines),
    }
