"""Tiling on a shipped model and a large synthetic scene: small objects the whole-image pass cannot see
are found in tiles, in original pixels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from service_testkit import encode, make_settings, start_client

from service.app import create_app
from training.data.synthetic import render_sample
from training.data.synthetic_scene import LARGE_SCENES

MODELS = Path(__file__).resolve().parents[2] / "models"
MODEL = "efficientdet-d0-synth-int8"


def _recall(truth: list[tuple[int, int, int, int]], boxes: np.ndarray, iou: float = 0.5) -> float:
    found = 0
    for x0, y0, x1, y1 in truth:
        ix = np.clip(np.minimum(boxes[:, 2], x1) - np.maximum(boxes[:, 0], x0), 0, None)
        iy = np.clip(np.minimum(boxes[:, 3], y1) - np.maximum(boxes[:, 1], y0), 0, None)
        inter = ix * iy
        union = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) + (x1 - x0) * (y1 - y0) - inter
        found += bool(len(boxes)) and bool((inter / union).max() >= iou)
    return found / len(truth)


@pytest.mark.slow
def test_tiles_find_the_small_objects_the_whole_image_misses(tmp_path: Path) -> None:
    (tmp_path / MODEL).symlink_to(MODELS / MODEL)
    image, objects = render_sample(np.random.default_rng([5, 1, 0]), LARGE_SCENES)
    truth = []
    for obj in objects:  # the visible extent of each shape, in pixels
        rows, cols = np.nonzero(obj.visible)
        x0, y0 = obj.box[:2]
        truth.append((x0 + cols.min(), y0 + rows.min(), x0 + cols.max() + 1, y0 + rows.max() + 1))
    settings = make_settings(tmp_path, max_images_per_request=512, max_queue_size=512)
    client = start_client(create_app(settings))
    recall = {}
    try:
        for tiling in ("off", "256x256"):
            response = client.post(
                "/detect",
                params={"tiling": tiling, "score_threshold": 0.3},
                content=encode(image, ".png"),
                headers={"content-type": "image/png"},
            )
            assert response.status_code == 200, response.text
            body = response.json()
            assert (body["width"], body["height"]) == (image.shape[1], image.shape[0])
            boxes = np.array([[d["box"][k] for k in ("x1", "y1", "x2", "y2")] for d in body["detections"]])
            recall[tiling] = _recall(truth, boxes.reshape(-1, 4))
    finally:
        client.__exit__(None, None, None)
    assert len(truth) >= 20
    assert recall["off"] < 0.2 and recall["256x256"] > 0.7, recall
