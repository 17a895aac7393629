"""The DALI pipeline on the CPU (``device_id=None``): contract, and agreement with the PyTorch path."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch
from torch import Tensor

from training.box_ops import box_iou, xyxy_to_xywh
from training.data.coco import CocoDetection
from training.detectors.ssd300.dali import DaliSSDLoader
from training.detectors.ssd300.default_boxes import default_boxes_xyxy
from training.detectors.ssd300.targets import assign_targets
from training.detectors.ssd300.transforms import SSDEvalTransform, color_twist_matrix

pytest.importorskip("nvidia.dali", reason="DALI is in the train extra")

# Untyped on purpose: DALI's stubs model neither multi-output operators nor the DALIDataType aliases.
fn: Any = importlib.import_module("nvidia.dali.fn")
types: Any = importlib.import_module("nvidia.dali.types")
pipeline_def: Any = importlib.import_module("nvidia.dali").pipeline_def

DBOXES = default_boxes_xyxy()
NUM_ANCHORS = DBOXES.shape[0]


def _run_once(pipe_fn: Any, batch_size: int, inputs: dict[str, list[np.ndarray]]) -> tuple[Any, ...]:
    """Build a synchronous one-shot pipeline, feed its external sources, run it once."""
    pipe = pipe_fn(
        batch_size=batch_size,
        num_threads=1,
        device_id=None,
        prefetch_queue_depth=1,
        exec_pipelined=False,
        exec_async=False,
    )
    pipe.build()
    for name, data in inputs.items():
        pipe.feed_input(name, data)
    return tuple(pipe.run())


def assert_matches_assign_targets(
    boxes_xywh: Tensor, labels: Tensor, gt_xyxy: Tensor, gt_labels: Tensor
) -> None:
    """DALI's encoding equals :func:`assign_targets` except where a forced match had tied anchors.

    A ground truth whose best IoU is <= 0.5 is forced onto its best anchor. When several anchors tie
    for best (common: a box that contains several same-sized anchors), DALI takes the last and
    ``torch.argmax`` the first. Any disagreement must be confined to such tied anchors.
    """
    ref_boxes, ref_labels = assign_targets(gt_xyxy, gt_labels, DBOXES)
    differs = (labels != ref_labels) | ~torch.isclose(boxes_xywh, ref_boxes, atol=1e-5).all(dim=1)
    if not differs.any():
        return
    iou = box_iou(gt_xyxy, DBOXES)
    best = iou.max(dim=1, keepdim=True).values
    forced = (best <= 0.5) & (iou >= best - 1e-6)  # (M, A) anchors tied for a forced match
    tied = forced.any(dim=0)
    untied = (differs & ~tied).nonzero().flatten().tolist()
    assert not untied, f"{len(untied)} anchors differ without a tie, e.g. {untied[:5]}"
    assert differs.sum() <= 2 * gt_xyxy.shape[0]  # at most the two anchors of each tie-broken match


def test_box_encoder_agrees_with_assign_targets() -> None:
    rng = np.random.default_rng(0)
    batch = 24
    boxes, labels = [], []
    for _ in range(batch):
        m = int(rng.integers(1, 8))
        xy = rng.uniform(0, 0.8, (m, 2))
        wh = rng.uniform(0.02, 0.6, (m, 2))
        boxes.append(np.concatenate([xy, np.minimum(xy + wh, 1.0)], axis=1).astype(np.float32))
        labels.append(rng.integers(1, 7, m).astype(np.int32))

    @pipeline_def
    def encode() -> tuple[Any, Any]:
        b = fn.external_source(name="boxes")
        lab = fn.external_source(name="labels")
        return tuple(fn.box_encoder(b, lab, criteria=0.5, anchors=DBOXES.flatten().tolist()))

    enc_boxes, enc_labels = _run_once(encode, batch, {"boxes": boxes, "labels": labels})
    for i in range(batch):
        # Centre form (cx, cy, w, h), although box_encoder's docstring says ltrb.
        out_boxes = torch.from_numpy(np.array(enc_boxes[i]))
        out_labels = torch.from_numpy(np.array(enc_labels[i])).long()
        assert out_boxes.shape == (NUM_ANCHORS, 4) and out_labels.shape == (NUM_ANCHORS,)
        assert_matches_assign_targets(
            out_boxes,
            out_labels,
            torch.from_numpy(boxes[i]),
            torch.from_numpy(labels[i]).long(),
        )


def test_color_twist_matches_dali() -> None:
    image = np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    params = [(0.5, 1.3, 1.1, 0.7), (-0.4, 0.6, 0.9, 1.4), (25.0, 1.0, 1.0, 1.0), (0.0, 1.5, 0.875, 0.5)]

    @pipeline_def
    def twist() -> Any:
        x = fn.external_source(name="x", layout="HWC")
        hsv = fn.hsv(
            x, hue=fn.external_source(name="h"), saturation=fn.external_source(name="s"), dtype=types.FLOAT
        )
        return fn.brightness_contrast(
            hsv,
            brightness=fn.external_source(name="b"),
            contrast=fn.external_source(name="c"),
            contrast_center=128.0,
            dtype=types.UINT8,
        )

    inputs = {"x": [image] * len(params)}
    for k, name in enumerate("hsbc"):
        inputs[name] = [np.array(p[k], np.float32) for p in params]
    (out,) = _run_once(twist, len(params), inputs)
    for i, p in enumerate(params):
        ours = np.rint(np.clip(cv2.transform(image.astype(np.float32), color_twist_matrix(*p)), 0, 255))
        assert np.abs(ours - np.array(out[i]).astype(np.float32)).max() <= 1.0  # rounding only


def test_training_batches(synthetic_root: Path) -> None:
    loader = DaliSSDLoader(synthetic_root, "train", batch_size=4, num_threads=1, seed=0)
    assert len(loader) == 10 // 4  # every synthetic image has objects; the partial batch is dropped
    default_xywh = xyxy_to_xywh(DBOXES)
    for epoch in range(2):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert len(batches) == len(loader)
        for images, boxes, labels in batches:
            assert images.shape == (4, 3, 300, 300) and images.dtype == torch.float32
            assert boxes.shape == (4, NUM_ANCHORS, 4) and boxes.dtype == torch.float32
            assert labels.shape == (4, NUM_ANCHORS) and labels.dtype == torch.int64
            assert images.device.type == "cpu"
            assert images.min() > -2.2 and images.max() < 2.7  # ImageNet-normalized 0-1 pixels
            assert labels.min() >= 0 and labels.max() <= 6
            assert ((labels > 0).sum(dim=1) > 0).all()
            unmatched = labels == 0
            torch.testing.assert_close(boxes[unmatched], default_xywh.expand(4, -1, -1)[unmatched])


@pytest.fixture
def shuffled_categories_root(synthetic_root: Path, tmp_path: Path) -> Path:
    """The synthetic train split with its categories listed in a scrambled order."""
    data = json.loads((synthetic_root / "annotations" / "instances_train.json").read_text())
    data["categories"] = [data["categories"][i] for i in (3, 0, 5, 1, 4, 2)]
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "instances_shuffled.json").write_text(json.dumps(data))
    (tmp_path / "shuffled").symlink_to(synthetic_root / "train")
    return tmp_path


def test_unaugmented_pipeline_matches_pytorch_path(shuffled_categories_root: Path) -> None:
    """Same labels (DALI's 1..C = LabelMap's), same encoded boxes, nearly the same pixels."""
    root, split = shuffled_categories_root, "shuffled"
    dataset = CocoDetection(root, split, transforms=SSDEvalTransform(300))
    assert dataset.label_map.coco_ids == (17, 2, 42, 5, 23, 11)
    loader = DaliSSDLoader(root, split, batch_size=5, num_threads=1, seed=0, augment=False, shuffle=False)
    seen = []
    for images, boxes, labels in loader:
        for i, image_id in enumerate(loader.last_image_ids):
            ref_image, target = dataset[dataset.image_ids.index(image_id)]
            assert_matches_assign_targets(boxes[i], labels[i], target["boxes"], target["labels"])
            assert set(labels[i].unique().tolist()) - {0} == set(target["labels"].tolist())
            # DALI's antialiased resize and OpenCV's differ slightly at edges, not on average.
            assert (images[i] - ref_image).abs().mean() < 0.05
            seen.append(image_id)
    assert seen == dataset.image_ids


def test_shards_split_the_data(synthetic_root: Path) -> None:
    ids = []
    for shard in range(2):
        loader = DaliSSDLoader(
            synthetic_root,
            "train",
            batch_size=2,
            num_threads=1,
            shard_id=shard,
            num_shards=2,
            augment=False,
            shuffle=False,
        )
        assert len(loader) == (10 // 2) // 2
        shard_ids: list[int] = []
        for _ in loader:
            shard_ids += loader.last_image_ids
        ids.append(set(shard_ids))
    assert ids[0].isdisjoint(ids[1]) and len(ids[0]) == len(ids[1]) == 4


def test_bad_shard_is_rejected(synthetic_root: Path) -> None:
    with pytest.raises(ValueError, match="shard_id 2"):
        DaliSSDLoader(synthetic_root, "train", batch_size=2, shard_id=2, num_shards=2)


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs an NVIDIA GPU (mixed decoder, GPU operators)"
)
def test_gpu_pipeline(synthetic_root: Path) -> None:
    loader = DaliSSDLoader(synthetic_root, "train", batch_size=2, num_threads=2, seed=0, device_id=0)
    images, boxes, labels = next(iter(loader))
    assert images.device.type == boxes.device.type == labels.device.type == "cuda"
    assert images.shape == (2, 3, 300, 300) and boxes.shape == (2, NUM_ANCHORS, 4)
