"""A request's tiling, from its parameters over the model's default over the server's settings."""

from __future__ import annotations

from service.imaging.merging import MergeRule
from service.imaging.tiling import Tiling, check_overlap, parse_tiling
from service.settings import Settings


def tiling_options(
    settings: Settings,
    model_tiling: str | None,
    tiling: str | None,
    overlap: float | None,
    *,
    field: str = "tiling",
    overlap_field: str = "tile_overlap",
) -> Tiling:
    """The `Tiling` of a request that asked for ``tiling`` and ``overlap`` (None: the model's default
    ``model_tiling``, `ModelServing.tiling`, else the server's). Raises `BadRequest` naming the field."""
    default = settings.tiling if model_tiling is None else model_tiling
    spec = default if tiling is None else tiling  # an empty value is a bad value, not "the default"
    mode, size = parse_tiling(spec, field=field)
    return Tiling(
        mode=mode,
        tile_size=size,
        overlap=check_overlap(settings.tiling_overlap if overlap is None else overlap, field=overlap_field),
        full_image=settings.tiling_full_image,
        auto_min_scale=settings.tiling_auto_min_scale,
        merge=MergeRule(settings.tiling_merge, settings.tiling_match_metric, settings.tiling_match_threshold),
    )
