"""ResNet backbone for SSD300: torchvision's ResNet truncated after layer3, layer3 at stride 1."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn
from torchvision import models

# Channels of the six feature maps (backbone output + five extra blocks), as in NVIDIA's SSD300.
OUT_CHANNELS: dict[str, tuple[int, ...]] = {
    "resnet18": (256, 512, 512, 256, 256, 128),
    "resnet34": (256, 512, 512, 256, 256, 256),
    "resnet50": (1024, 512, 512, 256, 256, 256),
    "resnet101": (1024, 512, 512, 256, 256, 256),
    "resnet152": (1024, 512, 512, 256, 256, 256),
}


class ResNetBackbone(nn.Module):
    """``[N, 3, 300, 300]`` normalized RGB -> ``[N, C, 38, 38]`` (C = 1024 for resnet50, 256 for 18/34).

    The attribute name ``feature_extractor`` and its child indices (0 conv1, 1 bn1, 4 layer1, 5 layer2,
    6 layer3) are those of NVIDIA's checkpoints, so their state dicts load without a key map.
    """

    def __init__(self, name: str = "resnet50", weights_path: str | Path | None = None) -> None:
        super().__init__()
        if name not in OUT_CHANNELS:
            raise ValueError(f"unknown backbone {name!r}; expected one of {sorted(OUT_CHANNELS)}")
        resnet = getattr(models, name)(weights=None)  # never downloads: weights come from a file if at all
        if weights_path is not None:
            state = torch.load(weights_path, map_location="cpu", weights_only=True)
            resnet.load_state_dict(state)
        self.out_channels = OUT_CHANNELS[name]
        self.feature_extractor = nn.Sequential(*list(resnet.children())[:7])
        # layer3 at stride 1 keeps a 38x38 map for a 300x300 input.
        block = resnet.layer3[0]
        block.conv1.stride = (1, 1)
        block.conv2.stride = (1, 1)
        if block.downsample is not None:
            block.downsample[0].stride = (1, 1)

    def forward(self, x: Tensor) -> Tensor:
        return cast("Tensor", self.feature_extractor(x))
