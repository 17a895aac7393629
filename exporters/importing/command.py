"""``detect-export import``: a detector trained elsewhere -> a verified artifact folder.

    detect-export import --source model.tflite --spec import.json --output models/<name>/<version> \\
        --samples photo1.jpg photo2.jpg [--notice LICENSE ...]

Nothing is written unless the spec matches the model (outputs, shapes, anchors, labels) and the artifact
agrees with the source's own runtime on the samples (``verify``).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from contract.manifest import InputSpec, Label, Manifest
from exporters.artifact import name_and_version, staged_directory, utc_now
from exporters.errors import ExportError
from exporters.evaluation.golden import golden_for_images
from exporters.importing.anchors import load_anchors
from exporters.importing.heads import build_graph, head_inputs, post_module
from exporters.importing.source import SourceModel, load_source, reference_outputs
from exporters.importing.spec import AnchorHead, DetectionsHead, ImportSpec, read_labels, read_spec
from exporters.importing.verify import Sample, Tolerances, verify_import
from exporters.manifests import provenance
from exporters.onnx.graph import check, op_counts, store_weights_fp16


def run_import(args: argparse.Namespace) -> int:
    spec = read_spec(args.spec)
    base = args.spec.parent
    source = load_source(args.source)
    samples = read_samples(args.samples, spec)
    head = spec.head
    images = np.stack([s.resized for s in samples]).astype(np.float32)
    normalized = (images - np.array(spec.input.mean, np.float32)) / np.array(spec.input.std, np.float32)
    names = head_inputs(spec)
    _check_outputs_exist(source, names)
    raw = reference_outputs(source, normalized, names)
    background = head.background_class if not isinstance(head, DetectionsHead) else None
    labels = read_labels(spec, base, background)
    anchors = load_anchors(head.anchors, base) if isinstance(head, AnchorHead) else None
    shapes = {name: list(value.shape) for name, value in raw.items()}
    check_head_shapes(spec, shapes, len(labels), anchors)
    post = post_module(spec, shapes, anchors, len(labels))
    graph = store_weights_fp16(build_graph(spec, source, post, shapes))
    check(graph, "imported graph")
    verification = verify_import(
        spec, source, graph, samples, raw, anchors, Tolerances(raw=args.raw_tolerance)
    )
    print(f"PASSED: {verification['summary']}")
    name, version = name_and_version(args.output, spec.name, args.version)
    manifest = _manifest(spec, name, version, labels, source, graph, verification, args.spec)
    with staged_directory(args.output, force=args.force) as staging:
        (staging / manifest.file).write_bytes(graph.SerializeToString())
        for notice in args.notice:
            shutil.copyfile(notice, staging / notice.name)
        manifest.write(staging)
        files = [(i, str(path.resolve())) for i, path in enumerate(sample_files(args.samples))]
        manifest = golden_for_images(staging, manifest, Path("/"), files)
        manifest.write(staging)
    print(f"wrote {args.output}")
    return 0


def sample_files(paths: list[Path]) -> list[Path]:
    """``--samples``: image files, and the files of folders."""
    return [p for path in paths for p in (sorted(path.iterdir()) if path.is_dir() else [path])]


def read_samples(paths: list[Path], spec: ImportSpec) -> list[Sample]:
    samples = []
    for path in sample_files(paths):
        try:
            with Image.open(path) as image:
                rgb = image.convert("RGB")
        except OSError as exc:
            raise ExportError(f"sample {path}: not an image ({exc})") from exc
        size = (spec.input.width, spec.input.height)
        resized = np.asarray(rgb.resize(size, Image.Resampling.BILINEAR), dtype=np.uint8)
        if spec.input.color_order == "BGR":
            resized = np.ascontiguousarray(resized[:, :, ::-1])
        samples.append(Sample(path.name, (rgb.height, rgb.width), resized))
    if not samples:
        raise ExportError("--samples: no images")
    return samples


def _check_outputs_exist(source: SourceModel, names: list[str]) -> None:
    missing = [n for n in names if n not in source.output_names]
    if missing:
        raise ExportError(
            f"head names outputs {missing} that the model does not have; it has {source.output_names}"
        )


def check_head_shapes(
    spec: ImportSpec, shapes: dict[str, list[int]], classes: int, anchors: np.ndarray | None
) -> None:
    """The head's outputs have the shapes its type needs, and anchors and labels fit them."""
    head = spec.head
    boxes = shapes[head.boxes]
    if len(boxes) != 3 or boxes[2] != 4:
        raise ExportError(f"head.boxes {head.boxes!r} has shape {_dims(boxes)}; expected [batch, rows, 4]")
    scores = shapes[head.scores]
    if isinstance(head, DetectionsHead):
        for name in (head.scores, head.classes):
            if shapes[name] != boxes[:2]:
                raise ExportError(
                    f"head output {name!r} has shape {_dims(shapes[name])}; expected {_dims(boxes[:2])}"
                )
        return
    if len(scores) != 3 or scores[1] != boxes[1]:
        raise ExportError(
            f"head.scores {head.scores!r} has shape {_dims(scores)}; expected [batch, {boxes[1]}, classes]"
        )
    expected = scores[2] - (0 if head.background_class is None else 1)
    if classes != expected:
        raise ExportError(
            f"labels: {classes} classes (background removed) but {head.scores!r} scores {scores[2]} columns "
            f"({expected} classes{'' if head.background_class is None else ' after the background column'})"
        )
    if anchors is not None and len(anchors) != boxes[1]:
        raise ExportError(f"anchors: {len(anchors)} anchors but {head.boxes!r} has {boxes[1]} rows")


def _dims(shape: list[int]) -> str:
    """A shape as the spec's messages write it: the first dimension is the batch."""
    return "[" + ", ".join(["batch", *map(str, shape[1:])]) + "]"


def _manifest(
    spec: ImportSpec,
    name: str,
    version: str,
    labels: list[str],
    source: SourceModel,
    graph: Any,
    verification: dict[str, Any],
    spec_path: Path,
) -> Manifest:
    p = spec.postprocess
    export_settings = {
        "command": "detect-export import",
        "source_file": source.path.name,
        "source_format": source.format,
        "source_sha256": hashlib.sha256(source.path.read_bytes()).hexdigest(),
        "source": dict(spec.source),
        "spec": spec.model_dump(mode="json"),
        "spec_file": spec_path.name,
        "opset": 17,
        "weight_storage": "float16",
        "op_counts": op_counts(graph),
    }
    return Manifest(
        name=name,
        version=version,
        architecture=spec.architecture,
        backbone=spec.backbone,
        format="onnx",
        precision="fp32",
        file="model.onnx",
        input=InputSpec(height=spec.input.height, width=spec.input.width, color_order=spec.input.color_order),
        labels=tuple(Label(name=label) for label in labels),
        score_threshold=p.score_threshold,
        display_score_threshold=spec.display_score_threshold,
        iou_threshold=p.iou_threshold,
        max_detections=p.max_detections,
        provenance=provenance(export_settings, checkpoint_sha256=None, training_config={}),
        verification={**verification, "checked_at": utc_now()},
    )
