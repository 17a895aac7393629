"""torchvision's published Mask R-CNN weight files as this project's checkpoints.

torchvision publishes plain state dicts (``maskrcnn_resnet50_fpn_coco-bf2d0c1e.pth``,
``maskrcnn_resnet50_fpn_v2_coco-73cbd019.pth``); its reference training scripts save
``{"model": state_dict, ...}``. Either loads as a checkpoint of the matching builder in
``training.detectors.maskrcnn.model`` with the weights unchanged (strictly: no key added or dropped):

- v1 or v2 from the box head's keys (``fc6`` vs a conv stack);
- v1's norm from its BatchNorm buffers: without ``num_batches_tracked`` the backbone used
  FrozenBatchNorm2d, and torchvision's COCO v1 weights were trained with its eps at 0.0;
- classes from the box predictor: torchvision's COCO models predict 91 = background + COCO ids 1..90,
  so label i is COCO category id i and the ten ids COCO 2017 does not use are named ``N/A``; other
  class counts get ids 1..C named ``class_<i>``.

The network input size is not in a state dict: :data:`DEFAULT_IMAGE_SIZE` letterboxes a 4:3 COCO image
to 1088 x 816, within 2% of torchvision's own resize (short side 800, long side <= 1333).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from training.checkpoint import Checkpoint
from training.data.coco_categories import COCO_2017_CATEGORIES

DEFAULT_IMAGE_SIZE = 1088
COCO91_CLASSES = 90  # torchvision's COCO heads: 91 outputs, background + COCO ids 1..90
PLACEHOLDER_NAME = "N/A"  # torchvision's name for COCO ids without a category
_MASK_LOGITS = "roi_heads.mask_predictor.mask_fcn_logits.weight"
_CLS_SCORE = "roi_heads.box_predictor.cls_score.weight"


def strip_module_prefix(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {k.removeprefix("module."): v for k, v in state.items()}


def is_torchvision_maskrcnn(state: Mapping[str, Any]) -> bool:
    keys = {str(k).removeprefix("module.") for k in state}
    return _MASK_LOGITS in keys and _CLS_SCORE in keys and "backbone.body.conv1.weight" in keys


def _resnet_depth(state: Mapping[str, Tensor]) -> str:
    layer3 = {k.split(".")[3] for k in state if k.startswith("backbone.body.layer3.")}
    bottleneck = "backbone.body.layer1.0.conv3.weight" in state
    by_depth = {(False, 2): "resnet18", (False, 6): "resnet34", (True, 6): "resnet50"}
    try:
        return by_depth[(bottleneck, len(layer3))]
    except KeyError:
        raise ValueError(f"unrecognised Mask R-CNN backbone: layer3 has {len(layer3)} blocks") from None


def coco91_categories(num_classes: int) -> list[dict[str, Any]]:
    """Categories of a model whose label i is COCO category id i (torchvision's COCO label space)."""
    names = dict(COCO_2017_CATEGORIES)
    return [{"id": i, "name": names.get(i, PLACEHOLDER_NAME)} for i in range(1, num_classes + 1)]


def checkpoint_fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``model_name``, ``model_args``, ``categories``, ``model`` of a torchvision Mask R-CNN file.

    ``raw`` is what ``torch.load`` returned: a state dict, or a dict with the state dict under "model".
    Raises ValueError if it is not one.
    """
    nested = raw.get("model")
    state = strip_module_prefix(nested if isinstance(nested, Mapping) else raw)
    if not is_torchvision_maskrcnn(state):
        raise ValueError("not a torchvision Mask R-CNN state dict")
    num_classes = int(state[_CLS_SCORE].shape[0]) - 1
    v2 = "roi_heads.box_head.0.0.weight" in state
    model_args: dict[str, Any] = {
        "num_classes": num_classes,
        "backbone": _resnet_depth(state),
        "image_size": DEFAULT_IMAGE_SIZE,
    }
    if not v2 and "backbone.body.bn1.num_batches_tracked" not in state:
        model_args |= {"norm": "frozen", "norm_eps": 0.0}
    categories = (
        coco91_categories(num_classes)
        if num_classes == COCO91_CLASSES
        else [{"id": i, "name": f"class_{i}"} for i in range(1, num_classes + 1)]
    )
    return {
        "model_name": "maskrcnn_resnet50_fpn_v2" if v2 else "maskrcnn_resnet50_fpn",
        "model_args": model_args,
        "categories": categories,
        "model": state,
    }


def torchvision_maskrcnn_checkpoint(raw: dict[str, Any], path: Path) -> Checkpoint | None:
    """torchvision's Mask R-CNN file in ``raw`` as a ``maskrcnn_resnet50_fpn[_v2]`` checkpoint, or None."""
    nested = raw.get("model")
    if not is_torchvision_maskrcnn(nested if isinstance(nested, dict) else raw):
        return None
    return Checkpoint(**checkpoint_fields(raw), source="torchvision-maskrcnn")
