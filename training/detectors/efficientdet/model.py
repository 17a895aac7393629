"""EfficientDet-D0: the effdet package's network on a timm EfficientNet-B0 backbone, at a chosen input size.

Tensor contract:
    input  ``images``: float32 ``[N, 3, S, S]``, RGB scaled to 0-1 then ImageNet-normalized, letterboxed
           to ``S x S`` (``S = image_size``, a multiple of 128 so every level P3-P7 tiles it exactly).
    output ``(class_outputs, box_outputs)``: two lists over the levels P3..P7 (strides 8, 16, 32, 64, 128):
           ``class_outputs[l]`` ``[N, 9 * C, S / s_l, S / s_l]`` logits (sigmoid per class, no background),
           channel = anchor * C + class; ``box_outputs[l]`` ``[N, 9 * 4, S / s_l, S / s_l]`` codes
           (ty, tx, th, tw) against the anchors (Faster R-CNN coding, no scale factors),
           channel = anchor * 4 + coordinate.

Anchors (:func:`anchor_boxes`): effdet's, ``[A, 4]`` y1, x1, y2, x2 in pixels of the ``S x S`` input,
ordered level, row, column, anchor (the order of the flattened outputs above); 9 per location (octave
scales 2^0, 2^1/3, 2^2/3 x aspect pairs (1, 1), (1.4, 0.7), (0.7, 1.4)), anchor scale 4;
``A = 9 * sum_l (S / s_l)^2`` = 49,104 at 512, 12,276 at 256.

Backbone variants (``backbone`` argument; each matches a family of published weights):

- ``tf_efficientnet_b0``: effdet's ``tf_efficientdet_d0`` (TensorFlow "SAME" padding, BatchNorm eps 1e-3,
  the TF port's redundant conv biases): loads ``tf_efficientdet_d0_34-f153e0cf.pth``.
- ``efficientnet_b0``: effdet's ``efficientdet_d0`` (symmetric PyTorch padding, no redundant biases,
  timm's BatchNorm eps 1e-5): loads ``efficientdet_d0-f3276ba8.pth``.
- ``nvidia_efficientnet_b0``: NVIDIA DeepLearningExamples' PyTorch EfficientDet-D0 (``efficientdet_d0``
  layout, backbone BatchNorm eps 1e-3 as NVIDIA's own EfficientNet); its checkpoints load after the key
  mapping in ``training.detectors.efficientdet.checkpoints``.

Never downloads: the backbone starts random or from a weights file the user names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from training.detectors.efficientdet.effdet_compat import (
    Anchors,
    EfficientDet,
    get_efficientdet_config,
    set_config_readonly,
    set_config_writeable,
)

__all__ = [
    "BACKBONES",
    "DEFAULT_BACKBONE",
    "DEFAULT_IMAGE_SIZE",
    "EfficientDetD0",
    "anchor_boxes",
    "efficientdet_d0_config",
    "load_backbone_weights",
]

# backbone variant -> (effdet config name, extra timm backbone arguments)
BACKBONES: dict[str, tuple[str, dict[str, Any]]] = {
    "tf_efficientnet_b0": ("tf_efficientdet_d0", {}),
    "efficientnet_b0": ("efficientdet_d0", {}),
    "nvidia_efficientnet_b0": ("efficientdet_d0", {"bn_eps": 1e-3}),
}
DEFAULT_BACKBONE = "tf_efficientnet_b0"
DEFAULT_IMAGE_SIZE = 512
SIZE_MULTIPLE = 128  # the P7 stride


def efficientdet_d0_config(num_classes: int, backbone: str, image_size: int) -> Any:
    """effdet's (OmegaConf) model config for D0 with this class count, backbone variant and input size."""
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if backbone not in BACKBONES:
        raise ValueError(
            f"unknown EfficientDet-D0 backbone {backbone!r}; expected one of {sorted(BACKBONES)}"
        )
    if image_size < SIZE_MULTIPLE or image_size % SIZE_MULTIPLE:
        raise ValueError(
            f"image_size must be a positive multiple of {SIZE_MULTIPLE} (the P7 stride), got {image_size}"
        )
    name, backbone_args = BACKBONES[backbone]
    config = get_efficientdet_config(name)
    set_config_writeable(config)
    config.num_classes = num_classes
    config.image_size = (image_size, image_size)
    config.backbone_args = {**(config.backbone_args or {}), **backbone_args}
    set_config_readonly(config)
    return config


class EfficientDetD0(EfficientDet):  # type: ignore[misc]  # effdet base class, untyped
    """effdet's ``EfficientDet`` for D0 (see the module docstring for the tensor contract).

    The state dict is effdet's own (``backbone.*``, ``fpn.*``, ``class_net.*``, ``box_net.*``), so
    effdet's published weight files load into it unchanged.
    """

    def __init__(
        self,
        num_classes: int = 90,
        backbone: str = DEFAULT_BACKBONE,
        image_size: int = DEFAULT_IMAGE_SIZE,
        backbone_weights: str | Path | None = None,
        freeze_bn: bool = False,
    ) -> None:
        super().__init__(efficientdet_d0_config(num_classes, backbone, image_size), pretrained_backbone=False)
        # Every BatchNorm stays in inference mode while training (running statistics used and kept):
        # fine-tuning with few images per step, or from weights whose statistics are folded into the convs.
        self.freeze_bn = freeze_bn
        self.num_classes = num_classes
        self.backbone_variant = backbone
        self.image_size = image_size
        if backbone_weights is not None:
            load_backbone_weights(self.backbone, backbone_weights)

    def train(self, mode: bool = True) -> EfficientDetD0:
        super().train(mode)
        if mode and self.freeze_bn:
            for module in self.modules():
                if isinstance(module, nn.BatchNorm2d):
                    module.eval()
        return self

    def forward(self, images: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        size = self.image_size
        if images.dim() != 4 or images.shape[1] != 3 or tuple(images.shape[2:]) != (size, size):
            raise ValueError(f"images must be [N, 3, {size}, {size}], got {tuple(images.shape)}")
        class_outputs, box_outputs = super().forward(images)
        return class_outputs, box_outputs


def anchor_boxes(model: EfficientDetD0) -> Tensor:
    """effdet's anchors for ``model``'s input size: ``[A, 4]`` y1, x1, y2, x2 pixels (float32)."""
    return cast("Tensor", Anchors.from_config(model.config).boxes)


def _read_weights(path: Path) -> dict[str, Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    raw = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(raw, dict) and isinstance(raw.get("state_dict"), dict):
        raw = raw["state_dict"]
    if not isinstance(raw, dict):
        raise ValueError(f"{path} holds a {type(raw).__name__}, not a state dict")
    return {k.removeprefix("module."): v for k, v in raw.items()}


def load_backbone_weights(backbone: nn.Module, path: str | Path) -> int:
    """Load a timm EfficientNet-B0 ImageNet weights file (``.pth`` or ``.safetensors``) into ``backbone``.

    The classifier and head (``conv_head``, ``bn2``, ``classifier``) are not part of a feature backbone
    and are ignored; every backbone tensor must be present with the right shape. Returns how many loaded.

    Raises:
        FileNotFoundError: no such file. ValueError: missing keys or shape mismatches, named.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"backbone weights not found: {path}")
    weights = _read_weights(path)
    own = backbone.state_dict()
    missing = [k for k in own if k not in weights]
    if missing:
        raise ValueError(
            f"{path} lacks {len(missing)} backbone tensors (first: {missing[:3]}); "
            "expected a timm EfficientNet-B0 state dict of the same variant"
        )
    wrong = [k for k in own if weights[k].shape != own[k].shape]
    if wrong:
        k = wrong[0]
        raise ValueError(f"{path}: {k} has shape {tuple(weights[k].shape)}, expected {tuple(own[k].shape)}")
    backbone.load_state_dict({k: weights[k] for k in own}, strict=True)
    return len(own)
