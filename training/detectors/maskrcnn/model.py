"""Mask R-CNN with a ResNet-FPN backbone: torchvision's ``maskrcnn_resnet50_fpn`` (v1) and ``_v2`` builds.

The modules are torchvision's own (``torchvision.models.detection.MaskRCNN``), built without downloading
anything, so torchvision's published COCO weight files load into them as they are (see ``weights``).

Tensor contract (torchvision's, with this project's conventions):

- ``num_classes`` counts object classes only; the heads predict ``num_classes + 1`` (0 = background),
  so labels are the contiguous labels 1..C of ``training.data.labels``.
- The network input is fixed: ``image_size x image_size``, images letterboxed into it (scale the long
  side to ``image_size``, paste top-left, pad with :data:`PAD_VALUE`, the ImageNet mean) by the data
  pipelines, the exporters and the service alike. The model's own transform is configured to match
  (``min_size = max_size = image_size``) and does not resize in training mode (``_skip_resize``): the
  training pipeline resizes itself, with scale jitter.
- Training: ``model(images, targets)``, ``images`` a list of float ``[3, h, w]`` RGB in 0-1 (h, w <=
  the jittered size), ``targets`` a list of ``{"boxes": float [M, 4] x1y1x2y2 pixels, "labels": int64
  [M], "masks": uint8 [M, h, w]}``; returns the five torchvision losses.
- Inference: :func:`detect` on ImageNet-normalized ``[B, 3, S, S]`` network inputs returns per image
  ``boxes`` [K, 4] pixels of the network input, ``labels`` [K] 1..C, ``scores`` [K] and ``masks``
  [K, 1, 28, 28] probabilities in each box's frame (not pasted: pasting is done in original-image
  coordinates, by the evaluator or the service).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn
from torchvision.models import resnet18, resnet34, resnet50
from torchvision.models.detection import MaskRCNN
from torchvision.models.detection import mask_rcnn as tv_mask_rcnn
from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.mask_rcnn import MaskRCNNPredictor
from torchvision.ops import misc as misc_nn_ops

from training.data.imagenet import IMAGENET_MEAN, IMAGENET_STD
from training.data.letterbox import mean_pad_value

# The letterbox fill: the ImageNet mean in 0-255, so padding normalizes to ~0 like torchvision's batch
# padding (which pads the normalized image with zeros).
PAD_VALUE = mean_pad_value(IMAGENET_MEAN)

# torchvision MaskRCNN / FasterRCNN keyword arguments a checkpoint may set (plain values only).
DETECTOR_OPTIONS = frozenset(
    {
        "rpn_pre_nms_top_n_train",
        "rpn_pre_nms_top_n_test",
        "rpn_post_nms_top_n_train",
        "rpn_post_nms_top_n_test",
        "rpn_nms_thresh",
        "rpn_fg_iou_thresh",
        "rpn_bg_iou_thresh",
        "rpn_batch_size_per_image",
        "rpn_positive_fraction",
        "rpn_score_thresh",
        "box_score_thresh",
        "box_nms_thresh",
        "box_detections_per_img",
        "box_fg_iou_thresh",
        "box_bg_iou_thresh",
        "box_batch_size_per_image",
        "box_positive_fraction",
    }
)
_RESNETS = {"resnet18": resnet18, "resnet34": resnet34, "resnet50": resnet50}
Norm = Literal["batch", "frozen"]


def _check_common(num_classes: int, image_size: int, options: dict[str, Any]) -> None:
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if image_size < 32 or image_size % 32:
        raise ValueError(f"image_size must be a positive multiple of 32 (FPN strides), got {image_size}")
    unknown = sorted(set(options) - DETECTOR_OPTIONS)
    if unknown:
        raise ValueError(f"unknown Mask R-CNN options {unknown}; allowed: {sorted(DETECTOR_OPTIONS)}")


def _transform_args(image_size: int) -> dict[str, Any]:
    return {
        "min_size": image_size,
        "max_size": image_size,
        "image_mean": list(IMAGENET_MEAN),
        "image_std": list(IMAGENET_STD),
        "_skip_resize": True,  # training mode only: the data pipeline resizes (with scale jitter)
    }


def maskrcnn_resnet50_fpn(
    num_classes: int = 90,
    backbone: str = "resnet50",
    image_size: int = 1088,
    norm: Norm = "batch",
    norm_eps: float = 1e-5,
    trainable_backbone_layers: int | None = None,
    backbone_weights: str | None = None,
    box_representation_size: int = 1024,
    **options: Any,
) -> MaskRCNN:
    """torchvision's ``maskrcnn_resnet50_fpn`` (v1: no norm in FPN and heads), weights never downloaded.

    Args:
        num_classes: object classes (background excluded).
        backbone: ``resnet50`` (the architecture); ``resnet18``/``resnet34`` build the same detector on a
            smaller ResNet (torchvision's ``_resnet_fpn_extractor``), for fast tests.
        image_size: side of the square network input (multiple of 32).
        norm: ``batch`` (BatchNorm2d, trainable: training from scratch) or ``frozen``
            (FrozenBatchNorm2d: torchvision's layout for pretrained backbones and its COCO weights).
        norm_eps: FrozenBatchNorm2d's eps (torchvision's COCO v1 weights were trained with 0.0).
        trainable_backbone_layers: ResNet stages left trainable, 0-5 (default: 5 with ``batch``, 3 with
            ``frozen``, as torchvision).
        backbone_weights: a torchvision ImageNet ResNet state_dict file for the backbone (not stored in
            checkpoints: a checkpoint's weights replace it).
        box_representation_size: width of the box head's two fully connected layers (torchvision: 1024).
            The first takes each RoI's 256 x 7 x 7 features: 12.8 M parameters at 1024, 3.2 M at 256.
        **options: torchvision MaskRCNN keyword arguments from :data:`DETECTOR_OPTIONS`.
    """
    _check_common(num_classes, image_size, options)
    if box_representation_size < 1:
        raise ValueError(f"box_representation_size must be >= 1, got {box_representation_size}")
    if backbone not in _RESNETS:
        raise ValueError(f"unknown backbone {backbone!r}; expected one of {sorted(_RESNETS)}")
    if norm not in ("batch", "frozen"):
        raise ValueError(f"norm must be 'batch' or 'frozen', got {norm!r}")
    layers = (
        trainable_backbone_layers if trainable_backbone_layers is not None else (5 if norm == "batch" else 3)
    )
    if not 0 <= layers <= 5:
        raise ValueError(f"trainable_backbone_layers must be in 0..5, got {layers}")
    norm_layer: Any = nn.BatchNorm2d
    if norm == "frozen":

        def norm_layer(channels: int) -> nn.Module:
            return cast("nn.Module", misc_nn_ops.FrozenBatchNorm2d(channels, eps=norm_eps))

    body = _RESNETS[backbone](weights=None, norm_layer=norm_layer)
    if backbone_weights is not None:
        load_backbone_weights(body, backbone_weights)
    heads: dict[str, Any] = {"num_classes": num_classes + 1}
    if box_representation_size != 1024:  # torchvision's own heads otherwise (same construction order)
        heads = {
            "num_classes": None,  # torchvision takes the class count from the predictors given
            "box_head": TwoMLPHead(256 * 7 * 7, box_representation_size),  # FPN channels x RoIAlign 7x7
            "box_predictor": FastRCNNPredictor(box_representation_size, num_classes + 1),
            "mask_predictor": MaskRCNNPredictor(256, 256, num_classes + 1),
        }
    return MaskRCNN(
        _resnet_fpn_extractor(body, layers),
        **heads,
        **_transform_args(image_size),
        **options,
    )


def maskrcnn_resnet50_fpn_v2(
    num_classes: int = 90,
    backbone: str = "resnet50",
    image_size: int = 1088,
    backbone_weights: str | None = None,
    **options: Any,
) -> MaskRCNN:
    """torchvision's ``maskrcnn_resnet50_fpn_v2`` (BatchNorm in backbone, FPN and heads; 2-conv RPN head,
    4-conv + FC box head), all layers trainable, weights never downloaded. Arguments as the v1 builder."""
    _check_common(num_classes, image_size, options)
    if backbone != "resnet50":
        raise ValueError(f"maskrcnn_resnet50_fpn_v2 has a resnet50 backbone, got {backbone!r}")
    model = tv_mask_rcnn.maskrcnn_resnet50_fpn_v2(
        weights=None,
        weights_backbone=None,
        num_classes=num_classes + 1,
        **_transform_args(image_size),
        **options,
    )
    if backbone_weights is not None:
        load_backbone_weights(model.backbone.body, backbone_weights)
    return model


def load_backbone_weights(body: nn.Module, path: str) -> None:
    """Load a torchvision ImageNet ResNet state_dict into the FPN's ResNet body (its ``fc`` is unused).

    Raises ValueError naming missing or unexpected keys (a file of another architecture).
    """
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    result = body.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("num_batches_tracked")]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{path} is not a matching ResNet state_dict: missing {missing[:5]}, "
            f"unexpected {result.unexpected_keys[:5]}"
        )


def normalize(images: Tensor) -> Tensor:
    """uint8 ``[B, H, W, 3]`` RGB -> float ``[B, 3, H, W]``, ``(x - 255 mean) * (1 / (255 std))``.

    The exported graph's in-graph preprocessing computes exactly this (``training.detectors.export``).
    """
    if images.dim() != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must be uint8 [B, H, W, 3], got {tuple(images.shape)}")
    mean = torch.tensor(IMAGENET_MEAN, device=images.device) * 255.0
    inv_std = 1.0 / (torch.tensor(IMAGENET_STD, device=images.device) * 255.0)
    x = (images.to(torch.float32) - mean) * inv_std
    return x.permute(0, 3, 1, 2).contiguous()  # (B, H, W, 3) -> (B, 3, H, W)


@torch.no_grad()
def detect(model: MaskRCNN, images: Tensor) -> list[dict[str, Tensor]]:
    """torchvision's Mask R-CNN inference on already-sized, normalized inputs, masks not pasted.

    ``images`` float ``[B, 3, H, W]`` (see :func:`normalize`); returns per image ``boxes`` [K, 4]
    (pixels of the input), ``labels`` [K] (1..C), ``scores`` [K], ``masks`` [K, 1, 28, 28] probabilities.
    This is ``GeneralizedRCNN.forward`` without its transform: backbone -> RPN -> RoI heads.
    """
    if images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be [B, 3, H, W], got {tuple(images.shape)}")
    if model.training:
        raise ValueError("detect needs the model in eval mode (model.eval())")
    sizes = [(int(images.shape[2]), int(images.shape[3]))] * int(images.shape[0])
    features = model.backbone(images)
    if isinstance(features, Tensor):
        features = OrderedDict([("0", features)])
    proposals, _ = model.rpn(ImageList(images, sizes), features)
    detections, _ = model.roi_heads(features, proposals, sizes)
    return cast("list[dict[str, Tensor]]", detections)
