"""The SSD320 DALI pipeline on the CPU: TF's crop window and box handling, and the loader's batches."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch

from training.detectors.ssd300.dali import DaliSSDLoader
from training.detectors.ssd320.anchors import AnchorConfig, generate_anchors_xywh, generate_anchors_xyxy
from training.detectors.ssd320.dali import TF_RANDOM_CROP, tf_random_crop

pytest.importorskip("nvidia.dali", reason="DALI is in the train extra")

fn: Any = importlib.import_module("nvidia.dali.fn")
types: Any = importlib.import_module("nvidia.dali.types")
pipeline_def: Any = importlib.import_module("nvidia.dali").pipeline_def


def test_crop_window_and_boxes_follow_tf_random_crop_image() -> None:
    h, w, batch = 150, 240, 32
    ok, jpeg = cv2.imencode(".jpg", np.full((h, w, 3), 128, np.uint8))
    assert ok
    boxes = np.array([[0, 0, 30, 20], [100, 60, 160, 120], [225, 135, 240, 150]], np.float32) / [w, h, w, h]
    labels = np.array([1, 2, 3], np.int32)

    @pipeline_def(
        batch_size=batch, num_threads=1, device_id=None, seed=3, exec_pipelined=False, exec_async=False
    )
    def pipe() -> tuple[Any, ...]:
        jpegs = fn.external_source(name="jpegs", dtype=types.UINT8)
        in_boxes = fn.external_source(name="boxes", dtype=types.FLOAT)
        in_labels = fn.external_source(name="labels", dtype=types.INT32)
        return tf_random_crop(jpegs, in_boxes, in_labels)

    p = pipe()
    p.build()
    p.feed_input("jpegs", [jpeg.reshape(-1)] * batch)
    p.feed_input("boxes", [boxes.astype(np.float32)] * batch)
    p.feed_input("labels", [labels] * batch)
    begins, sizes, out_boxes, out_labels = (o.as_array() if o.is_dense_tensor() else o for o in p.run())
    dropped = 0
    for i in range(batch):
        (x0, y0), (cw, ch) = begins[i], sizes[i]
        assert 0.75 * h * w - (h + w) <= cw * ch <= h * w  # area 0.75-1 of the image (pixel rounding)
        assert 0.75 - 0.02 <= cw / ch <= 3.0 + 0.02 and 0 <= x0 <= w - cw and 0 <= y0 <= h - ch
        window = np.array([x0, y0, x0 + cw, y0 + ch], np.float32)
        pixels = boxes * [w, h, w, h]
        inside = (pixels[:, 0] < window[2]) & (pixels[:, 2] > window[0])
        inside &= (pixels[:, 1] < window[3]) & (pixels[:, 3] > window[1])
        dropped += int((~inside).sum())
        expected = (
            pixels[inside].clip(window[[0, 1, 0, 1]], window[[2, 3, 2, 3]]) - window[[0, 1, 0, 1]]
        ) / [
            cw,
            ch,
            cw,
            ch,
        ]
        np.testing.assert_allclose(np.asarray(out_boxes[i]).reshape(-1, 4), expected, atol=1e-4)
        np.testing.assert_array_equal(np.asarray(out_labels[i]).reshape(-1), labels[inside])
    assert dropped > 0


def test_loader_batches_match_the_ssd320_anchors(synthetic_root: Path) -> None:
    size = 64
    anchors = AnchorConfig(image_size=size)
    loader = DaliSSDLoader(
        synthetic_root,
        "train",
        batch_size=4,
        num_threads=1,
        seed=0,
        size=size,
        crop=TF_RANDOM_CROP,
        color_twist=False,
        anchors_xyxy=generate_anchors_xyxy(anchors),
    )
    images, boxes, labels = next(iter(loader))
    assert images.shape == (4, 3, size, size) and images.dtype == torch.float32
    assert boxes.shape == (4, anchors.num_anchors, 4) and labels.shape == (4, anchors.num_anchors)
    assert labels.dtype == torch.int64 and bool((labels > 0).any())
    unmatched = labels == 0  # the box encoder writes the anchor itself (centre form) where unmatched
    assert torch.allclose(
        boxes[unmatched], generate_anchors_xywh(anchors).expand(4, -1, -1)[unmatched], atol=1e-5
    )
