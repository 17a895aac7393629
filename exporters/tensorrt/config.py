"""What a ``detect-export trt`` run is asked for and how the engine is to be built.

`TensorRTExportRequest` is the command's request; `BuildConfig` the engine build configuration derived
from it (one optimization profile over the dynamic batch, workspace, timing cache), validated against the
ONNX graph with no GPU; `engine_export_settings` what an engine artifact's manifest records of both. The
FP16 command (``exporters.tensorrt.build``), the INT8 one (``exporters.tensorrt.int8``) and the engine
build (``exporters.tensorrt.engine``) all share them from here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from onnx import ModelProto

from contract.manifest import Manifest
from exporters.errors import ExportError
from exporters.manifests import carried_settings

PLAN_FILE = "model.plan"
FP16_FILE = "model.fp16.onnx"


@dataclass
class TensorRTExportRequest:
    """The ``trt`` command's arguments: source artifact, output folder, profile batches and checks."""

    artifact: Path
    output: Path
    min_batch: int = 1
    opt_batch: int = 8
    max_batch: int = 32
    workspace_gb: float | None = None
    timing_cache: Path | None = None
    data: str | None = None
    split: str | None = None
    max_images: int | None = None
    name: str | None = None
    version: str | None = None
    force: bool = False
    # False: FP16 accuracy is still measured and recorded, but out of tolerance does not stop the build.
    verify: bool = True


def engine_export_settings(
    request: TensorRTExportRequest,
    source: Manifest,
    config: BuildConfig,
    build: dict[str, Any],
    carry: tuple[str, ...],
    **extra: Any,
) -> dict[str, Any]:
    """The export settings of a ``trt`` artifact: its source, ``extra``, the build (configuration,
    profile shapes and ``build``), and the source's settings named in ``carry``."""
    return {
        "command": "detect-export trt",
        "source_artifact": str(request.artifact),
        "source_manifest": {"name": source.name, "version": source.version},
        **extra,
        "tensorrt_build": {**config.describe(), **build},
        **carried_settings(source, carry),
    }


@dataclass(frozen=True)
class BuildConfig:
    """Engine build settings: one optimization profile over the batch dimension of ``input_name``."""

    input_name: str
    height: int
    width: int
    channels: int = 3
    min_batch: int = 1
    opt_batch: int = 8
    max_batch: int = 32
    workspace_gb: float | None = None
    timing_cache: str | None = None

    @classmethod
    def for_artifact(cls, manifest: Manifest, request: TensorRTExportRequest) -> BuildConfig:
        """The build settings a `trt` request asks for, for the artifact's input."""
        return cls(
            input_name=manifest.input.name,
            height=manifest.input.height,
            width=manifest.input.width,
            min_batch=request.min_batch,
            opt_batch=request.opt_batch,
            max_batch=request.max_batch,
            workspace_gb=request.workspace_gb,
            timing_cache=str(request.timing_cache) if request.timing_cache else None,
        )

    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(min, opt, max) input shapes, NHWC."""
        tail = (self.height, self.width, self.channels)
        return (self.min_batch, *tail), (self.opt_batch, *tail), (self.max_batch, *tail)

    def describe(self) -> dict[str, Any]:
        """The settings and the profile's shapes, as a manifest records them."""
        return {**asdict(self), "profile_shapes": [list(s) for s in self.shapes()]}

    def validate(self, model: ModelProto) -> None:
        """Raises ExportError naming the bad value: batch order, workspace, and that the graph's input
        has this name, a dynamic batch and the configured H, W, C."""
        if not 1 <= self.min_batch <= self.opt_batch <= self.max_batch:
            raise ExportError(
                "batch sizes must satisfy 1 <= min <= opt <= max, got "
                f"min {self.min_batch}, opt {self.opt_batch}, max {self.max_batch}"
            )
        if self.workspace_gb is not None and self.workspace_gb <= 0:
            raise ExportError(f"--workspace-gb must be > 0, got {self.workspace_gb}")
        inputs = {i.name: i for i in model.graph.input}
        if self.input_name not in inputs:
            raise ExportError(f"the graph has no input {self.input_name!r}; inputs: {sorted(inputs)}")
        dims = inputs[self.input_name].type.tensor_type.shape.dim
        if len(dims) != 4:
            raise ExportError(f"input {self.input_name!r} has rank {len(dims)}, expected 4 (NHWC)")
        if dims[0].HasField("dim_value") and (self.min_batch, self.max_batch) != (dims[0].dim_value,) * 2:
            raise ExportError(
                f"input {self.input_name!r} has a fixed batch of {dims[0].dim_value}; no dynamic profile"
            )
        static = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims[1:])
        if static != (self.height, self.width, self.channels):
            raise ExportError(
                f"input {self.input_name!r} has shape [B, {static}], config expects "
                f"[B, {self.height}, {self.width}, {self.channels}]"
            )
