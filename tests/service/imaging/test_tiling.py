"""The tile grid (against SAHI's own slicing on the same sizes), tiling parameters and the plan's limits."""

from __future__ import annotations

import numpy as np
import pytest
from sahi.slicing import get_slice_bboxes

from service.errors import BadRequest, PayloadTooLarge
from service.imaging import tiling
from service.imaging.tiling import (
    MAX_TILE_SIDE,
    Tiling,
    check_overlap,
    parse_tiling,
    plan_tiles,
    slice_grid,
)

SIZES = [(4000, 3000), (3038, 2664), (640, 480), (256, 256), (257, 1000), (100, 50), (5000, 300)]


@pytest.mark.parametrize("width, height", SIZES)
@pytest.mark.parametrize("tile", [(256, 256), (512, 384), (300, 300), (1000, 1000)])
@pytest.mark.parametrize("overlap", [0.0, 0.1, 0.2, 0.35, 0.75])
def test_grid_is_sahis(width: int, height: int, tile: tuple[int, int], overlap: float) -> None:
    theirs = get_slice_bboxes(height, width, tile[1], tile[0], False, overlap, overlap)
    ours = [[t.x0, t.y0, t.x1, t.y1] for t in slice_grid(width, height, *tile, overlap)]
    assert ours == theirs


@pytest.mark.parametrize("width, height", SIZES)
def test_grid_covers_every_pixel_with_whole_tiles(width: int, height: int) -> None:
    covered = np.zeros((height, width), dtype=bool)
    for t in slice_grid(width, height, 256, 256, 0.2):
        assert t.width == min(256, width) and t.height == min(256, height)
        covered[t.y0 : t.y1, t.x0 : t.x1] = True
    assert covered.all()


def test_parse_tiling() -> None:
    assert parse_tiling("off") == ("off", None)
    assert parse_tiling("auto") == ("auto", None)
    assert parse_tiling("512x384") == ("fixed", (512, 384))


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("1x1", "tile sides must be 32..8192"),
        ("100000x100000", "tile sides must be 32..8192"),
        (f"{MAX_TILE_SIDE + 1}x64", "tile sides must be"),
        ("big", "expected off, auto or a tile size"),
        ("512", "expected off, auto or a tile size"),
        ("-5x5", "expected off, auto or a tile size"),
        (" auto", "expected off, auto or a tile size"),  # as the API's pattern says: nothing else
        ("512X512", "expected off, auto or a tile size"),
        ("512x512\n", "expected off, auto or a tile size"),
    ],
)
def test_bad_tiling_names_the_field(spec: str, fragment: str) -> None:
    with pytest.raises(BadRequest, match=fragment) as caught:
        parse_tiling(spec)
    assert caught.value.field == "tiling"


@pytest.mark.parametrize("overlap", [1.0, 0.76, -0.1, float("nan")])
def test_overlap_must_let_tiles_advance(overlap: float) -> None:
    with pytest.raises(BadRequest, match="fraction of the tile side") as caught:
        check_overlap(overlap)
    assert caught.value.field == "tile_overlap"


def test_auto_leaves_images_near_the_network_size_alone() -> None:
    auto = Tiling(mode="auto", auto_min_scale=2.0)
    assert plan_tiles((512, 512), (256, 256), auto, 64, field="t") is None
    assert plan_tiles((640, 300), (320, 320), auto, 64, field="t") is None
    assert plan_tiles((513, 100), (256, 256), auto, 64, field="t") is not None
    assert plan_tiles((4000, 3000), (256, 256), Tiling(), 64, field="t") is None  # off


@pytest.mark.parametrize("max_inputs", [5, 16, 64, 256])
def test_auto_grows_tiles_until_they_fit(max_inputs: int) -> None:
    tiles = plan_tiles((4000, 3000), (256, 256), Tiling(mode="auto"), max_inputs, field="t")
    assert tiles is not None and len(tiles) + 1 <= max_inputs  # + the whole image
    assert tiles[0].width >= 256 and tiles[0].width == tiles[0].height
    finer = plan_tiles((4000, 3000), (256, 256), Tiling(mode="auto"), max_inputs * 4, field="t")
    assert finer is not None and finer[0].width < tiles[0].width


def test_fixed_tiles_over_the_limit_are_refused_before_any_work() -> None:
    fixed = Tiling(mode="fixed", tile_size=(256, 256))
    with pytest.raises(PayloadTooLarge, match=r"into 300 tiles \(\+1 whole image\); at most 64") as caught:
        plan_tiles((4000, 3000), (256, 256), fixed, 64, field="images[0]: tiling")
    assert caught.value.field == "images[0]: tiling"
    tiles = plan_tiles((4000, 3000), (256, 256), fixed, 301, field="t")
    assert tiles is not None and len(tiles) == 300


@pytest.mark.parametrize("size", [(1, 100_000), (100_000, 1), (20, 5000)])
def test_a_strip_is_too_thin_to_tile(size: tuple[int, int]) -> None:
    with pytest.raises(BadRequest, match="cannot be tiled: both sides must be at least 32"):
        plan_tiles(size, (256, 256), Tiling(mode="auto"), 64, field="t")


def test_a_huge_grid_is_refused_from_its_count_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # 620,944 tiles of 32 px at 75% overlap on a 40 Mpx image: counted per axis, never built.
    def refuse(*args: object) -> None:
        raise AssertionError("the grid was built before the refusal")

    monkeypatch.setattr(tiling, "slice_grid", refuse)
    huge = Tiling(mode="fixed", tile_size=(32, 32), overlap=0.75)
    with pytest.raises(PayloadTooLarge, match="into 620944 tiles"):
        plan_tiles((6324, 6324), (256, 256), huge, 16, field="tiling")
