"""``detect-export trt``: an ONNX artifact -> FP16 ONNX -> strongly typed TensorRT engine (``model.plan``).

The only module that knows TensorRT: the ONNX operators its parser accepts, the build configuration
(optimization profile for the dynamic batch, workspace, timing cache) and the build itself through the
real ``tensorrt`` Python API (imported only when a GPU is present).

Steps, in order, everything that needs no GPU first:

1. read the FP32 ONNX artifact and its manifest; validate the build configuration against it;
2. convert to FP16 in the graph (``exporters.fp16``: strong typing takes precision from the ONNX);
3. check every op of both graphs against TensorRT's ONNX operator list (and its constraints);
4. compare FP16 with FP32 in ONNX Runtime on the CPU (raw heads, detections, and COCO AP with data);
5. write the output directory: ``model.fp16.onnx``, and
   - with a GPU: build the engine with the profile and timing cache, run it once against ONNX Runtime,
     write ``model.plan`` + manifest (format tensorrt, precision fp16);
   - without one: write a manifest for the FP16 ONNX (format onnx, precision fp16; servable by ONNX
     Runtime, e.g. its TensorRT execution provider), then stop with :class:`GpuRequiredError`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, numpy_helper

from exporters.artifact import name_and_version, read_artifact, staged_directory, tool_versions, utc_now
from exporters.errors import (
    ExportError,
    GpuRequiredError,
    InvalidModelError,
    OutputExistsError,
    VerificationError,
)
from exporters.fp16 import convert_to_fp16, fp16_accuracy, fp16_scopes
from exporters.onnx_graph import load_checked, op_counts
from exporters.postprocess_graph import TENSORRT_MAX_TOPK
from exporters.runtime import cpu_session
from exporters.verify import generated_batches, manifest_resize, raw_names_from_manifest
from service.manifest import MASK_OUTPUT, OUTPUT_NAMES, Manifest, Provenance

PLAN_FILE = "model.plan"
FP16_FILE = "model.fp16.onnx"

# ONNX operators (default domain) the TensorRT 10.x ONNX parser supports (onnx-tensorrt
# docs/operators.md, TensorRT 10.x; opsets 9 and up). NonMaxSuppression maps to INMSLayer (>= 8.5),
# RoiAlign is supported from 8.5. Constraints checked separately: see `_constraint_problems`.
_TENSORRT_ONNX_OPS_TABLE = """
    Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization
    BlackmanWindow Cast CastLike Ceil Celu Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos
    Cosh CumSum DeformConv DepthToSpace DequantizeLinear Div Dropout Einsum Elu Equal Erf Exp Expand
    EyeLike Flatten Floor Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalLpPool
    GlobalMaxPool Greater GreaterOrEqual GridSample GroupNormalization GRU HammingWindow HannWindow
    HardSigmoid HardSwish Hardmax Identity If ImageScaler InstanceNormalization IsInf IsNaN
    LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax Loop LRN LSTM LpNormalization LpPool
    MatMul Max MaxPool Mean MeanVarianceNormalization Min Mish Mod Mul Neg NonMaxSuppression NonZero
    Not OneHot Or Pad ParametricSoftplus Pow PRelu QuantizeLinear RandomNormal RandomNormalLike
    RandomUniform RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp
    ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize
    ReverseSequence RNN RoiAlign Round ScaledTanh Scan Scatter ScatterElements ScatterND Selu Shape
    Shrink Sigmoid Sign Sin Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze
    Sub Sum Tan Tanh ThresholdedRelu Tile TopK Transpose Trilu Unsqueeze Upsample Where Xor
"""
TENSORRT_ONNX_OPS: frozenset[str] = frozenset(_TENSORRT_ONNX_OPS_TABLE.split())
TENSORRT_MIN_OPSET = 9
# Tensor element types TensorRT has no kernels for inside a network (UINT8 only as network I/O).
_IO_ONLY_TYPES: dict[int, str] = {TensorProto.UINT8: "UINT8"}
_UNSUPPORTED_TYPES: dict[int, str] = {
    TensorProto.DOUBLE: "DOUBLE",
    TensorProto.STRING: "STRING",
    TensorProto.COMPLEX64: "COMPLEX64",
}


# ---------------------------------------------------------------------------------------------- op check
def _constants(model: ModelProto) -> dict[str, np.ndarray]:
    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _constraint_problems(model: ModelProto) -> list[str]:
    """TensorRT's restrictions on ops this project's graphs use (TopK, NonMaxSuppression, reductions)."""
    constants = _constants(model)
    problems = []
    for node in model.graph.node:
        where = f"{node.op_type} node {node.name!r}"
        if node.op_type == "TopK":
            k = constants.get(node.input[1]) if len(node.input) > 1 else None
            if k is None:
                problems.append(f"{where}: K must be a build-time constant")
            elif int(np.asarray(k).reshape(-1)[0]) > TENSORRT_MAX_TOPK:
                problems.append(f"{where}: K = {int(np.asarray(k).reshape(-1)[0])} must be < 3840")
            if any(a.name == "sorted" and a.i == 0 for a in node.attribute):
                problems.append(f"{where}: sorted must be 1")
        elif node.op_type == "NonMaxSuppression":
            for index, what in (
                (2, "max_output_boxes_per_class"),
                (3, "iou_threshold"),
                (4, "score_threshold"),
            ):
                if len(node.input) > index and node.input[index] and node.input[index] not in constants:
                    problems.append(f"{where}: {what} must be a constant")
        elif node.op_type.startswith("Reduce") and node.input[1:2] and node.input[1] not in ("", *constants):
            problems.append(f"{where}: axes must be a constant")
    return problems


def _type_problems(model: ModelProto) -> list[str]:
    from exporters.onnx_graph import tensor_elem_types

    io = {v.name for v in (*model.graph.input, *model.graph.output)}
    problems = []
    for name, elem in tensor_elem_types(model).items():
        if elem in _UNSUPPORTED_TYPES:
            problems.append(
                f"tensor {name!r} has type {_UNSUPPORTED_TYPES[elem]}, which TensorRT does not support"
            )
        elif elem in _IO_ONLY_TYPES and name not in io:
            problems.append(
                f"tensor {name!r} has type {_IO_ONLY_TYPES[elem]}, allowed only as network input/output"
            )
    return problems


def check_tensorrt_ops(model: ModelProto) -> dict[str, Any]:
    """Does TensorRT's ONNX parser accept every node of ``model``?

    Returns ``{"passed", "unsupported": {op: [node names]}, "problems": [...], "op_counts": {...}}``;
    problems cover custom domains, the opset, TopK / NonMaxSuppression constraints and tensor types.
    """
    unsupported: dict[str, list[str]] = {}
    problems = []
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            unsupported.setdefault(f"{node.domain}::{node.op_type}", []).append(node.name)
        elif node.op_type not in TENSORRT_ONNX_OPS:
            unsupported.setdefault(node.op_type, []).append(node.name)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < TENSORRT_MIN_OPSET:
        problems.append(f"opset {opset} is below TensorRT's minimum {TENSORRT_MIN_OPSET}")
    problems += _constraint_problems(model)
    problems += _type_problems(model)
    return {
        "passed": not unsupported and not problems,
        "unsupported": unsupported,
        "problems": problems,
        "op_counts": op_counts(model),
        "checked_against": "TensorRT 10.x ONNX parser operator list",
    }


def describe_op_check(report: dict[str, Any]) -> str:
    parts = [f"{op} ({len(nodes)} nodes, e.g. {nodes[0]!r})" for op, nodes in report["unsupported"].items()]
    return "; ".join([*(f"unsupported op {p}" for p in parts), *report["problems"]])


# ---------------------------------------------------------------------------------------------- config
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


# ---------------------------------------------------------------------------------------------- GPU
def gpu_unavailable_reason() -> str | None:
    """None when an NVIDIA GPU is usable here, else why not (what was checked)."""
    try:
        import torch

        if torch.cuda.is_available():
            return None
    except ImportError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"nvidia-smi failed: {exc}"
        if listing.returncode == 0 and "GPU" in listing.stdout:
            return None
        return f"nvidia-smi lists no GPU (exit {listing.returncode})"
    return "no NVIDIA GPU: torch.cuda.is_available() is False and nvidia-smi is not installed"


def _import_tensorrt() -> Any:
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise ExportError(
            "the tensorrt Python package is not installed; "
            "install the serve-gpu extra (pip install '.[serve-gpu]')"
        ) from exc
    return trt


def build_engine(onnx_path: Path, config: BuildConfig, plan_path: Path, int8: bool = False) -> dict[str, Any]:
    """Build a strongly typed engine from ``onnx_path`` (precision from the graph) and write ``plan_path``.

    ``int8``: the graph is an explicit-precision QDQ network (QuantizeLinear / DequantizeLinear pairs);
    strong typing takes INT8 from its Q/DQ nodes, and a TensorRT without strong typing gets the INT8 flag.

    The timing cache is read from ``config.timing_cache`` when it exists and written back (atomically)
    after the build, so repeated builds reuse kernel timings.
    """
    trt = _import_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    # Strong typing: required opt-in on TensorRT 10.x, the only mode (flag accepted, ignored) on 11.x.
    strongly_typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if strongly_typed is not None:
        flags |= 1 << int(strongly_typed)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise ExportError(f"TensorRT cannot parse {onnx_path}: {errors}")
    builder_config = builder.create_builder_config()
    if int8 and strongly_typed is None:
        builder_config.set_flag(trt.BuilderFlag.INT8)
    if config.workspace_gb is not None:
        builder_config.set_memory_pool_limit(
            trt.MemoryPoolType.WORKSPACE, int(config.workspace_gb * (1 << 30))
        )
    profile = builder.create_optimization_profile()
    profile.set_shape(config.input_name, *config.shapes())
    builder_config.add_optimization_profile(profile)
    cache_path = Path(config.timing_cache) if config.timing_cache else None
    cache_bytes = cache_path.read_bytes() if cache_path is not None and cache_path.is_file() else b""
    timing_cache = builder_config.create_timing_cache(cache_bytes)
    builder_config.set_timing_cache(timing_cache, ignore_mismatch=False)
    started = time.perf_counter()
    serialized = builder.build_serialized_network(network, builder_config)
    if serialized is None:
        raise ExportError("TensorRT engine build failed (see TensorRT's log above)")
    plan_path.write_bytes(bytes(serialized))
    if cache_path is not None:
        tmp = cache_path.with_name(f".{cache_path.name}.tmp")
        tmp.write_bytes(bytes(builder_config.get_timing_cache().serialize()))
        os.replace(tmp, cache_path)
    return {
        "tensorrt": str(trt.__version__),
        "build_seconds": round(time.perf_counter() - started, 1),
        "strongly_typed": strongly_typed is not None,
        "int8": int8,
        "timing_cache_reused": bool(cache_bytes),
    }


class EngineRunner:
    """A deserialized engine with one execution context; runs uint8 batches (GPU only).

    I/O buffers are torch CUDA tensors (torch is already a dependency of the exporters), allocated per
    call from the context's resolved output shapes.
    """

    def __init__(self, plan_path: Path) -> None:
        import torch

        self._torch = torch
        self._trt = _import_tensorrt()
        logger = self._trt.Logger(self._trt.Logger.WARNING)
        self.engine = self._trt.Runtime(logger).deserialize_cuda_engine(plan_path.read_bytes())
        if self.engine is None:
            raise InvalidModelError(f"TensorRT cannot deserialize {plan_path}")
        self.context = self.engine.create_execution_context()
        trt, torch = self._trt, self._torch
        self._dtypes = {
            trt.DataType.FLOAT: torch.float32,
            trt.DataType.INT32: torch.int32,
            trt.DataType.UINT8: torch.uint8,
            trt.DataType.INT64: torch.int64,
        }
        io_names = {self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)}
        # The contract outputs this engine has (detection_masks for mask models).
        self.output_names = [n for n in (*OUTPUT_NAMES, MASK_OUTPUT) if n in io_names]

    def run(self, images: np.ndarray) -> dict[str, np.ndarray]:
        torch = self._torch
        self.context.set_input_shape("images", tuple(images.shape))
        buffers = {"images": torch.from_numpy(np.ascontiguousarray(images)).cuda()}
        for name in self.output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            dtype = self._dtypes[self.engine.get_tensor_dtype(name)]
            buffers[name] = torch.empty(shape, dtype=dtype, device="cuda")
        for name, tensor in buffers.items():
            self.context.set_tensor_address(name, tensor.data_ptr())
        stream = torch.cuda.current_stream()
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise ExportError("TensorRT engine execution failed")
        stream.synchronize()
        return {name: buffers[name].cpu().numpy() for name in self.output_names}


def run_engine(plan_path: Path, images: np.ndarray) -> dict[str, np.ndarray]:
    """Run a built engine once on uint8 images (GPU)."""
    return EngineRunner(plan_path).run(images)


# ---------------------------------------------------------------------------------------------- command
@dataclass
class TensorRTExportRequest:
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


def export_tensorrt(request: TensorRTExportRequest) -> Manifest:
    """Run the ``trt`` command (see the module docstring); returns the manifest written.

    Raises:
        GpuRequiredError: after writing the FP16 ONNX artifact, when no GPU is available.
        InvalidModelError / ExportError / OutputExistsError: bad input, before anything is written.
        VerificationError: TensorRT cannot take the graph, or FP16 is out of tolerance; nothing written.
    """
    if request.output.exists() and not request.force:
        raise OutputExistsError(
            f"output directory {request.output} already exists (use --force to replace it)"
        )
    manifest, model_path = read_artifact(request.artifact)
    if manifest.format == "onnx" and manifest.precision == "int8":
        from exporters.tensorrt_int8 import export_int8_engine

        return export_int8_engine(request, manifest, model_path)
    if manifest.format != "onnx" or manifest.precision != "fp32":
        raise InvalidModelError(
            f"{request.artifact} is a {manifest.format}/{manifest.precision} artifact; "
            "trt needs the FP32 ONNX one"
        )
    fp32 = load_checked(model_path)
    config = BuildConfig.for_artifact(manifest, request)
    config.validate(fp32)
    raw = raw_names_from_manifest(manifest)
    fp16 = convert_to_fp16(fp32, manifest.input.name, raw, fp16_scopes(manifest))
    ops = {"fp32": check_tensorrt_ops(fp32), "fp16": check_tensorrt_ops(fp16)}
    for which, report in ops.items():
        if not report["passed"]:
            raise VerificationError(
                f"the {which} graph has ops TensorRT cannot build: {describe_op_check(report)}"
            )
    accuracy = fp16_accuracy(fp32, fp16, manifest, request.data, request.split, request.max_images).to_dict()
    if not accuracy["passed"] and request.verify:
        raise VerificationError(
            f"FP16 is out of tolerance against FP32: {_accuracy_summary(accuracy)} "
            "(nothing written; --no-verify builds anyway and records the accuracy in the manifest)"
        )

    name, version = name_and_version(request.output, request.name, request.version)
    reason = gpu_unavailable_reason()
    export_settings = {
        "command": "detect-export trt",
        "source_artifact": str(request.artifact),
        "source_manifest": {"name": manifest.name, "version": manifest.version},
        "fp16_conversion": "onnxconverter-common, network sub-graph only (keep_io_types); pre/post FP32",
        "tensorrt_build": {**asdict(config), "profile_shapes": [list(s) for s in config.shapes()]},
        **{
            k: v
            for k, v in manifest.provenance.export_settings.items()
            if k in ("raw_outputs", "postprocess")
        },
    }
    verification: dict[str, Any] = {
        "fp16": accuracy,
        "tensorrt_ops": ops["fp16"],
        "source": manifest.verification,
    }
    with staged_directory(request.output, force=request.force) as staging:
        onnx.save(fp16, str(staging / FP16_FILE))
        if reason is None:
            build = build_engine(staging / FP16_FILE, config, staging / PLAN_FILE)
            verification["engine"] = _check_engine(staging / PLAN_FILE, fp16, manifest)
            export_settings["tensorrt_build"]["result"] = build
            file, fmt = PLAN_FILE, "tensorrt"
        else:
            export_settings["tensorrt_build"]["result"] = f"not built: {reason}"
            file, fmt = FP16_FILE, "onnx"
        written = manifest.model_copy(
            update={
                "name": name,
                "version": version,
                "format": fmt,
                "precision": "fp16",
                "file": file,
                "max_batch_size": config.max_batch,
                # The FP16 ONNX keeps the dynamic batch; an engine takes what its profile allows.
                "dynamic_batch": fmt == "onnx" or config.min_batch != config.max_batch,
                "provenance": Provenance(
                    checkpoint_sha256=manifest.provenance.checkpoint_sha256,
                    training_config=manifest.provenance.training_config,
                    export_settings=export_settings,
                    tool_versions=tool_versions(),
                    created_at=utc_now(),
                ),
                "verification": verification,
            }
        )
        Manifest.model_validate(written.model_dump())  # model_copy skips validation
        written.write(staging)
    if reason is not None:
        raise GpuRequiredError(
            f"TensorRT engine not built: {reason}. Everything that needs no GPU is done: "
            f"{request.output / FP16_FILE} (FP16 ONNX: checked, all ops TensorRT-supported, accuracy checked "
            "against FP32) with a manifest for it (format onnx, precision fp16). Run the same command with "
            f"--force on a machine with an NVIDIA GPU to build {PLAN_FILE}."
        )
    return written


def _accuracy_summary(report: dict[str, Any]) -> str:
    parts = [f"{n} rel err {r['max_rel_error']:.2e}" for n, r in report["raw_outputs"].items()]
    if "coco" in report:
        parts.append(f"AP fp32 {report['coco']['fp32_ap']:.4f} fp16 {report['coco']['fp16_ap']:.4f}")
    parts += report["contract"]["problems"][:3]
    return "; ".join(parts)


def _check_engine(plan_path: Path, fp16: ModelProto, manifest: Manifest) -> dict[str, Any]:
    """The engine against the same FP16 graph in ONNX Runtime on one generated batch (GPU only)."""
    from exporters.compare import Detections, contract_problems, match_detections, summarize_matches
    from exporters.runtime import run_contract

    batch = generated_batches(manifest_resize(manifest), sizes=(3,))[0]
    engine_out = run_engine(plan_path, batch)
    reference = run_contract(cpu_session(fp16), batch)
    matches = [
        match_detections(
            ref,
            got,
            box_tol=1e-2,
            score_tol=1e-2,
            score_threshold=manifest.score_threshold,
            iou_threshold=manifest.iou_threshold,
            max_detections=manifest.max_detections,
        )
        for ref, got in zip(
            Detections.from_contract(reference), Detections.from_contract(engine_out), strict=True
        )
    ]
    problems = contract_problems(engine_out, len(batch), manifest.max_detections)
    return {
        "contract": {"passed": not problems, "problems": problems},
        "detections_vs_onnxruntime": summarize_matches(matches),
    }
