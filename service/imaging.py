"""Resize decoded images to the network input, remembering how to map boxes back to original pixels.

Images are RGB ``uint8 [H, W, 3]`` throughout (`service.decoding` decodes them, EXIF orientation
applied), so "original image pixels" means the image as a viewer shows it. Resizing follows the
manifest's ``input.resize`` (``stretch`` or ``letterbox``) through `service.geometry`, the module training
and the exporters resize with too; `BoxTransform` undoes either one.
"""

from __future__ import annotations

import numpy as np

from service.geometry import (
    BoxTransform,
    letterbox_geometry,
    letterbox_resize,
    resize_to_input,
    stretch_resize,
)
from service.manifest import InputSpec

__all__ = ["BoxTransform", "letterbox_resize", "network_content_size", "resize_for_network", "stretch_resize"]


def resize_for_network(
    image: np.ndarray, spec: InputSpec, original_size: tuple[int, int] | None = None
) -> tuple[np.ndarray, BoxTransform]:
    """Resize an RGB image the way the manifest's input spec says (the graph adapts colour/layout itself)."""
    return resize_to_input(image, spec.resize, spec.width, spec.height, spec.pad_value, original_size)


def network_content_size(spec: InputSpec, original_size: tuple[int, int]) -> tuple[int, int]:
    """(width, height) the image content occupies in the network input (letterbox: the pasted part)."""
    if spec.resize != "letterbox":
        return spec.width, spec.height
    width, height = original_size
    geometry = letterbox_geometry(height, width, spec.height, spec.width)
    return geometry.resized_width, geometry.resized_height
