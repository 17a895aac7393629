"""The interface the trainer and evaluator use, so adding an architecture adds one task module."""

from __future__ import annotations

from collections.abc import Iterable, Sized
from typing import Any, NotRequired, Protocol, TypedDict

import torch
from torch import Tensor, nn


class Prediction(TypedDict):
    """One image's detections: ``boxes [K, 4]`` xyxy normalized to the network input (0-1),
    ``scores [K]``, ``labels [K]`` int64 contiguous labels (1..C); mask models add ``masks [K, M, M]``,
    low-resolution probabilities in each box's frame (pasted into the image as torchvision does)."""

    boxes: Tensor
    scores: Tensor
    labels: Tensor
    masks: NotRequired[Tensor]


Batch = tuple[Any, ...]


class TrainLoader(Iterable[Batch], Sized, Protocol):
    def set_epoch(self, epoch: int) -> None: ...


class DetectorTask(Protocol):
    model_name: str

    def __init__(self, model_args: dict[str, Any]) -> None: ...

    def build_model(self, backbone_weights: str | None = None) -> nn.Module: ...

    def build_criterion(self) -> nn.Module: ...

    def train_loader(
        self,
        kind: str,
        root: str,
        split: str,
        batch_size: int,
        workers: int,
        seed: int,
        rank: int,
        world: int,
        scale_jitter: tuple[float, float] | None = None,
    ) -> TrainLoader:
        """``scale_jitter``: the random scale range of an architecture whose augmentation has one
        (EfficientDet); None keeps the architecture's default."""
        ...

    def eval_loader(self, root: str, split: str, batch_size: int, workers: int) -> Iterable[Batch]: ...

    def loss(self, model: nn.Module, criterion: nn.Module, batch: Batch, device: torch.device) -> Tensor: ...

    def predict(self, model: nn.Module, images: Tensor) -> list[Prediction]: ...


def reject_scale_jitter(model_name: str, scale_jitter: tuple[float, float] | None) -> None:
    """For tasks whose augmentation has no scale range: a given one is a configuration error."""
    if scale_jitter is not None:
        raise ValueError(f"--scale-jitter applies to efficientdet-d0's augmentation, not to {model_name}")
