"""TF's ``WeightSharedConvolutionalBoxPredictor``: one box tower and one class tower for all levels.

Each tower is ``num_layers`` x (3x3 conv without bias -> BatchNorm -> ReLU6). The conv weights are shared
across pyramid levels; the BatchNorms are not (TF keeps one per level, since the levels' statistics
differ). A 3x3 box predictor (anchors x 4) and class predictor (anchors x C) follow, also shared.
Init as TF's config: conv weights N(0, 0.01), biases 0, class bias -4.6 (prior probability ~0.01).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from training.detectors.ssd320.backbone import batch_norm

CLASS_BIAS_INIT = -4.6


class WeightSharedTower(nn.Module):
    def __init__(self, channels: int, num_layers: int, num_levels: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False) for _ in range(num_layers)
        )
        self.norms = nn.ModuleList(
            nn.ModuleList(batch_norm(channels) for _ in range(num_layers)) for _ in range(num_levels)
        )
        self.act = nn.ReLU6(inplace=True)

    def forward(self, x: Tensor, level: int) -> Tensor:
        norms = self.norms[level]
        assert isinstance(norms, nn.ModuleList)
        for conv, norm in zip(self.convs, norms, strict=True):
            x = self.act(norm(conv(x)))
        return x


class WeightSharedHead(nn.Module):
    """Per-level maps ``[N, channels, H_l, W_l]`` -> ``box_regression [N, A, 4]``, ``cls_logits [N, A, C]``.

    Flattening order: level, row, column, anchor (the order of ``anchors.generate_anchors_xyxy``).
    ``feature_sizes`` (square maps' sides) fix every reshape but the batch's, so the exported graph has
    static shapes apart from the batch dimension.
    """

    def __init__(
        self,
        num_classes: int,
        anchors_per_location: int,
        feature_sizes: tuple[int, ...],
        channels: int = 256,
        num_layers: int = 4,
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.rows_per_level = tuple(side * side * anchors_per_location for side in feature_sizes)
        num_levels = len(feature_sizes)
        self.box_tower = WeightSharedTower(channels, num_layers, num_levels)
        self.class_tower = WeightSharedTower(channels, num_layers, num_levels)
        self.box_predictor = nn.Conv2d(channels, anchors_per_location * 4, kernel_size=3, padding=1)
        self.class_predictor = nn.Conv2d(
            channels, anchors_per_location * num_classes, kernel_size=3, padding=1
        )
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.normal_(module.weight, std=0.01)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        assert self.class_predictor.bias is not None
        nn.init.constant_(self.class_predictor.bias, CLASS_BIAS_INIT)

    def forward(self, features: list[Tensor]) -> tuple[Tensor, Tensor]:
        boxes, logits = [], []
        for level, (feature, rows) in enumerate(zip(features, self.rows_per_level, strict=True)):
            box = self.box_predictor(self.box_tower(feature, level))
            cls = self.class_predictor(self.class_tower(feature, level))
            # (N, k*4, H, W) -> (N, H, W, k*4) -> (N, H*W*k, 4): channel j*4+c is anchor j's coordinate c
            boxes.append(box.permute(0, 2, 3, 1).reshape(-1, rows, 4))
            logits.append(cls.permute(0, 2, 3, 1).reshape(-1, rows, self.num_classes))
        return torch.cat(boxes, dim=1), torch.cat(logits, dim=1)
