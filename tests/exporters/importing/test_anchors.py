"""MediaPipe's SSD anchors (``SsdAnchorsCalculator``) for the 300x300 SSD MobileNetV2 it ships."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from exporters.errors import ExportError
from exporters.importing.anchors import AnchorFile, MediaPipeSsdAnchors, load_anchors, mediapipe_ssd_anchors

SSD_300 = MediaPipeSsdAnchors(
    num_layers=6,
    min_scale=0.2,
    max_scale=0.95,
    input_size_height=300,
    input_size_width=300,
    strides=(16, 32, 64, 128, 256, 512),
    aspect_ratios=(1.0, 2.0, 0.5, 3.0, 0.3333),
    reduce_boxes_in_lowest_layer=True,
)


def test_the_ssd_mobilenet_anchor_set_has_1917_anchors_in_the_calculator_order() -> None:
    anchors = mediapipe_ssd_anchors(SSD_300)
    # 19x19x3 (the reduced lowest layer) + 10x10x6 + 5x5x6 + 3x3x6 + 2x2x6 + 1x1x6
    assert anchors.shape == (1083 + 600 + 150 + 54 + 24 + 6, 4)
    # The lowest layer: scale 0.1 at aspect 1, then 0.2 at aspects 2 and 0.5 (height: scale/sqrt(aspect)).
    first = anchors[:3]
    assert np.allclose(first[:, :2], 0.5 / 19)
    assert np.allclose(
        first[:, 2:],
        [[0.1, 0.1], [0.2 / math.sqrt(2), 0.2 * math.sqrt(2)], [0.2 / math.sqrt(0.5), 0.2 * math.sqrt(0.5)]],
    )
    # The last layer (1x1): five aspects at scale 0.95, then the interpolated scale sqrt(0.95 * 1.0).
    last = anchors[-6:]
    assert np.allclose(last[:, :2], 0.5)
    assert np.allclose(last[0, 2:], [0.95, 0.95]) and np.allclose(last[-1, 2:], math.sqrt(0.95))
    # Within a layer, rows then columns: the second location of the lowest layer is one column right.
    assert np.allclose(anchors[3, :2], [0.5 / 19, 1.5 / 19])


def test_strides_and_layers_must_agree() -> None:
    with pytest.raises(ExportError, match="6 layers but 5 strides"):
        mediapipe_ssd_anchors(SSD_300.model_copy(update={"strides": (16, 32, 64, 128, 256)}))


def test_an_anchor_file_must_be_a_by_4(tmp_path: Path) -> None:
    np.save(tmp_path / "bad.npy", np.zeros((10, 3), np.float32))
    with pytest.raises(ExportError, match=r"has shape \[10, 3\]; expected \[A, 4\]"):
        load_anchors(AnchorFile(path=Path("bad.npy")), tmp_path)
