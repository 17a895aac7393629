"""How much the exported EfficientDet's lower pre-NMS top-k (TensorRT: K < 3840) changes its detections.

Runs, on the same letterboxed images of a COCO-format split:

- ``effdet``: effdet's own ``DetBenchPredict`` post-processing (its ``_post_process`` top 5000 and
  ``_batch_detection``: boxes clipped to the input, class-aware NMS 0.5, 100 kept), no score threshold;
- ``effdet_thresholded``: the same, then the artifact's score threshold (what a served model can return);
- ``onnx``: the exported artifact in ONNX Runtime (its ``pre_nms_topk``, e.g. 3000, and score threshold);

and prints COCO AP of each plus how many detections differ between ``effdet_thresholded`` and ``onnx``.

    python scripts/compare_effdet_topk.py --artifact models/effdet/1 --checkpoint runs/.../checkpoint.pt \\
        --data data/synth [--split val] [--max-images 200] [--json report.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from exporters.artifact import read_artifact
from exporters.evaluation.coco_ap import evaluate_split
from exporters.evaluation.compare import Detections, match_detections, summarize_matches
from exporters.evaluation.verify import manifest_to_original, onnx_detector
from exporters.onnx.ort_cpu import cpu_session
from exporters.onnx.wrappers import wrapper_for
from training.detectors.efficientdet.effdet_compat import batch_detection, post_process_topk
from training.detectors.efficientdet.export import EfficientDetWrapper
from training.train import default_split
from training.weights import load_checkpoint

EFFDET_TOPK = 5000


def effdet_reference(wrapper: EfficientDetWrapper, score_threshold: float):  # type: ignore[no-untyped-def]
    """effdet's DetBenchPredict body on the eager raw outputs; boxes normalized to the input."""

    def detect(images: np.ndarray) -> list[Detections]:
        raw = wrapper.raw_outputs(images)
        class_outputs, box_outputs = list(raw[:5]), list(raw[5:])
        k = min(EFFDET_TOPK, wrapper.num_anchors * wrapper.num_classes)
        with torch.no_grad():
            cls, box, idx, classes = post_process_topk(class_outputs, box_outputs, 5, wrapper.num_classes, k)
            # effdet clips boxes to img_size / img_scale before NMS; the letterboxed input square here
            n, size = len(images), float(wrapper.image_size)
            img_scale, img_size = torch.ones(n), torch.full((n, 2), size)
            dets = batch_detection(n, cls, box, wrapper.anchors_yxyx, idx, classes, img_scale, img_size)
        out = []
        for rows in dets.numpy():
            rows = rows[(rows[:, 5] > 0) & (rows[:, 4] > score_threshold)]
            out.append(
                Detections(rows[:, :4] / wrapper.image_size, rows[:, 4], rows[:, 5].astype(np.int64) - 1)
            )
        return out

    return detect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--artifact", required=True, type=Path)
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--data", required=True)
    parser.add_argument("--split")
    parser.add_argument("--max-images", type=int)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    manifest, model_path = read_artifact(args.artifact)
    wrapper = wrapper_for(load_checkpoint(args.checkpoint), manifest.architecture)
    if not isinstance(wrapper, EfficientDetWrapper):
        raise SystemExit(f"{args.artifact} is a {manifest.architecture} artifact, not efficientdet-d0")
    split = args.split or default_split(args.data, "val")
    session = cpu_session(model_path)
    thresholded = effdet_reference(wrapper, manifest.score_threshold)
    onnx = onnx_detector(session)
    matches = []

    def onnx_and_compare(images: np.ndarray) -> list[Detections]:
        got = onnx(images)
        for ref, dets in zip(thresholded(images), got, strict=True):
            matches.append(
                match_detections(
                    ref,
                    dets,
                    box_tol=1e-4,
                    score_tol=1e-5,
                    score_threshold=manifest.score_threshold,
                    iou_threshold=manifest.iou_threshold,
                    max_detections=manifest.max_detections,
                )
            )
        return got

    evaluators = evaluate_split(
        {
            "effdet": effdet_reference(wrapper, -1.0),
            "effdet_thresholded": thresholded,
            "onnx": onnx_and_compare,
        },
        root=args.data,
        split=split,
        categories=wrapper.checkpoint.categories,
        resize=wrapper.resize,
        max_images=args.max_images,
        to_original=manifest_to_original(manifest),
    )
    stats = {name: ev.stats["bbox"] for name, ev in evaluators.items()}
    post = manifest.provenance.export_settings.get("postprocess", {})
    report = {
        "split": split,
        "pre_nms_topk": post.get("pre_nms_topk"),
        "score_threshold": manifest.score_threshold,
        "ap": {name: s["AP"] for name, s in stats.items()},
        "onnx_vs_effdet_thresholded": summarize_matches(matches),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps({**report, "stats": stats}, indent=2) + "\n")


if __name__ == "__main__":
    main()
