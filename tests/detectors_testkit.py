"""Fabricated checkpoints of every registered architecture, shared by the training, exporters and service
tests (imported as ``detectors_testkit``: pyproject puts tests/ on sys.path). ``FABRICATED`` maps each
model name of ``training.detectors.registry`` to its maker ``(path) -> path``.

SSD300: a ResNet-18 with 3 classes and random weights. Its class-head weights are scaled down so the
softmax scores spread over (0, 1) instead of piling up near 1: every class then passes the 0.05
threshold at thousands of anchors (so the per-class top-k, NMS and the cut at K are all exercised) and
scores are distinct enough to compare row by row.

EfficientDet-D0: 128x128 input, 3 classes with the synthetic generator's COCO ids, random weights whose
heads are rescaled so the scores spread over (0, 1) (a freshly initialised head scores every anchor
~0.01): about a tenth of the candidates pass 0.05, so the pre-NMS top-k, class-aware NMS and the cut at K
all work.
The checkpoint carries different raw and EMA weights, so a test can tell which ones an export used.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch

from training.checkpoint import Checkpoint, save_checkpoint
from training.detectors.efficientdet.model import EfficientDetD0
from training.detectors.ssd300.model import SSD300
from training.detectors.ssd320.model import SSD320

# COCO ids of the synthetic generator's first three categories, so --data runs work on it.
CATEGORIES = [{"id": 2, "name": "circle"}, {"id": 5, "name": "square"}, {"id": 11, "name": "triangle"}]
CHECKPOINT_METRICS = {"bbox": {"AP": 0.125, "AP50": 0.25}, "split": "val", "epoch": 3}


def make_checkpoint(path: Path, seed: int = 0, conf_scale: float = 0.3) -> Path:
    torch.manual_seed(seed)
    model = SSD300(num_classes=len(CATEGORIES), backbone="resnet18").eval()
    with torch.no_grad():
        for head in model.conf:
            head.weight.mul_(conf_scale)
    ckpt = Checkpoint(
        model_name="ssd300",
        model_args={"num_classes": len(CATEGORIES), "backbone": "resnet18"},
        categories=CATEGORIES,
        model=model.state_dict(),
        config={"lr": 0.01, "note": "exporters test checkpoint"},
        epoch=3,
        iteration=42,
        metrics=CHECKPOINT_METRICS,
    )
    return save_checkpoint(ckpt, path)


EFFICIENTDET_ARGS = {"num_classes": 3, "backbone": "tf_efficientnet_b0", "image_size": 128}


def _flat(maps: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([m.permute(0, 2, 3, 1).reshape(-1) for m in maps])


def calibration_images(seed: int) -> torch.Tensor:
    """The images the exporters' checks feed (a synthetic scene, noise, a gradient; generated_batches'
    defaults), letterboxed to 128 and normalized."""
    from exporters.evaluation.verify import generated_batches
    from training.data.letterbox import letterbox_resize
    from training.detectors.efficientdet.transforms import EFFICIENTDET_PAD_VALUE
    from training.detectors.ssd300.transforms import normalize_to_tensor

    def resize(image: np.ndarray) -> np.ndarray:
        return letterbox_resize(image, 128, 128, EFFICIENTDET_PAD_VALUE)[0]

    return torch.stack(
        [normalize_to_tensor(image) for batch in generated_batches(resize, seed=seed) for image in batch]
    )


@torch.no_grad()
def spread_heads(model: EfficientDetD0, seed: int = 0) -> None:
    """Calibrate BatchNorm statistics on the checks' images (so activations have unit scale, as in a
    trained network, rather than the ~1e-4 of a fresh one, which FP16 could not represent faithfully),
    then rescale the prediction layers so that on the checks' images class logits ~ N(-5.5, 1.5^2) and
    box codes ~ N(0, 0.3^2): scaled by the median image, since a random network responds to each of
    these images on its own scale (one of them far more strongly than the others)."""
    images = calibration_images(seed)
    batchnorms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for bn in batchnorms:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration passes
    model.train()
    model(images)
    model.eval()
    cls, box = model.class_net.predict.conv_pw, model.box_net.predict.conv_pw
    per_image = [model(image[None]) for image in images]
    cls.weight.mul_(1.5 / torch.stack([_flat(c).std() for c, _ in per_image]).median())
    box.weight.mul_(0.3 / torch.stack([_flat(b).std() for _, b in per_image]).median())
    box.bias.zero_()
    cls.bias.add_(-5.5 - torch.stack([_flat(model(image[None])[0]).mean() for image in images]).median())


def make_efficientdet_checkpoint(path: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    raw = EfficientDetD0(**EFFICIENTDET_ARGS).eval()  # type: ignore[arg-type]
    spread_heads(raw, seed)
    ema = EfficientDetD0(**EFFICIENTDET_ARGS).eval()  # type: ignore[arg-type]
    ema.load_state_dict(raw.state_dict())
    with torch.no_grad():  # an "average" that differs visibly but only in the prediction layers
        ema.class_net.predict.conv_pw.bias.add_(0.2)
        ema.box_net.predict.conv_pw.bias.add_(0.05)
    ckpt = Checkpoint(
        model_name="efficientdet-d0",
        model_args=dict(EFFICIENTDET_ARGS),
        categories=CATEGORIES,
        model=raw.state_dict(),
        model_ema=ema.state_dict(),
        config={"note": "exporters test checkpoint", "ema_decay": 0.9998},
        epoch=2,
        iteration=10,
    )
    return save_checkpoint(ckpt, path)


def make_ssd320_checkpoint(path: Path, image_size: int = 96, seed: int = 0) -> Path:
    """A ResNet-18 SSD320 with 3 classes at ``image_size`` and random weights, its sigmoid scores spread
    over (0, 1) (class-predictor weights scaled up, bias -1) so classes, top-k and NMS all decide."""
    torch.manual_seed(seed)
    args = {
        "num_classes": len(CATEGORIES),
        "backbone": "resnet18",
        "image_size": image_size,
        "freeze_bn": False,
    }
    model = SSD320(**args).eval()
    with torch.no_grad():
        model.head.class_predictor.weight.mul_(40.0)
        model.head.class_predictor.bias.fill_(-1.0)
        model.head.box_predictor.weight.mul_(10.0)
    ckpt = Checkpoint(
        model_name="ssd320",
        model_args=args,
        categories=CATEGORIES,
        model=model.state_dict(),
        config={"note": "ssd320 exporters test checkpoint"},
        epoch=1,
        iteration=7,
    )
    return save_checkpoint(ckpt, path)


MASKRCNN_SIZE = 96
MASKRCNN_ARGS = {
    "num_classes": len(CATEGORIES),
    "backbone": "resnet18",
    "image_size": MASKRCNN_SIZE,
    "rpn_pre_nms_top_n_test": 150,
    "rpn_post_nms_top_n_test": 40,
    "box_detections_per_img": 20,
}


def make_maskrcnn_checkpoint(path: Path, model_name: str = "maskrcnn_resnet50_fpn") -> Path:
    """torchvision's Mask R-CNN on a ResNet-18 FPN at 96x96 with random weights: mask logits scaled up so
    every mask saturates into a clear shape, class logits scaled down so scores spread over (0.05, 1).
    The v2 build exists on ResNet-50 only."""
    from training.detectors.registry import build_model

    torch.manual_seed(0)
    args = (
        MASKRCNN_ARGS if model_name == "maskrcnn_resnet50_fpn" else {**MASKRCNN_ARGS, "backbone": "resnet50"}
    )
    model = build_model(model_name, **args).eval()
    with torch.no_grad():
        model.roi_heads.mask_predictor.mask_fcn_logits.weight.mul_(30.0)
        model.roi_heads.box_predictor.cls_score.weight.mul_(0.3)
    ckpt = Checkpoint(model_name, args, CATEGORIES, model.state_dict(), epoch=1)
    return save_checkpoint(ckpt, path)


FABRICATED: dict[str, Callable[[Path], Path]] = {
    "ssd300": make_checkpoint,
    "ssd320": make_ssd320_checkpoint,
    "efficientdet-d0": make_efficientdet_checkpoint,
    "maskrcnn_resnet50_fpn": make_maskrcnn_checkpoint,
    "maskrcnn_resnet50_fpn_v2": partial(make_maskrcnn_checkpoint, model_name="maskrcnn_resnet50_fpn_v2"),
}
