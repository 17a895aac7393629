"""An export wrapper -> one ONNX detection graph, the same way for all models.

Steps: assemble ``DetectionGraph`` (uint8 NHWC input, in-graph normalization, network, decoder, NMS
post-processing) -> export with dynamic batch -> simplify (onnxslim: constant folding, dead-code removal)
-> ONNX checker with strict shape inference. ``exporters.checkpoint_export`` runs the whole ``detect-export
onnx`` command around it (checkpoint, verification, manifest, atomic write).

Exporter choice: the TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``).
torch 2.14's default dynamo exporter needs ``onnxscript`` (not in this project's pinned export stack) and
would need NonMaxSuppression as a ``torch.library`` custom op with a fake kernel for its data-dependent
output size plus a custom translation; the TorchScript exporter maps one ``autograd.Function.symbolic``
to one ONNX node. It exports the ResNet-18 SSD300 in ~2 s with outputs within ~1e-6 of eager. It is
deprecated in torch; moving to dynamo means replacing ``postprocess_graph._NonMaxSuppression`` only.

The exported graph also carries the raw head outputs as named intermediate tensors
(``raw_<name>``); the artifact does not output them, but verification and FP16 checks expose them
(``exporters.onnx.graph.with_outputs``) to compare the network itself, not only the detections.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxslim
import torch
from onnx import ModelProto
from torch import Tensor, nn

from contract.manifest import MASK_OUTPUT, OUTPUT_NAMES
from exporters.errors import ExportError
from exporters.onnx.graph import check, ensure_node_names, op_counts
from exporters.onnx.postprocess_graph import DetectionPostprocess, PostprocessSettings
from exporters.onnx.wrappers import ExportWrapper

MODEL_FILE = "model.onnx"
INPUT_NAME = "images"
DEFAULT_OPSET = 17
RAW_PREFIX = "raw_"


class DetectionGraph(nn.Module):
    """uint8 ``[B, H, W, 3]`` RGB -> the output contract (plus the raw head outputs when asked)."""

    def __init__(
        self, wrapper: ExportWrapper, settings: PostprocessSettings, raw_outputs: bool = True
    ) -> None:
        super().__init__()
        self.preprocess = wrapper.preprocess()
        self.network = wrapper.network
        self.decoder = wrapper.decoder()
        # Decoders that leave the sigmoid to the post-processing (taken on the candidates only).
        logits = getattr(self.decoder, "scores_are_logits", False)
        self.postprocess = DetectionPostprocess(settings, wrapper.num_classes, wrapper.num_anchors, logits)
        self.masks = wrapper.mask_head()
        self.raw_outputs = raw_outputs

    def forward(self, images: Tensor) -> tuple[Tensor, ...]:
        raw = self.network(self.preprocess(images))
        raw = tuple(raw) if isinstance(raw, tuple | list) else (raw,)
        decode = getattr(self.decoder, "decode_candidates", None)  # decoders that decode candidates only
        # The post-processing runs in fp32, as in the FP16 graph and engines, also when the network ran in
        # fp16 (PyTorch under autocast); the exported fp32 graph has nothing to cast.
        boxes, scores = (t if t.dtype == torch.float32 else t.float() for t in self.decoder(*raw))
        outputs = self.postprocess(boxes, scores, decode=decode)
        if self.masks is not None:  # mask models: detection_masks from the raw outputs and the detections
            outputs = (*outputs, self.masks(raw, outputs))
        return (*outputs, *raw) if self.raw_outputs else outputs


def output_names(wrapper: ExportWrapper) -> list[str]:
    """The contract outputs of ``wrapper``'s graph: the four detection outputs, plus masks if it has them."""
    return [*OUTPUT_NAMES, *((MASK_OUTPUT,) if wrapper.mask_size is not None else ())]


def raw_output_names(wrapper: ExportWrapper) -> list[str]:
    return [RAW_PREFIX + name for name in wrapper.raw_output_names]


def torch_to_onnx(
    module: nn.Module,
    example: tuple[Tensor, ...],
    input_names: list[str],
    output_names: list[str],
    opset: int,
) -> ModelProto:
    """Export ``module`` with the TorchScript exporter, dimension 0 of every input and output dynamic."""
    dynamic_axes = {name: {0: "batch"} for name in (*input_names, *output_names)}
    with (
        tempfile.TemporaryDirectory(prefix="detect-export-") as tmp,
        warnings.catch_warnings(),
        torch.no_grad(),
    ):
        # The TorchScript exporter is chosen deliberately (see the module docstring); torch announces its
        # deprecation with these two warnings on every call.
        warnings.filterwarnings(
            "ignore", "You are using the legacy TorchScript-based ONNX export", DeprecationWarning
        )
        warnings.filterwarnings("ignore", "The feature will be removed", DeprecationWarning, r"torch\.onnx")
        # training's models validate input shapes with Python `if`s; traced they become constants, which is
        # right: the exported graph's channels and spatial size are fixed, only the batch is dynamic.
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning, module=r"training\.")  # type: ignore[attr-defined]
        # torchvision's detection box coder creates its 0.5 with torch.tensor: a constant, as it should be.
        warnings.filterwarnings(
            "ignore",
            category=torch.jit.TracerWarning,  # type: ignore[attr-defined]
            module=r"torchvision\.models\.detection\._utils",
        )
        path = Path(tmp) / "exported.onnx"
        torch.onnx.export(
            module,
            example,
            path,
            dynamo=False,
            opset_version=opset,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            do_constant_folding=True,
        )
        return onnx.load(str(path))


def simplify(model: ModelProto) -> ModelProto:
    """onnxslim's constant folding and dead-code elimination, keeping every graph input/output name."""
    slimmed = onnxslim.slim(model)
    if not isinstance(slimmed, ModelProto):
        raise ExportError(f"onnxslim returned {type(slimmed).__name__}, not a model")
    ensure_node_names(slimmed)
    return slimmed


def example_images(wrapper: ExportWrapper, batch: int = 2, seed: int = 0) -> Tensor:
    height, width = wrapper.input_size
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 256, size=(batch, height, width, 3), dtype=np.uint8))


def export_detection_graph(
    wrapper: ExportWrapper, settings: PostprocessSettings, opset: int = DEFAULT_OPSET
) -> tuple[ModelProto, dict[str, Any]]:
    """The checked, simplified detector graph **with** the raw head outputs, and export statistics.

    Drop the raw outputs (``onnx_graph.without_outputs``) to get the artifact graph.
    """
    graph = DetectionGraph(wrapper, settings, raw_outputs=True).eval()
    raw_names = raw_output_names(wrapper)
    started = time.perf_counter()
    exported = torch_to_onnx(
        graph, (example_images(wrapper),), [INPUT_NAME], [*output_names(wrapper), *raw_names], opset
    )
    export_seconds = time.perf_counter() - started
    nodes_exported = len(exported.graph.node)
    model = simplify(exported)
    check(model, "the exported graph")
    stats = {
        "export_seconds": round(export_seconds, 3),
        "nodes_exported": nodes_exported,
        "nodes_simplified": len(model.graph.node),
        "op_counts": op_counts(model),
    }
    return model, stats
