"""EfficientDet augmentation: boxes follow the pixels (PyTorch and DALI), and no jitter is the letterbox.

The dataset is one red rectangle per image on grey, written as COCO JSON + PNG-quality JPEG, so every
augmented output can be checked by locating the red pixels and comparing them with the returned box.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from training.data.coco import CocoDetection
from training.data.letterbox import letterbox_geometry
from training.data.loader import LoaderRequest
from training.detectors.efficientdet.loaders import efficientdet_train_loader
from training.detectors.efficientdet.transforms import (
    EFFICIENTDET_PAD_VALUE,
    EfficientDetEvalTransform,
    EfficientDetTrainTransform,
    random_scale_crop,
)
from training.detectors.ssd300.transforms import IMAGENET_MEAN, IMAGENET_STD

SIZE = 96
IMAGES = [(120, 200, (30, 40, 110, 90)), (210, 90, (10, 100, 70, 180)), (150, 150, (60, 20, 140, 70))]


@pytest.fixture(scope="module")
def red_boxes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("red_boxes")
    (root / "train").mkdir()
    (root / "annotations").mkdir()
    images, annotations = [], []
    for i, (height, width, (x1, y1, x2, y2)) in enumerate(IMAGES, start=1):
        image = np.full((height, width, 3), 128, dtype=np.uint8)
        image[y1:y2, x1:x2] = (255, 0, 0)
        cv2.imwrite(str(root / "train" / f"{i}.jpg"), image[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 100])
        images.append({"id": i, "file_name": f"{i}.jpg", "height": height, "width": width})
        annotations.append(
            {
                "id": i,
                "image_id": i,
                "category_id": 7,
                "bbox": [x1, y1, x2 - x1, y2 - y1],
                "area": (x2 - x1) * (y2 - y1),
                "iscrowd": 0,
            }
        )
    categories = [{"id": 7, "name": "red"}]
    doc = {"images": images, "annotations": annotations, "categories": categories}
    (root / "annotations" / "instances_train.json").write_text(json.dumps(doc))
    return root


def red_extent(image_chw: torch.Tensor) -> tuple[float, float, float, float] | None:
    """x1, y1, x2, y2 (pixel edges) of the red pixels of a normalized CHW image, or None."""
    rgb = image_chw.permute(1, 2, 0).numpy() * (np.array(IMAGENET_STD) * 255) + np.array(IMAGENET_MEAN) * 255
    red = (rgb[..., 0] > 190) & (rgb[..., 1] < 90) & (rgb[..., 2] < 90)
    if not red.any():
        return None
    rows, cols = np.flatnonzero(red.any(axis=1)), np.flatnonzero(red.any(axis=0))
    return float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)


def assert_box_on_red(image: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor) -> None:
    extent = red_extent(image)
    kept = boxes[labels > 0]
    if extent is None or min(extent[2] - extent[0], extent[3] - extent[1]) < 3:
        return  # cropped away or a sliver: nothing meaningful to compare
    assert len(kept) == 1, (extent, boxes, labels)
    # Within two pixels: resampling blurs the edge by about one output pixel on each side.
    np.testing.assert_allclose(kept[0].numpy(), extent, atol=2.0)


def test_no_jitter_is_exactly_the_letterbox() -> None:
    for height, width, _ in IMAGES:
        crop = random_scale_crop(height, width, SIZE, factor=1.0, u_y=0.7, u_x=0.3)
        geometry = letterbox_geometry(height, width, SIZE, SIZE)
        assert (crop.scaled_h, crop.scaled_w) == (geometry.resized_height, geometry.resized_width)
        assert (crop.offset_y, crop.offset_x) == (0, 0)


def test_torch_train_transform_boxes_follow_the_pixels(red_boxes: Path) -> None:
    dataset = CocoDetection(red_boxes, "train", transforms=EfficientDetTrainTransform(SIZE, seed=3))
    seen_crop = seen_shrink = False
    for _ in range(8):
        for i in range(len(dataset)):
            image, target = dataset[i]
            assert image.shape == (3, SIZE, SIZE) and target["boxes"].dtype == torch.float32
            assert_box_on_red(image, target["boxes"], target["labels"])
            # The canvas beyond the pasted image holds the mean colour (normalizes to ~0).
            seen_shrink |= bool((image[:, -1, -1].abs() < 0.03).all())
            seen_crop |= bool(len(target["labels"]) == 0)
    assert seen_shrink


def test_eval_transform_letterboxes_with_the_mean(red_boxes: Path) -> None:
    dataset = CocoDetection(red_boxes, "train", transforms=EfficientDetEvalTransform(SIZE))
    image, target = dataset[1]  # 210 x 90: tall, so the right side is padding
    geometry = target["letterbox"]
    assert (geometry.resized_height, geometry.resized_width) == (96, 41)
    pad = (torch.tensor(EFFICIENTDET_PAD_VALUE) / 255.0 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(
        IMAGENET_STD
    )
    torch.testing.assert_close(image[:, :, 41:].mean(dim=(1, 2)), pad.float(), atol=1e-6, rtol=0)
    assert_box_on_red(image, target["boxes"], target["labels"])


def test_padded_batches(red_boxes: Path) -> None:
    loader = efficientdet_train_loader(
        LoaderRequest("torch", red_boxes, "train", batch_size=3, workers=0, seed=0), size=SIZE
    )
    images, boxes, labels = next(iter(loader))
    assert images.shape == (3, 3, SIZE, SIZE)
    assert boxes.shape[:2] == labels.shape and boxes.shape[2] == 4 and labels.dtype == torch.int64
    assert set(labels.unique().tolist()) <= {-1, 1}
    assert torch.all(boxes[labels < 0] == 0)


def test_dali_without_jitter_equals_the_torch_letterbox(red_boxes: Path) -> None:
    pytest.importorskip("nvidia.dali")
    from training.detectors.efficientdet.dali import DaliEfficientDetLoader

    loader = DaliEfficientDetLoader(red_boxes, "train", 3, size=SIZE, augment=False, shuffle=False)
    reference = CocoDetection(red_boxes, "train", transforms=EfficientDetEvalTransform(SIZE))
    images, boxes, labels = next(iter(loader))
    for i, image_id in enumerate(loader.last_image_ids):
        image, target = reference[reference.image_ids.index(image_id)]
        torch.testing.assert_close(boxes[i][labels[i] > 0], target["boxes"], atol=1e-4, rtol=0)
        # Different resamplers (DALI's antialiased linear vs OpenCV's area): close, not equal.
        assert (images[i] - image).abs().mean() < 0.05


def test_dali_train_pipeline_boxes_follow_the_pixels(red_boxes: Path) -> None:
    pytest.importorskip("nvidia.dali")
    loader = efficientdet_train_loader(
        LoaderRequest("dali", red_boxes, "train", batch_size=3, workers=1, seed=5), size=SIZE
    )
    for _, (images, boxes, labels) in zip(range(6), loader, strict=False):
        assert images.shape == (3, 3, SIZE, SIZE) and labels.dtype == torch.int64
        for i in range(3):
            assert_box_on_red(images[i], boxes[i], labels[i])
