"""Tiled (sliced) inference: which tiles a large image is cut into, known from its header alone.

A photo of 4000x3000 shrunk to a 256x256 network input turns a 60 px object into 4 px. Tiling cuts the
image into overlapping tiles at about the network's input scale, runs each tile (plus, optionally, the
whole image downscaled, for objects larger than a tile) as its own network input, and merges the
detections back in original pixels (`service.imaging.merging`).

The grid is SAHI's (``sahi.slicing.get_slice_bboxes``): tiles of ``tile_w x tile_h`` stepping by the tile
size less ``int(overlap * side)``, the last tile of a row or column moved back to end at the image's
border, so every tile is whole and every pixel covered; ``tests/service/imaging/test_tiling.py`` checks it
against SAHI's own function. Everything here is decided from the image's size, before any pixel is
decoded, so a request's tiles count against its limits as that many images would.

- ``off``: one network input per image, as without tiling.
- ``WxH``: tiles of exactly that size (each side `MIN_TILE_SIDE`..`MAX_TILE_SIDE` px).
- ``auto``: tiles only when the image is more than ``auto_min_scale`` times the network input along a
  side; tiles have the network input's size, grown in steps of 25% only until the request's tiles fit its
  tile budget (`service.pipeline.tile_budget`: inputs, memory, and time at the model's throughput); an
  image whose budget leaves no room for two tiles is not tiled.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from service.errors import BadRequest, PayloadTooLarge
from service.imaging.merging import MergeRule

# A tile smaller than this carries too little context to detect anything in; larger than this it is no
# longer a tile (and a typo such as 100000x100000 must not plan a grid of one).
MIN_TILE_SIDE = 32
MAX_TILE_SIDE = 8192
MAX_OVERLAP = 0.75
_AUTO_GROWTH = 1.25
_SIZE = re.compile(r"(\d{1,6})x(\d{1,6})")  # exactly, as the API documents: off | auto | \d+x\d+

TilingMode = Literal["off", "auto", "fixed"]


@dataclass(frozen=True)
class Tiling:
    """How a request's images are tiled: ``mode``, the tile size for ``fixed``, the overlap between
    neighbouring tiles (a fraction of the tile side), whether the whole image is also run, when ``auto``
    tiles, and how the tiles' detections are merged."""

    mode: TilingMode = "off"
    tile_size: tuple[int, int] | None = None  # (width, height), fixed mode only
    overlap: float = 0.2
    full_image: bool = True
    auto_min_scale: float = 2.0
    merge: MergeRule = field(default_factory=MergeRule)


@dataclass(frozen=True)
class Tile:
    """One tile: the pixels ``[x0, x1) x [y0, y1)`` of the original image."""

    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def width(self) -> int:
        return self.x1 - self.x0

    @property
    def height(self) -> int:
        return self.y1 - self.y0


def cut_by_tile(boxes: NDArray[np.float32], tile: Tile, size: tuple[int, int]) -> NDArray[np.bool_]:
    """Which ``[N, 4]`` boxes (original pixels) of ``tile``'s detections touch one of its borders inside
    the image (of ``size``, width and height): an object there may go on in the neighbouring tile."""
    width, height = size
    near = 1.0  # px: boxes are clipped to the tile, so a cut box ends on its border
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    cut = np.zeros(len(boxes), dtype=bool)
    if tile.x0 > 0:
        cut |= x1 <= tile.x0 + near
    if tile.y0 > 0:
        cut |= y1 <= tile.y0 + near
    if tile.x1 < width:
        cut |= x2 >= tile.x1 - near
    if tile.y1 < height:
        cut |= y2 >= tile.y1 - near
    return cut


def parse_tiling(spec: str, *, field: str = "tiling") -> tuple[TilingMode, tuple[int, int] | None]:
    """``"off"``, ``"auto"`` or ``"WxH"`` -> (mode, tile size). Raises `BadRequest` naming ``field``."""
    if spec in ("off", "auto"):
        return ("off" if spec == "off" else "auto"), None
    match = _SIZE.fullmatch(spec)
    if match is None:
        raise BadRequest(
            f"{field}: expected off, auto or a tile size WIDTHxHEIGHT such as 512x512; got {spec!r}",
            field=field,
        )
    width, height = int(match[1]), int(match[2])
    for side in (width, height):
        if not MIN_TILE_SIDE <= side <= MAX_TILE_SIDE:
            raise BadRequest(
                f"{field}: tile sides must be {MIN_TILE_SIDE}..{MAX_TILE_SIDE} px; got {width}x{height}",
                field=field,
            )
    return "fixed", (width, height)


def check_overlap(overlap: float, *, field: str = "tile_overlap") -> float:
    """``overlap`` if it is a usable fraction of the tile side (0..`MAX_OVERLAP`), else `BadRequest`."""
    if not (0.0 <= overlap <= MAX_OVERLAP) or math.isnan(overlap):
        raise BadRequest(
            f"{field}: the overlap is a fraction of the tile side, 0..{MAX_OVERLAP}; got {overlap} (at 1.0 "
            "tiles would never advance)",
            field=field,
        )
    return overlap


def slice_grid(width: int, height: int, tile_width: int, tile_height: int, overlap: float) -> list[Tile]:
    """The tiles covering a ``width x height`` image, row by row (SAHI's ``get_slice_bboxes`` rule)."""
    xs, ys = _grid_starts(width, height, tile_width, tile_height, overlap)
    return [
        Tile(x0, y0, min(x0 + tile_width, width), min(y0 + tile_height, height)) for y0 in ys for x0 in xs
    ]


def _grid_starts(
    width: int, height: int, tile_width: int, tile_height: int, overlap: float
) -> tuple[list[int], list[int]]:
    """The tiles' start positions along x and along y (their product is the grid)."""
    step_x = tile_width - int(overlap * tile_width)
    step_y = tile_height - int(overlap * tile_height)
    return _starts(width, tile_width, step_x), _starts(height, tile_height, step_y)


def _starts(length: int, tile: int, step: int) -> list[int]:
    """Tile start positions along one side: every ``step``, the last one moved back to end at ``length``."""
    starts: list[int] = []
    start = 0
    while True:
        end = start + tile
        if end >= length:
            starts.append(max(0, length - tile))
            return starts
        starts.append(start)
        start = end - (tile - step)


def plan_tiles(
    size: tuple[int, int], network: tuple[int, int], tiling: Tiling, max_inputs: int, *, field: str
) -> list[Tile] | None:
    """The tiles of an image of ``size`` (width, height) for a network input of ``network`` (width,
    height), or None when it is not tiled. At most ``max_inputs`` network inputs (tiles, plus the whole
    image when ``tiling.full_image``).

    Raises `BadRequest` when the image is too thin to tile, `PayloadTooLarge` when a fixed tile size
    would make more inputs than ``max_inputs``.
    """
    width, height = size
    if tiling.mode == "off":
        return None
    if tiling.mode == "auto":
        scale = max(width / network[0], height / network[1])
        if scale <= tiling.auto_min_scale:
            return None
    if min(width, height) < MIN_TILE_SIDE:
        raise BadRequest(
            f"{field}: a {width}x{height} image cannot be tiled: both sides must be at least {MIN_TILE_SIDE} "
            "px (send tiling=off)",
            field=field,
        )
    extra = 1 if tiling.full_image else 0
    if tiling.mode == "fixed":
        assert tiling.tile_size is not None, "fixed tiling has a tile size"
        xs, ys = _grid_starts(width, height, *tiling.tile_size, tiling.overlap)
        count = len(xs) * len(ys)  # counted before any tile is made: a refusal costs nothing
        if count + extra > max_inputs:
            raise PayloadTooLarge(
                f"{field}: tiles of {tiling.tile_size[0]}x{tiling.tile_size[1]} cut the {width}x{height} "
                f"image into {count} tiles (+{extra} whole image); at most {max_inputs} network inputs "
                "fit this request (the tile budget: max_tiles_per_request): send larger tiles, or "
                "tiling=auto",
                field=field,
            )
        return slice_grid(width, height, *tiling.tile_size, tiling.overlap)
    if max_inputs - extra < 2:  # no room for two tiles: one tile would be the whole image
        return None
    return _auto_tiles(width, height, network, tiling.overlap, max_inputs - extra)


def _auto_tiles(width: int, height: int, network: tuple[int, int], overlap: float, budget: int) -> list[Tile]:
    """Network-sized tiles, grown by 25% at a time until at most ``budget`` (>= 2) cover the image."""
    factor = 1.0
    while True:
        tile_w = min(width, round(network[0] * factor))
        tile_h = min(height, round(network[1] * factor))
        tiles = slice_grid(width, height, tile_w, tile_h, overlap)
        if len(tiles) <= budget:
            return tiles
        factor *= _AUTO_GROWTH
