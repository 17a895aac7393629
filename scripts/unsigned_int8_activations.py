"""Give an INT8 artifact written with signed activation quantizers back NNCF's unsigned ones, and gate it
against its recorded parent AP under every CPU class this machine reaches.

INT8 artifacts made before 2026-11-28 had every UINT8 activation quantizer rewritten as INT8 (scale x
255/127). OpenVINO runs those as INT8 only on AMX CPUs and elsewhere loses up to half the AP
(docs/quantization.md, "The same answers on every CPU"). `exporters.precision.nncf_int8
.to_unsigned_activations` undoes the rewrite for every activation that is never negative on the
artifact's own calibration images (NNCF's rule for choosing UINT8), which gives back NNCF's quantizers
(on SSD300, whose parent is here, the initializers of a fresh quantization to within one float32 ulp
of three scales). It is the way to repair an artifact whose fp32 parent is not in the repository; with
the parent at hand, ``detect-export quantize`` makes a new variant instead.

    .venv/bin/python scripts/unsigned_int8_activations.py --artifact models/ssd320-synth-int8/1 \
        --data data/calibration [--output DIR] [--images 300]

Writes model.onnx, golden.npz and manifest.json (accuracy with ``by_isa``, display threshold, quality
baseline, self-check) to ``--output`` (default: in place) only if every class keeps the recorded parent
AP within the manifest's gate.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from contract.manifest import Manifest
from exporters.artifact import utc_now
from exporters.evaluation.golden import write_artifact_golden
from exporters.evaluation.served_eval import served_batches, served_metrics
from exporters.precision.gate import by_isa, gate_failures, measure_by_class, metric_ap
from exporters.precision.nncf_int8 import calibration_files, to_unsigned_activations


def nonnegative_activations(model: onnx.ModelProto, manifest: Manifest, data: str, images: int) -> set[str]:
    """The tensors the activation quantizers read that are never negative on the calibration images the
    manifest records (ONNX Runtime running the QDQ graph itself)."""
    import onnxruntime as ort

    inits = {init.name for init in model.graph.initializer}
    names = sorted({node.input[0] for node in model.graph.node if node.op_type == "QuantizeLinear"} - inits)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in names:
        probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    calibration = manifest.provenance.export_settings.get("calibration", {})
    images_dir, files = calibration_files(
        data, calibration.get("split", "train"), images, int(calibration.get("seed", 0))
    )
    lowest = dict.fromkeys(names, np.inf)
    for batch, _, _ in served_batches(manifest, images_dir, files, 1):
        for name, value in zip(names, session.run(names, {manifest.input.name: batch}), strict=True):
            if value.size:
                lowest[name] = min(lowest[name], float(value.min()))
    return {name for name in names if lowest[name] >= 0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--artifact", type=Path, required=True, help="INT8 artifact with signed activations")
    parser.add_argument("--data", required=True, help="the COCO folder of its calibration and gate")
    parser.add_argument("--output", type=Path, help="where to write it (default: in place)")
    parser.add_argument("--images", type=int, default=300, help="calibration images the signs are read on")
    args = parser.parse_args(argv)
    manifest = Manifest.read(args.artifact)
    accuracy = manifest.accuracy
    if manifest.precision != "int8" or accuracy is None or accuracy.parent_box_ap is None:
        print(f"{args.artifact}: not an INT8 artifact with a recorded parent AP", file=sys.stderr)
        return 2
    model = onnx.load(str(args.artifact / manifest.file))
    nonnegative = nonnegative_activations(model, manifest, args.data, args.images)
    to_unsigned_activations(model, nonnegative)
    print(f"{len(nonnegative)} activation quantizers made UINT8 again")
    output = args.output or args.artifact
    with tempfile.TemporaryDirectory(prefix="unsigned-") as tmp:
        work = Path(tmp)
        onnx.save(model, str(work / manifest.file))
        manifest.write(work)
        metrics = served_metrics(work, args.data, accuracy.split)
        classes = measure_by_class(work, metrics, args.data, accuracy.split, "auto", None)
        figures = by_isa(classes, accuracy.parent_box_ap, accuracy.parent_mask_ap)
        display = metrics.get("display_threshold")
        settings = dict(manifest.provenance.export_settings)
        settings["nncf"] = {
            **settings.get("nncf", {}),
            "settings": {
                **settings.get("nncf", {}).get("settings", {}),
                "activations": "NNCF's own: UINT8 where the calibration images never make them negative, "
                "INT8 elsewhere (given back by scripts/unsigned_int8_activations.py)",
            },
        }
        mask_ap = metric_ap(metrics, "segm")
        record = accuracy.model_copy(
            update={
                "runtime": str(metrics["runtime"]),
                "box_ap": float(metrics["bbox"]["AP"]),
                "mask_ap": mask_ap,
                "box_ap_delta": float(metrics["bbox"]["AP"]) - accuracy.parent_box_ap,
                "mask_ap_delta": None
                if mask_ap is None or accuracy.parent_mask_ap is None
                else mask_ap - accuracy.parent_mask_ap,
                "measured_at": utc_now(),
                "cpu_int8": None,
                "by_isa": figures,
            }
        )
        for name, figure in figures.items():
            mask = (
                ""
                if figure.mask_ap is None
                else f", mask AP {figure.mask_ap:.4f} ({figure.mask_ap_delta:+.4f})"
            )
            ap = f"box AP {figure.box_ap:.4f} ({figure.box_ap_delta:+.4f}){mask}"
            print(f"  as {name}: {ap}; {figure.runtime}")
        failures = gate_failures(record, accuracy.max_ap_drop or 0.005)
        if failures:
            print(f"not written: {'; '.join(failures)}", file=sys.stderr)
            return 3
        updated = manifest.model_copy(
            update={
                "accuracy": record,
                "display_score_threshold": display["threshold"] if display else None,
                "metrics": {"display_threshold": display} if display else {},
                "provenance": manifest.provenance.model_copy(update={"export_settings": settings}),
            }
        )
        updated = updated.model_copy(
            update={"quality": metrics["detections"].quality(updated.default_threshold)}
        )
        updated = write_artifact_golden(work, args.data, accuracy.split, manifest=updated)
        output.mkdir(parents=True, exist_ok=True)
        for name in (manifest.file, "golden.npz"):
            shutil.copyfile(work / name, output / name)
        updated.write(output)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
