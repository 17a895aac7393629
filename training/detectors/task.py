"""The interface the trainer and evaluator use, so adding an architecture adds one task module."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NotRequired, Protocol, TypedDict

import torch
from torch import Tensor, nn

from training.data.loader import LoaderRequest, TrainLoader

__all__ = [
    "Batch",
    "DetectorTask",
    "LoaderRequest",
    "Prediction",
    "TrainLoader",
    "images_to",
    "reject_scale_jitter",
]


class Prediction(TypedDict):
    """One image's detections: ``boxes [K, 4]`` xyxy normalized to the network input (0-1),
    ``scores [K]``, ``labels [K]`` int64 contiguous labels (1..C); mask models add ``masks [K, M, M]``,
    low-resolution probabilities in each box's frame (pasted into the image as torchvision does)."""

    boxes: Tensor
    scores: Tensor
    labels: Tensor
    masks: NotRequired[Tensor]


Batch = tuple[Any, ...]


class DetectorTask(Protocol):
    model_name: str

    def __init__(self, model_args: dict[str, Any]) -> None: ...

    def build_model(self, backbone_weights: str | None = None) -> nn.Module: ...

    def build_criterion(self) -> nn.Module: ...

    def train_loader(
        self, request: LoaderRequest, scale_jitter: tuple[float, float] | None = None
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


def is_channels_last(model: nn.Module) -> bool:
    weight = next((p for p in model.parameters() if p.dim() == 4), None)
    return weight is not None and weight.is_contiguous(memory_format=torch.channels_last)


def images_to(images: Tensor, model: nn.Module, device: torch.device) -> Tensor:
    """A batch of images on ``device`` in the model's memory format (channels-last when its convs are)."""
    memory_format = torch.channels_last if is_channels_last(model) else torch.contiguous_format
    return images.to(device, non_blocking=True).contiguous(memory_format=memory_format)
