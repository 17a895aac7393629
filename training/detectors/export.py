"""What every architecture's export wrapper provides: the one extension point of the export pipeline.

The pipeline (``exporters.onnx.export``) assembles every exported graph from the same three parts::

    images uint8 [B, H, W, 3] RGB --ImagePreprocess--> float32 [B, 3, H, W] normalized
        --wrapper.network--> raw head outputs (architecture-specific tuple)
        --wrapper.decoder--> boxes [B, A, 4] x1y1x2y2 normalized to the input, scores [B, C, A]
        --DetectionPostprocess--> the manifest's output contract
        (mask models: --wrapper.mask_head--> detection_masks, from the raw outputs and the detections)

so an architecture adds one ``training/detectors/<name>/export.py`` with an :class:`ExportWrapper`
subclass (metadata, the network, a decoder to the common layout, and the eager post-processing it must
match), named by its registry entry (``training.detectors.registry``; ``exporters.onnx.wrappers.get_wrapper``
looks it up there).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch import Tensor, nn

from contract.manifest import Label
from training.checkpoint import Checkpoint
from training.data.imagenet import IMAGENET_MEAN, IMAGENET_STD
from training.data.letterbox import letterbox_geometry
from training.postprocess import Detections, PostprocessSettings


class ImagePreprocess(nn.Module):
    """uint8 ``[B, H, W, 3]`` RGB -> float32 ``[B, 3, H, W]``: ``(x - 255 * mean) / (255 * std)``.

    The same arithmetic as training's ``normalize_to_tensor`` (subtract, then multiply by the inverse),
    so the graph and eager PyTorch see the same floats.
    """

    mean_255: Tensor
    inv_std_255: Tensor

    def __init__(self, mean: tuple[float, float, float], std: tuple[float, float, float]) -> None:
        super().__init__()
        mean_255 = torch.tensor(mean, dtype=torch.float32) * 255.0
        inv_std_255 = 1.0 / (torch.tensor(std, dtype=torch.float32) * 255.0)
        self.register_buffer("mean_255", mean_255.reshape(1, 1, 1, 3), persistent=False)
        self.register_buffer("inv_std_255", inv_std_255.reshape(1, 1, 1, 3), persistent=False)

    def forward(self, images: Tensor) -> Tensor:
        x = (images.to(torch.float32) - self.mean_255) * self.inv_std_255
        return x.permute(0, 3, 1, 2).contiguous()  # (B, H, W, 3) -> (B, 3, H, W)


class ExportWrapper(ABC):
    """One architecture's export adapter, built from a checkpoint.

    Subclasses set the class attributes and implement :meth:`decoder` and :meth:`eager_detections`.
    ``network`` maps normalized float ``[B, 3, H, W]`` to the raw head outputs named
    :attr:`raw_output_names`; the decoder maps those to the common layout of
    ``exporters.onnx.postprocess_graph`` (boxes ``[B, A, 4]`` normalized x1y1x2y2, scores ``[B, C, A]``).
    """

    architecture: ClassVar[str]
    raw_output_names: ClassVar[tuple[str, ...]]
    resize_mode: ClassVar[Literal["stretch", "letterbox"]] = "stretch"
    # Letterbox fill per RGB channel (0-255), written to the manifest's input spec.
    pad_value: ClassVar[tuple[int, int, int]] = (0, 0, 0)
    # Smallest verification tolerances (``exporters.evaluation.verify.Tolerances`` fields) the architecture
    # needs in
    # FP32, where its own rounding differences exceed the defaults (e.g. a two-stage detector's scores).
    tolerance_floors: ClassVar[dict[str, float]] = {}
    # ONNX node-name prefixes (module scopes in ``DetectionGraph``) of network layers that run after the
    # raw outputs and belong in the FP16 graph (``exporters.precision.fp16.split_nodes``): two-stage RoI
    # heads.
    fp16_scopes: ClassVar[tuple[str, ...]] = ()
    # Regular expressions (NNCF IgnoredScope patterns: re.search on ONNX node names) of network nodes
    # that stay fp32 in INT8 variants, beyond the preprocessing and post-processing every model keeps
    # (exporters.precision.nncf_int8.ignored_scope).
    int8_ignored_patterns: ClassVar[tuple[str, ...]] = ()
    # The square input's side; subclasses set it (or override ``input_size``).
    image_size: int

    def __init__(self, checkpoint: Checkpoint, network: nn.Module) -> None:
        """``network``: the model ``checkpoint`` describes, its inference weights loaded
        (``training.weights.build_checkpoint_model``; ``exporters.onnx.wrappers.wrapper_for`` does both)."""
        if checkpoint.model_name != self.architecture:
            raise ValueError(
                f"{type(self).__name__} exports {self.architecture!r}, not {checkpoint.model_name!r}"
            )
        self.checkpoint = checkpoint
        self.network: nn.Module = network.eval()
        self.num_classes = len(checkpoint.categories)

    # ------------------------------------------------------------------ metadata (manifest)
    @property
    def input_size(self) -> tuple[int, int]:
        """(height, width) of the network input: ``image_size`` square unless a subclass says otherwise."""
        return self.image_size, self.image_size

    @property
    def mean_std(self) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
        """ImageNet-style mean and std on the 0-1 scale, RGB order."""
        return IMAGENET_MEAN, IMAGENET_STD

    @property
    @abstractmethod
    def num_anchors(self) -> int:
        """A: boxes the decoder emits per image (before any filtering)."""

    @property
    def backbone(self) -> str | None:
        return self.checkpoint.model_args.get("backbone")

    @property
    def default_settings(self) -> PostprocessSettings:
        return PostprocessSettings()

    @property
    def mask_size(self) -> tuple[int, int] | None:
        """(Mh, Mw) of ``detection_masks`` for mask models (see :meth:`mask_head`), else None."""
        return None

    def labels(self) -> list[Label]:
        """Manifest labels in contract order: ``detection_classes`` i -> ``categories[i]``."""
        return [Label(name=str(c["name"]), coco_id=int(c["id"])) for c in self.checkpoint.categories]

    # ------------------------------------------------------------------ graph parts
    def preprocess(self) -> ImagePreprocess:
        mean, std = self.mean_std
        return ImagePreprocess(mean, std)

    @abstractmethod
    def decoder(self) -> nn.Module:
        """Module: raw head outputs -> ``(boxes [B, A, 4], scores [B, C, A])`` (see class docstring).

        A decoder with a ``decode_candidates(codes [B, N, 4], anchor_index [B, N]) -> boxes [B, N, 4]``
        method returns box codes instead of boxes, and the post-processing decodes only its candidates."""

    def mask_head(self) -> nn.Module | None:
        """Mask models: a module ``(raw outputs, contract outputs) -> detection_masks [B, K, Mh, Mw]``
        that runs after the post-processing, on the kept detections; None for box-only detectors."""
        return None

    def check_settings(self, settings: PostprocessSettings) -> None:  # noqa: B027 - optional hook
        """Raise ValueError for post-processing settings the architecture's eager reference cannot follow."""

    def to_original(self, boxes: np.ndarray, size: tuple[int, int]) -> np.ndarray:
        """``[N, 4]`` boxes normalized to the input -> pixels of an original ``(height, width)`` image, as the
        service maps them (``resize_mode``)."""
        height, width = size
        if self.resize_mode == "letterbox":
            net_h, net_w = self.input_size
            return letterbox_geometry(height, width, net_h, net_w).boxes_to_original(boxes)
        scale = np.array([width, height, width, height], dtype=np.float32)
        return np.asarray(boxes, dtype=np.float32).reshape(-1, 4) * scale

    # ------------------------------------------------------------------ eager reference
    @abstractmethod
    def resize(self, image: np.ndarray) -> np.ndarray:
        """uint8 RGB ``[h, w, 3]`` of any size -> uint8 ``[H, W, 3]`` at the input size, as training's
        evaluation resizes (the verification and AP pipelines feed both sides through it)."""

    @abstractmethod
    def normalize(self, images: np.ndarray) -> Tensor:
        """uint8 ``[B, H, W, 3]`` -> the network's float input, computed with training's own code, so
        comparing against it checks the in-graph :class:`ImagePreprocess` too."""

    @torch.no_grad()
    def raw_outputs(self, images: np.ndarray) -> tuple[Tensor, ...]:
        """Eager raw head outputs for uint8 images."""
        out = self.network(self.normalize(images))
        return tuple(out) if isinstance(out, tuple | list) else (out,)

    @abstractmethod
    def eager_detections(self, raw: tuple[Tensor, ...], settings: PostprocessSettings) -> list[Detections]:
        """The architecture's own eager post-processing (from ``training``) run with ``settings``, with
        classes as 0-based label indices; the exported graph must reproduce it."""

    def describe(self) -> dict[str, Any]:
        return {"architecture": self.architecture, "backbone": self.backbone, "num_classes": self.num_classes}
