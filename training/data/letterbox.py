"""Letterbox resizing for training and evaluation: `contract.geometry`'s, the geometry the service serves.

An original ``h x w`` image is scaled by ``s = min(W / w, H / h)`` to ``round(w * s) x round(h * s)``,
pasted at the top-left corner of an ``H x W`` canvas, and the rest filled with ``pad_value``
(:func:`mean_pad_value`: the normalization mean, so padding normalizes to ~0). A :class:`Letterbox` maps
boxes normalized to the network input back to original pixels exactly as the service does.
"""

from __future__ import annotations

from contract.geometry import BoxTransform, letterbox_geometry, letterbox_resize

__all__ = ["Letterbox", "letterbox_geometry", "letterbox_resize", "mean_pad_value"]

# Where an original image sits in the letterboxed network input (pixels, top-left aligned).
Letterbox = BoxTransform


def mean_pad_value(mean: tuple[float, float, float]) -> tuple[int, int, int]:
    """The canvas fill as uint8: the normalization mean (0-1) times 255, rounded (normalizes to ~0)."""
    r, g, b = (round(255.0 * m) for m in mean)
    return r, g, b
