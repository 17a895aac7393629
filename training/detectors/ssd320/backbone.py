"""ResNet + FPN P3-P7 for SSD320, assembled from torchvision's parts.

- ResNet: ``torchvision.models.<name>(weights=None)``, ImageNet weights only from a file (never downloaded).
- C3-C5 (``layer2``-``layer4``, strides 8-32) feed ``torchvision.ops.FeaturePyramidNetwork`` (via
  ``BackboneWithFPN``) with 256 channels: 1x1 laterals, nearest top-down upsampling, 3x3 outputs.
- P6 and P7 come from :class:`LastLevelP6P7BN`, torchvision's ``LastLevelP6P7`` in the shape of TF's
  ``ssd_resnet50_v1_fpn``: each a 3x3 stride-2 conv on the level below it (P5, then P6), then BatchNorm
  (TF: eps 1e-3, decay 0.997) and ReLU6.

Differences from TF's FPN, kept because the FPN is torchvision's: TF's P3/P4 output convs have BatchNorm +
ReLU6 and its P5 has no 3x3 output conv; torchvision's output convs are plain (bias, no activation) on
P3-P5. The backbone BatchNorms keep torchvision's eps (1e-5) so ImageNet weights load unchanged.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial
from pathlib import Path

import torch
from torch import Tensor, nn
from torchvision import models
from torchvision.models.detection.backbone_utils import BackboneWithFPN
from torchvision.ops.feature_pyramid_network import ExtraFPNBlock
from torchvision.ops.misc import Conv2dNormActivation

# TF's BatchNorm settings (decay 0.997 is PyTorch momentum 0.003), for the layers this model adds.
BN_EPS = 1e-3
BN_MOMENTUM = 0.003
FPN_CHANNELS = 256

# Output channels of layer2, layer3, layer4 (C3, C4, C5).
STAGE_CHANNELS: dict[str, tuple[int, int, int]] = {
    "resnet18": (128, 256, 512),
    "resnet34": (128, 256, 512),
    "resnet50": (512, 1024, 2048),
    "resnet101": (512, 1024, 2048),
    "resnet152": (512, 1024, 2048),
}


def batch_norm(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)


class LastLevelP6P7BN(ExtraFPNBlock):  # type: ignore[misc]  # torchvision base class, untyped
    """P6 = ReLU6(BN(conv3x3/2(P5))), P7 = ReLU6(BN(conv3x3/2(P6))), appended to the FPN's outputs."""

    def __init__(self, channels: int = FPN_CHANNELS) -> None:
        super().__init__()
        conv = partial(
            Conv2dNormActivation,
            channels,
            channels,
            kernel_size=3,
            stride=2,
            norm_layer=batch_norm,
            activation_layer=nn.ReLU6,
        )
        self.p6 = conv()
        self.p7 = conv()
        for block in (self.p6, self.p7):
            nn.init.kaiming_uniform_(block[0].weight, a=1)  # as torchvision's LastLevelP6P7

    def forward(
        self, results: list[Tensor], x: list[Tensor], names: list[str]
    ) -> tuple[list[Tensor], list[str]]:
        p6 = self.p6(results[-1])
        p7 = self.p7(p6)
        return [*results, p6, p7], [*names, "p6", "p7"]


class ResNetFPN(nn.Module):
    """``[N, 3, S, S]`` normalized RGB -> five ``[N, 256, ceil(S / 2**l), ceil(S / 2**l)]`` maps, l = 3..7."""

    def __init__(self, name: str = "resnet50", weights_path: str | Path | None = None) -> None:
        super().__init__()
        if name not in STAGE_CHANNELS:
            raise ValueError(f"unknown backbone {name!r}; expected one of {sorted(STAGE_CHANNELS)}")
        resnet = getattr(models, name)(weights=None)
        if weights_path is not None:
            resnet.load_state_dict(torch.load(weights_path, map_location="cpu", weights_only=True))
        self.body = BackboneWithFPN(
            resnet,
            return_layers={"layer2": "p3", "layer3": "p4", "layer4": "p5"},
            in_channels_list=list(STAGE_CHANNELS[name]),
            out_channels=FPN_CHANNELS,
            extra_blocks=LastLevelP6P7BN(FPN_CHANNELS),
        )
        self.out_channels = FPN_CHANNELS

    def forward(self, images: Tensor) -> list[Tensor]:
        features: OrderedDict[str, Tensor] = self.body(images)
        return list(features.values())
