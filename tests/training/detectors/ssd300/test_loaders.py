from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
import torch

from training.box_ops import xyxy_to_xywh
from training.data.coco import CocoDetection
from training.data.loader import LoaderRequest
from training.detectors.ssd300.default_boxes import default_boxes_xyxy
from training.detectors.ssd300.loaders import build_ssd_eval_loader, ssd_train_loader

KINDS: list[Literal["dali", "torch"]] = ["torch"]
try:
    import nvidia.dali  # noqa: F401

    KINDS.append("dali")
except ImportError:  # pragma: no cover - DALI is in the train extra
    pass


@pytest.mark.parametrize("kind", KINDS)
def test_train_loaders_share_one_contract(kind: Literal["dali", "torch"], synthetic_root: Path) -> None:
    loader = ssd_train_loader(LoaderRequest(kind, synthetic_root, "train", batch_size=3, workers=1, seed=0))
    assert len(loader) == 10 // 3
    default_xywh = xyxy_to_xywh(default_boxes_xyxy())
    loader.set_epoch(0)
    batches = list(loader)
    assert len(batches) == len(loader)
    for images, boxes, labels in batches:
        assert images.shape == (3, 3, 300, 300) and images.dtype == torch.float32
        assert boxes.shape == (3, 8732, 4) and boxes.dtype == torch.float32
        assert labels.shape == (3, 8732) and labels.dtype == torch.int64
        assert labels.min() >= 0 and labels.max() <= 6
        assert ((labels > 0).sum(dim=1) > 0).all()
        matched = boxes[labels > 0]
        assert (matched[:, 2:] > 0).all() and (matched[:, :2] >= 0).all() and (matched[:, :2] <= 1).all()
        unmatched = labels == 0
        torch.testing.assert_close(boxes[unmatched], default_xywh.expand(3, -1, -1)[unmatched])


def test_torch_loader_epochs_are_reproducible(synthetic_root: Path) -> None:
    """Worker processes, per-epoch seeds: the same epoch replays exactly, another epoch differs."""
    loader = ssd_train_loader(
        LoaderRequest("torch", synthetic_root, "train", batch_size=4, workers=2, seed=3)
    )

    def first_batch(epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        loader.set_epoch(epoch)
        images, boxes, _ = next(iter(loader))
        return images, boxes

    a, b, c = first_batch(1), first_batch(1), first_batch(2)
    torch.testing.assert_close(a, b)
    assert not torch.equal(a[0], c[0])


def test_torch_loader_shards_for_ddp(synthetic_root: Path) -> None:
    lengths, seen = [], []
    for rank in range(2):
        loader = ssd_train_loader(
            LoaderRequest(
                "torch", synthetic_root, "train", batch_size=2, workers=0, seed=0, rank=rank, world_size=2
            )
        )
        loader.set_epoch(0)
        lengths.append(len(loader))
        sampler = loader.sampler  # type: ignore[attr-defined]
        seen.append(set(sampler))
    assert lengths == [(10 // 2) // 2] * 2  # the same on every rank, as DALI's
    assert seen[0].isdisjoint(seen[1])


def test_bad_arguments(synthetic_root: Path) -> None:
    with pytest.raises(ValueError, match="unknown loader kind 'tf'"):
        ssd_train_loader(LoaderRequest("tf", synthetic_root, "train", 2, 0, 0))
    with pytest.raises(ValueError, match="rank 2"):
        ssd_train_loader(LoaderRequest("torch", synthetic_root, "train", 2, 0, 0, rank=2, world_size=2))


def test_eval_loader(synthetic_root: Path) -> None:
    loader = build_ssd_eval_loader(synthetic_root, "val", batch_size=3, workers=0)
    dataset = loader.dataset
    assert isinstance(dataset, CocoDetection)
    ids, sizes = [], []
    for images, image_ids, orig_sizes in loader:
        assert images.dtype == torch.float32 and images.shape[1:] == (3, 300, 300)
        assert len(image_ids) == len(orig_sizes) == images.shape[0]
        ids += image_ids
        sizes += orig_sizes
    assert ids == dataset.image_ids  # every image, in id order
    for image_id, (h, w) in zip(ids, sizes, strict=True):
        info = dataset.coco.imgs[image_id]
        assert (h, w) == (info["height"], info["width"])


@pytest.mark.parametrize("kind", KINDS)
def test_train_loaders_skip_crowd_and_empty_images(kind: Literal["dali", "torch"], coco2017: Path) -> None:
    """Real-COCO quirks: a crowd box, a degenerate box, a box sticking out of the image."""
    loader = ssd_train_loader(LoaderRequest(kind, coco2017, "train2017", batch_size=1, workers=0, seed=0))
    assert len(loader) == 1  # only image 9 has usable boxes
    for epoch in range(3):
        loader.set_epoch(epoch)
        ((_, _, labels),) = list(loader)
        # Labels 1 (person, clipped box) and 2 (toothbrush); the crowd box would cover every anchor.
        assert set(labels.unique().tolist()) <= {0, 1, 2}
        assert 0 < (labels > 0).sum() < 100
