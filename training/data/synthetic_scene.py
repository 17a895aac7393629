"""The synthetic dataset's scenes: coloured shapes painted back to front on a cluttered background, each
with its exactly visible mask (see :mod:`training.data.synthetic` for the dataset and its guarantees)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import cast

import cv2
import numpy as np
from numpy.typing import NDArray

__all__ = [
    "CATEGORIES",
    "LARGE_SCENES",
    "SHIFTS",
    "SyntheticConfig",
    "SyntheticObject",
    "mask_bounds",
    "mask_to_polygons",
    "render_sample",
    "shifted_config",
]

# (COCO category id, name). Ids have gaps like COCO's (1..90 for 80 classes).
CATEGORIES: tuple[tuple[int, str], ...] = (
    (2, "circle"),
    (5, "square"),
    (11, "triangle"),
    (17, "star"),
    (23, "hexagon"),
    (42, "cross"),
)
_SUBPIXEL_SHIFT = 4  # cv2.fillPoly fixed-point bits: vertices keep 1/16-pixel precision


@dataclass(frozen=True)
class SyntheticConfig:
    """Knobs of the generator. Fractions are of the image side they refer to."""

    side_range: tuple[int, int] = (160, 480)  # width and height drawn independently
    max_objects: int = 6
    size_range: tuple[float, float] = (0.12, 0.45)  # shape diameter / sqrt(width * height)
    min_visible: float = 0.5  # visible pixels / painted pixels, per shape
    min_box_fraction: float = 0.08  # visible box width >= this * image width, same for height
    min_contrast: float = 80.0  # RGB distance of a shape's colour from what lies under it
    attempts_per_object: int = 25
    jpeg_quality: int = 92
    categories: tuple[tuple[int, str], ...] = field(default=CATEGORIES)
    # Dots in the clutter are sized from min(image side, this): None sizes them from the image, which on
    # large scenes would draw dots as big as the (small) shapes.
    clutter_side: int | None = None
    # A global tone applied to the finished scene before noise: (gain, per-channel RGB offset). None: none.
    tone: tuple[float, tuple[float, float, float]] | None = None


# Large scenes with small objects (tiled inference: docs/tiling.md): 2000-4000 px a side, shapes of about
# 20-80 px (boxes; diameters 0.0045-0.0135 of sqrt(width * height)), up to 60 of them.
LARGE_SCENES = SyntheticConfig(
    side_range=(2000, 4000),
    max_objects=60,
    size_range=(0.0045, 0.0135),
    min_box_fraction=0.003,
    clutter_side=480,
)


# Distribution shifts of the default scenes (``detect-train synth --shift NAME[,NAME]``), to test how a model
# trained on the default ones copes with scenes it has not seen: ``dark`` is a dim, blue-cast scene (low
# contrast, as at night); ``small`` draws shapes a third to a half the default size.
SHIFTS: dict[str, dict[str, object]] = {
    "dark": {"tone": (0.4, (0.0, 8.0, 30.0))},
    "small": {"size_range": (0.06, 0.2), "min_box_fraction": 0.04},
}


def shifted_config(
    names: list[str] | tuple[str, ...], base: SyntheticConfig | None = None
) -> SyntheticConfig:
    """``base`` (default scenes) with the named `SHIFTS` applied; raises ValueError naming an unknown one."""
    unknown = sorted(set(names) - set(SHIFTS))
    if unknown:
        raise ValueError(f"unknown shift(s) {unknown}; expected names from {sorted(SHIFTS)}")
    values: dict[str, object] = {}
    for name in names:
        values.update(SHIFTS[name])
    return replace(base or SyntheticConfig(), **values)  # type: ignore[arg-type]


@dataclass
class SyntheticObject:
    """One annotated shape.

    ``visible`` is its visible mask (bool ``[y1 - y0, x1 - x0]``) inside the painted extent
    ``box = (x0, y0, x1, y1)`` (pixels, end-exclusive); :meth:`mask` gives the full-image mask.
    """

    category_id: int
    box: tuple[int, int, int, int]
    visible: NDArray[np.bool_]
    painted_area: int
    color: NDArray[np.float32]

    def mask(self, height: int, width: int) -> NDArray[np.bool_]:
        """Visible mask as bool ``[height, width]``."""
        full = np.zeros((height, width), dtype=bool)
        x0, y0, x1, y1 = self.box
        full[y0:y1, x0:x1] = self.visible
        return full


class _HoleError(ValueError):
    pass


# ---------------------------------------------------------------------------------------------- geometry


def _unit_shape(name: str, rng: np.random.Generator) -> NDArray[np.float64]:
    """Polygon ``[V, 2]`` of a shape with circumradius ~1, centred on the origin."""

    def ring(n: int, start: float) -> NDArray[np.float64]:
        a = start + np.arange(n) * 2 * np.pi / n
        return np.stack([np.cos(a), np.sin(a)], axis=1)

    if name == "circle":
        return ring(64, 0.0)
    if name == "square":
        return ring(4, np.pi / 4)
    if name == "triangle":
        return ring(3, -np.pi / 2)
    if name == "hexagon":
        return ring(6, 0.0)
    if name == "star":
        outer = ring(5, -np.pi / 2)
        inner = ring(5, -np.pi / 2 + np.pi / 5) * rng.uniform(0.38, 0.52)
        return np.stack([outer, inner], axis=1).reshape(-1, 2)
    if name == "cross":
        t = rng.uniform(0.26, 0.36)  # half-width of an arm
        q = [(t, -1), (t, -t), (1, -t), (1, t), (t, t), (t, 1)]
        quarter = np.array(q, dtype=np.float64)
        half = np.concatenate([quarter, -quarter])  # rotate the right half by 180 degrees
        return half / math.hypot(1.0, t)
    raise ValueError(f"unknown shape {name!r}")


def _sample_polygon(
    name: str, rng: np.random.Generator, width: int, height: int, cfg: SyntheticConfig
) -> NDArray[np.float64]:
    """A shape of random size, aspect, rotation and position, fully inside the image (pixel coordinates)."""
    pts = _unit_shape(name, rng)
    aspect = math.exp(rng.uniform(-0.22, 0.22))  # ~0.8..1.25, so circles become mild ellipses too
    pts = pts * np.array([math.sqrt(aspect), 1.0 / math.sqrt(aspect)])
    angle = rng.uniform(0.0, 2 * np.pi)
    c, s = math.cos(angle), math.sin(angle)
    pts = pts @ np.array([[c, s], [-s, c]])
    diameter = rng.uniform(*cfg.size_range) * math.sqrt(width * height)
    # Never larger than the image: shapes stay whole, truncation would only make boxes ambiguous.
    extent = pts.max(axis=0) - pts.min(axis=0)
    diameter = min(diameter, 0.95 * width / extent[0] * 1.0, 0.95 * height / extent[1] * 1.0)
    pts = pts * diameter
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    centre = rng.uniform(-lo, np.array([width, height]) - hi)
    return cast("NDArray[np.float64]", pts + centre)


def _rasterize(
    polygon: NDArray[np.float64], height: int, width: int
) -> tuple[tuple[int, int, int, int], NDArray[np.bool_]]:
    """Pixels covered by ``polygon``: its extent ``(x0, y0, x1, y1)`` and the bool mask inside it.

    Painting uses this same raster, so the annotation and the painted pixels agree exactly.
    """
    x0, y0 = np.maximum(np.floor(polygon.min(axis=0)).astype(int) - 1, 0)
    x1, y1 = np.minimum(np.ceil(polygon.max(axis=0)).astype(int) + 2, [width, height])
    mask = np.zeros((y1 - y0, x1 - x0), dtype=np.uint8)
    fixed = np.round((polygon - [x0, y0]) * (1 << _SUBPIXEL_SHIFT)).astype(np.int32)
    cv2.fillPoly(mask, [fixed], 1, lineType=cv2.LINE_8, shift=_SUBPIXEL_SHIFT)
    return (int(x0), int(y0), int(x1), int(y1)), mask.astype(bool)


def mask_to_polygons(mask: NDArray[np.bool_] | NDArray[np.uint8]) -> list[list[float]]:
    """Pixel-edge outlines of a hole-free binary mask, as COCO polygons ``[x0, y0, x1, y1, ...]``.

    The mask is upsampled 2x so that ``cv2.findContours`` (which traces pixel centres) runs on 2x2
    blocks; mapping a traced sub-pixel ``p`` to ``(p + 1) // 2`` puts every vertex on the corner of an
    original pixel. The union of the outlines therefore covers exactly the mask's pixels (pixel (r, c)
    is [c, c + 1] x [r, r + 1]), diagonal-only contacts become pinch vertices, and pycocotools decodes
    the polygons back to the mask bit for bit.

    Raises:
        ValueError: the mask has a hole (not expressible as COCO polygons).
    """
    up = np.repeat(np.repeat(np.asarray(mask, dtype=np.uint8), 2, axis=0), 2, axis=1)
    contours, hierarchy = cv2.findContours(up, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)
    if hierarchy is not None and bool((hierarchy[0][:, 3] >= 0).any()):
        raise _HoleError("mask has a hole")
    polygons: list[list[float]] = []
    for contour in contours:
        pts = (contour[:, 0, :].astype(np.int64) + 1) // 2  # (V, 2) x, y on pixel corners
        pts = pts[np.any(pts != np.roll(pts, 1, axis=0), axis=1)]  # drop repeats (cyclic)
        # Steps are unit axis moves: a vertex whose incoming and outgoing steps agree is on a straight run.
        d_in = np.sign(pts - np.roll(pts, 1, axis=0))
        d_out = np.sign(np.roll(pts, -1, axis=0) - pts)
        pts = pts[np.any(d_in != d_out, axis=1)]
        polygons.append([float(v) for v in pts.reshape(-1)])
    return polygons


def _has_hole(mask: NDArray[np.bool_]) -> bool:
    _, hierarchy = cv2.findContours(mask.astype(np.uint8), cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)
    return hierarchy is not None and bool((hierarchy[0][:, 3] >= 0).any())


def mask_bounds(mask: NDArray[np.bool_]) -> tuple[int, int, int, int] | None:
    """(x, y, w, h) of the mask's pixels, or None if empty."""
    cols = np.flatnonzero(mask.any(axis=0))
    if cols.size == 0:
        return None
    rows = np.flatnonzero(mask.any(axis=1))
    return int(cols[0]), int(rows[0]), int(cols[-1] - cols[0] + 1), int(rows[-1] - rows[0] + 1)


# ---------------------------------------------------------------------------------------------- painting


def _background(
    rng: np.random.Generator, height: int, width: int, clutter_side: int | None = None
) -> NDArray[np.float32]:
    """Float RGB [H, W, 3] in 0..255: a gradient, optionally textured and striped, with clutter."""
    yy = np.arange(height, dtype=np.float32)[:, None]
    xx = np.arange(width, dtype=np.float32)[None, :]
    c0, c1 = rng.uniform(0, 255, 3).astype(np.float32), rng.uniform(0, 255, 3).astype(np.float32)
    if rng.random() < 0.6:
        a = rng.uniform(0, 2 * np.pi)
        t = xx * math.cos(a) + yy * math.sin(a)
    else:
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        t = np.hypot(xx - cx, yy - cy)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0 + (c1 - c0) * t[..., None]

    if rng.random() < 0.6:  # low-frequency colour texture
        gh, gw = rng.integers(3, 12, size=2)
        coarse = rng.normal(0, rng.uniform(10, 40), size=(gh, gw, 3)).astype(np.float32)
        img = img + cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    if rng.random() < 0.25:  # stripes
        a = rng.uniform(0, np.pi)
        period = rng.uniform(6, 30)
        stripes = np.sin((xx * math.cos(a) + yy * math.sin(a)) * 2 * np.pi / period)
        img = img + stripes[..., None] * rng.uniform(-25, 25, 3)
    img = np.clip(img, 0, 255).astype(np.float32)

    short = min(height, width)
    if rng.random() < 0.5:  # soft blobs: shapeless, blurred, never mistaken for a shape's hard edge
        # Drawn and blurred at 1/4 resolution: a wide blur at full size costs more than the whole image.
        qh, qw = (height + 3) // 4, (width + 3) // 4
        layer = np.zeros((qh, qw, 4), np.float32)  # RGB + alpha
        for _ in range(rng.integers(1, 5)):
            centre = (int(rng.integers(0, qw)), int(rng.integers(0, qh)))
            radius = max(1, int(rng.uniform(0.05, 0.2) * short / 4))
            cv2.circle(layer, centre, radius, [*rng.uniform(0, 255, 3).tolist(), 1.0], -1)
        blurred = cv2.resize(
            cv2.GaussianBlur(layer, (0, 0), 0.02 * short), (width, height), interpolation=cv2.INTER_LINEAR
        )
        # The blurred RGB is already premultiplied by the blurred coverage in channel 3.
        img = img * (1 - 0.6 * blurred[..., 3:]) + 0.6 * blurred[..., :3]
    for _ in range(rng.integers(0, 7)):  # straight lines
        p0 = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        p1 = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        color = rng.uniform(0, 255, 3).tolist()
        cv2.line(img, p0, p1, color, int(rng.integers(1, 4)), cv2.LINE_AA)
    for _ in range(rng.integers(0, 4)):  # scribbles: random walks
        n = int(rng.integers(4, 12))
        steps = rng.normal(0, 0.06 * short, size=(n, 2))
        start = rng.uniform(0, [width, height])
        walk = (start + np.cumsum(steps, axis=0)).astype(np.int32)
        color = rng.uniform(0, 255, 3).tolist()
        cv2.polylines(img, [walk], False, color, int(rng.integers(1, 3)), cv2.LINE_AA)
    dot_side = short if clutter_side is None else min(short, clutter_side)
    for _ in range(rng.integers(0, 25)):  # dots, far below the smallest object
        centre = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        radius = int(rng.integers(1, max(2, int(0.015 * dot_side))))
        cv2.circle(img, centre, radius, rng.uniform(0, 255, 3).tolist(), -1, cv2.LINE_AA)
    return cast("NDArray[np.float32]", img)


def _pick_color(
    rng: np.random.Generator, avoid: list[NDArray[np.float32]], min_contrast: float
) -> NDArray[np.float32] | None:
    """A random RGB colour at least ``min_contrast`` away from every colour in ``avoid``."""
    for _ in range(20):
        color = rng.uniform(0, 255, 3).astype(np.float32)
        if all(float(np.linalg.norm(color - a)) >= min_contrast for a in avoid):
            return color
    return None


def _paint(
    img: NDArray[np.float32],
    box: tuple[int, int, int, int],
    mask: NDArray[np.bool_],
    color: NDArray[np.float32],
    rng: np.random.Generator,
) -> None:
    """Fill ``mask`` (inside ``box``) with ``color`` plus a gentle linear shading."""
    x0, y0, x1, y1 = box
    rows, cols = np.nonzero(mask)
    gx, gy = rng.uniform(-0.25, 0.25, 2)
    shade = (cols - cols.mean()) * gx + (rows - rows.mean()) * gy
    region = img[y0:y1, x0:x1]  # a view: writes go to img
    region[rows, cols] = np.clip(color[None, :] + shade[:, None].astype(np.float32), 0, 255)


def _visible_ok(
    visible: NDArray[np.bool_], painted_area: int, image_hw: tuple[int, int], cfg: SyntheticConfig
) -> bool:
    """Whether a shape with this visible mask (any crop that contains it) may be annotated."""
    if int(visible.sum()) < cfg.min_visible * painted_area:
        return False
    bounds = mask_bounds(visible)
    if bounds is None:
        return False
    _, _, w, h = bounds
    height, width = image_hw
    if w < cfg.min_box_fraction * width or h < cfg.min_box_fraction * height:
        return False
    return not _has_hole(visible)


def _occlude(
    obj: SyntheticObject, box: tuple[int, int, int, int], mask: NDArray[np.bool_]
) -> NDArray[np.bool_] | None:
    """``obj.visible`` minus a new shape (``mask`` inside ``box``) on top, or None if they do not touch."""
    ox0, oy0, ox1, oy1 = obj.box
    nx0, ny0, nx1, ny1 = box
    ix0, iy0, ix1, iy1 = max(ox0, nx0), max(oy0, ny0), min(ox1, nx1), min(oy1, ny1)
    if ix0 >= ix1 or iy0 >= iy1:
        return None
    cover = mask[iy0 - ny0 : iy1 - ny0, ix0 - nx0 : ix1 - nx0]
    window = obj.visible[iy0 - oy0 : iy1 - oy0, ix0 - ox0 : ix1 - ox0]
    if not (window & cover).any():
        return None
    visible = obj.visible.copy()
    visible[iy0 - oy0 : iy1 - oy0, ix0 - ox0 : ix1 - ox0] = window & ~cover
    return visible


def render_sample(
    rng: np.random.Generator, cfg: SyntheticConfig | None = None
) -> tuple[NDArray[np.uint8], list[SyntheticObject]]:
    """One image and its annotated shapes.

    Returns:
        ``image`` uint8 RGB [H, W, 3] and the shapes, back to front, each with its visible mask.
    """
    cfg = cfg or SyntheticConfig()
    width = int(rng.integers(cfg.side_range[0], cfg.side_range[1] + 1))
    height = int(rng.integers(cfg.side_range[0], cfg.side_range[1] + 1))
    img = _background(rng, height, width, cfg.clutter_side)
    objects: list[SyntheticObject] = []
    for _ in range(int(rng.integers(1, cfg.max_objects + 1))):
        # The class is drawn once per object, not per attempt: large shapes are rejected more often, and
        # redrawing the class on rejection would make them rarer.
        cat_id, name = cfg.categories[int(rng.integers(len(cfg.categories)))]
        for _attempt in range(cfg.attempts_per_object):
            box, mask = _rasterize(_sample_polygon(name, rng, width, height, cfg), height, width)
            painted_area = int(mask.sum())
            if not _visible_ok(mask, painted_area, (height, width), cfg):
                continue
            # Every shape underneath must stay annotatable once this one covers part of it.
            occluded = [(o, v) for o in objects if (v := _occlude(o, box, mask)) is not None]
            if not all(_visible_ok(v, o.painted_area, (height, width), cfg) for o, v in occluded):
                continue
            x0, y0, x1, y1 = box
            under = img[y0:y1, x0:x1][mask].mean(axis=0)
            color = _pick_color(rng, [under, *(o.color for o, _ in occluded)], cfg.min_contrast)
            if color is None:
                continue
            for o, v in occluded:
                o.visible = v
            _paint(img, box, mask, color, rng)
            objects.append(SyntheticObject(cat_id, box, mask, painted_area, color))
            break
    if rng.random() < 0.2:
        img = np.asarray(cv2.GaussianBlur(img, (3, 3), 0), dtype=np.float32)
    if cfg.tone is not None:
        gain, offset = cfg.tone
        img = img * np.float32(gain) + np.asarray(offset, dtype=np.float32)
    img = img + rng.standard_normal(size=img.shape, dtype=np.float32) * np.float32(rng.uniform(0, 8))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8), objects


# ---------------------------------------------------------------------------------------------- writing
