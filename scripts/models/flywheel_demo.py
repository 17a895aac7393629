"""The data flywheel end to end, on data this project makes: serve, see the drift, capture, label,
fine-tune, gate, roll the new version out with a canary and a shadow, and compare.

    nohup .venv/bin/python scripts/models/flywheel_demo.py > runs/flywheel/demo.log 2>&1 &

Stages (each writes ``<work>/stages/<stage>.json`` and is skipped when that file exists, so a stopped run
resumes where it stopped; delete a stage's file to run it again):

1. ``data``: the original synthetic split (``detect-train synth --seed 0``: the served model's kind of data)
   and a shifted one (``--shift dark``: dim, blue-cast scenes; seed 1), whose ``train`` split stands for the
   traffic after the scenes changed and whose ``val`` split is held out for AP.
2. ``base``: the served model, ``models/efficientdet-d0-synth/1`` (fp32), copied into the demo's
   repository with its accuracy and quality baseline recorded on the original val split
   (``detect-export eval --write``), and its checkpoint rebuilt from the artifact
   (``scripts/models/checkpoint_from_artifact.py``: none is shipped).
3. ``traffic``: ``detect-serve`` with capture on; original val images, then the shifted traffic; the
   quality metrics of ``/metrics`` for each phase (the drift signal) and what capture kept.
4. ``label``: the captured COCO file's predictions replaced by the generator's ground truth (found by the
   image bytes), standing in for a person's review.
5. ``finetune``: ``detect-train train --finetune-data`` from the rebuilt checkpoint, BatchNorm frozen,
   reviewed images mixed 1:1 with original ones, a few steps.
6. ``gate``: ``detect-export onnx`` (checked against eager PyTorch), ``verify`` (display threshold) and
   ``eval --write`` on the original val split; refused when its AP there falls more than ``--max-ap-drop``
   below the serving version's (forgetting). INT8 (``detect-export quantize``) only with ``--int8``.
7. ``rollout``: ``detect-serve`` with version 1, version 2 rolled out with a canary share and a shadow copy
   of every request; the shifted val images sent; agreement and the canary split from ``/metrics``; then
   the rollout undone in one call.
8. ``report``: AP of both versions on the shifted and original val splits, the table in
   ``<work>/report.json`` and a line in ``docs/results/flywheel.jsonl``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from flywheel_server import BIN, MODEL, ROOT, DemoServer, log, quality, run  # scripts/models/


class Demo:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work: Path = args.work
        self.data: Path = args.data
        self.repo = self.work / "repo"
        self.stages = self.work / "stages"
        self.stages.mkdir(parents=True, exist_ok=True)
        self.server = DemoServer(self.work, self.repo, args.port)

    # ------------------------------------------------------------------ stage bookkeeping

    def stage(self, name: str, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        path = self.stages / f"{name}.json"
        if path.exists():
            log(f"stage {name}: done before, skipped ({path})")
            result: dict[str, Any] = json.loads(path.read_text())
            return result
        log(f"stage {name}")
        started = time.monotonic()
        result = body()
        result["seconds"] = round(time.monotonic() - started, 1)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2))
        tmp.replace(path)
        log(f"stage {name}: {json.dumps(result)[:600]}")
        return result

    # ------------------------------------------------------------------ 1. data

    def make_data(self) -> dict[str, Any]:
        original, shifted = self.data / "original", self.data / "shifted"
        synth = [BIN / "detect-train", "synth"]
        if not (original / "annotations" / "instances_val.json").exists():
            run(*synth, "--out", original, "--num-train", "2000", "--num-val", "200", "--seed", "0")
        run(
            *synth, "--out", shifted, "--num-train", str(self.args.traffic), "--num-val",
            str(self.args.heldout), "--seed", "1", "--shift", self.args.shift,
        )  # fmt: skip
        return {"original": str(original), "shifted": str(shifted), "shift": self.args.shift}

    # ------------------------------------------------------------------ 2. base

    def make_base(self) -> dict[str, Any]:
        from exporters.precision.quantize import record_accuracy

        source = ROOT / "models" / MODEL / "1"
        target = self.repo / MODEL / "1"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target)
        accuracy = record_accuracy(
            target, str(self.data / "original"), "val", "auto", None, "flywheel original val", write=True
        )
        checkpoint = self.work / "base" / "checkpoint.pt"
        run(
            sys.executable,
            "scripts/models/checkpoint_from_artifact.py",
            "--artifact",
            source,
            "--output",
            checkpoint,
        )
        return {"artifact": str(target), "checkpoint": str(checkpoint), "original_val_ap": accuracy.box_ap}

    # ------------------------------------------------------------------ 3. traffic, drift, capture

    def traffic(self) -> dict[str, Any]:
        captures = self.work / "captures"
        if captures.exists():
            shutil.rmtree(captures)
        env = {
            "DETECT_CAPTURE_DIR": str(captures),
            "DETECT_CAPTURE_RANDOM_SHARE": "0.05",
            "DETECT_CAPTURE_MAX_PER_MINUTE": "10000",
        }
        server = self.server.serve(env)
        try:
            phases: dict[str, Any] = {}
            original = sorted((self.data / "original" / "val").glob("*.jpg"))[: self.args.baseline_images]
            shifted = sorted((self.data / "shifted" / "train").glob("*.jpg"))
            for phase, images in (("original", original), ("shifted", shifted)):
                before = self.server.metrics()
                self.server.send(images)
                phases[phase] = quality(before, self.server.metrics(), len(images))
            deadline = time.monotonic() + 60
            while (
                httpx.get(self.server.url("/v1/captures"), timeout=10).json()["queued"]
                and time.monotonic() < deadline
            ):
                time.sleep(0.5)
            summary = httpx.get(self.server.url("/v1/captures"), timeout=10).json()
            baseline_share = f"detect_quality_baseline_no_detection_share{{model={MODEL}}}"
            baseline = self.server.metrics().get(baseline_share)
        finally:
            server.terminate()
            server.wait(60)
        return {"phases": phases, "baseline_no_detection_share": baseline, "captures": summary}

    # ------------------------------------------------------------------ 4. label

    def label(self) -> dict[str, Any]:
        """The captured dataset with the generator's ground truth in place of the predictions."""
        captured = json.loads(
            (self.work / "captures" / "annotations" / "instances_captured.json").read_text()
        )
        truth: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        for root, split in ((self.data / "shifted", "train"), (self.data / "original", "val")):
            coco = json.loads((root / "annotations" / f"instances_{split}.json").read_text())
            by_image: dict[int, list[dict[str, Any]]] = {}
            for ann in coco["annotations"]:
                by_image.setdefault(ann["image_id"], []).append(ann)
            for image in coco["images"]:
                digest = hashlib.sha256((root / split / image["file_name"]).read_bytes()).hexdigest()
                truth[digest] = (root.name, by_image.get(image["id"], []))
            categories = coco["categories"]
        out = self.work / "reviewed"
        if out.exists():
            shutil.rmtree(out)
        (out / "captured").mkdir(parents=True)
        (out / "annotations").mkdir()
        images, annotations, unknown = [], [], 0
        sources: dict[str, int] = {}
        for image in captured["images"]:
            source = self.work / "captures" / "captured" / image["file_name"]
            found = truth.get(hashlib.sha256(source.read_bytes()).hexdigest())
            if found is None:
                unknown += 1
                continue
            shutil.copyfile(source, out / "captured" / image["file_name"])
            key = f"{found[0]}:{image['capture_reason']}"
            sources[key] = sources.get(key, 0) + 1
            images.append({k: image[k] for k in ("id", "file_name", "width", "height")})
            for ann in found[1]:
                annotations.append(
                    {
                        "id": len(annotations) + 1,
                        "image_id": image["id"],
                        "category_id": ann["category_id"],
                        "bbox": ann["bbox"],
                        "area": ann["area"],
                        "iscrowd": 0,
                    }
                )
        reviewed = {"images": images, "annotations": annotations, "categories": categories}
        (out / "annotations" / "instances_captured.json").write_text(json.dumps(reviewed))
        reasons: dict[str, int] = {}
        for image in captured["images"]:
            reasons[image["capture_reason"]] = reasons.get(image["capture_reason"], 0) + 1
        return {
            "reviewed": str(out),
            "images": len(images),
            "annotations": len(annotations),
            "predictions_replaced": len(captured["annotations"]),
            "by_reason": reasons,
            "by_source_and_reason": sources,
            "unmatched_images": unknown,
        }

    # ------------------------------------------------------------------ 5. fine-tune

    def finetune(self) -> dict[str, Any]:
        output = self.work / "finetune"
        run(
            BIN / "detect-train", "train", "--preset", "efficientdet-d0-cpu-small",
            "--data", self.data / "original", "--finetune-data", self.work / "reviewed",
            "--mix-ratio", str(self.args.mix_ratio), "--weights", self.work / "base" / "checkpoint.pt",
            "--model-arg", "freeze_bn=true", "--output", output, "--epochs", "1000",
            "--max-iters", str(self.args.steps), "--batch-size", str(self.args.batch_size),
            "--warmup-iters", "5", "--base-lr", str(self.args.base_lr), "--eval-every", "1000",
            "--workers", "1", "--log-interval", "5",
        )  # fmt: skip
        lines = (output / "metrics.jsonl").read_text().splitlines()
        last = json.loads(lines[-1]) if lines else {}
        return {"checkpoint": str(output / "checkpoint.pt"), "steps": self.args.steps, "last_log": last}

    # ------------------------------------------------------------------ 6. gate

    def gate(self, base: dict[str, Any]) -> dict[str, Any]:
        from exporters.precision.quantize import record_accuracy

        checkpoint = self.work / "finetune" / "checkpoint.pt"
        artifact = self.work / "candidate" / MODEL / "2"
        original = self.data / "original"
        export = BIN / "detect-export"
        run(export, "onnx", "--checkpoint", checkpoint, "--output", artifact, "--force")
        run(export, "verify", "--artifact", artifact, "--checkpoint", checkpoint, "--data", original)
        accuracy = record_accuracy(
            artifact, str(original), "val", "auto", None, "flywheel original val", write=True
        )
        drop = base["original_val_ap"] - accuracy.box_ap
        result: dict[str, Any] = {
            "artifact": str(artifact),
            "original_val_ap": accuracy.box_ap,
            "ap_drop_vs_serving": drop,
            "max_ap_drop": self.args.max_ap_drop,
            "passed": drop <= self.args.max_ap_drop,
            "precision": "fp32",
        }
        if self.args.int8:
            int8 = self.work / "candidate" / f"{MODEL}-int8" / "2"
            run(export, "quantize", "--precision", "int8", "--data", original, "--artifact", artifact,
                "--output", int8, "--force")  # fmt: skip
            result["int8_artifact"] = str(int8)
        if not result["passed"]:
            raise SystemExit(f"gate refused the candidate: {json.dumps(result)}")
        return result

    # ------------------------------------------------------------------ 7. rollout

    def rollout(self) -> dict[str, Any]:
        candidate = self.repo / MODEL / "2"
        if candidate.exists():
            shutil.rmtree(candidate)
        server = self.server.serve({})  # version 1 only: it serves
        try:
            shutil.copytree(self.work / "candidate" / MODEL / "2", candidate)
            body = {"candidate": "2", "canary_percent": self.args.canary, "shadow_percent": 100}
            rollout_url = self.server.url(f"/v2/repository/models/{MODEL}/rollout")
            started = httpx.post(rollout_url, json=body, timeout=300)
            started.raise_for_status()
            before = self.server.metrics()
            images = sorted((self.data / "shifted" / "val").glob("*.jpg"))
            answers = self.server.send(images)
            compared = f"detect_shadow_requests_total{{model={MODEL},result=compared}}"
            copies = sum(1 for a in answers if a["version"] == "1")  # each one drew a shadow copy
            deadline = time.monotonic() + 120
            while True:  # the copies finish after their answers: wait until each is counted
                after = self.server.metrics()
                delta = {k: after[k] - before.get(k, 0.0) for k in after}
                settled = sum(v for k, v in delta.items() if k.startswith("detect_shadow_requests_total"))
                if settled >= copies or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            shadow = {
                k: v
                for k, v in delta.items()
                if k.startswith(("detect_shadow_", "detect_rollout_routed_total")) and v
            }
            count = delta.get(f"detect_shadow_agreement_count{{model={MODEL}}}", 0.0)
            total = delta.get(f"detect_shadow_agreement_sum{{model={MODEL}}}", 0.0)
            ended = httpx.post(self.server.url(f"/v2/repository/models/{MODEL}/rollout/end"), timeout=60)
            ended.raise_for_status()
            after_undo = self.server.send(images[:5])
        finally:
            server.terminate()
            server.wait(60)
        served = {v: sum(1 for a in answers if a["version"] == v) for v in ("1", "2")}
        matched = delta.get(f"detect_shadow_detections_total{{model={MODEL},role=matched}}", 0.0)
        serving = delta.get(f"detect_shadow_detections_total{{model={MODEL},role=serving}}", 0.0)
        cand = delta.get(f"detect_shadow_detections_total{{model={MODEL},role=candidate}}", 0.0)
        return {
            "rollout": started.json(),
            "requests": len(answers),
            "answered_by_version": served,
            "shadow_compared": delta.get(compared, 0.0),
            "mean_agreement": total / count if count else None,
            "detection_agreement": 2 * matched / (serving + cand) if serving + cand else None,
            "shadow_metrics": shadow,
            "undo": ended.json(),
            "versions_after_undo": sorted({a["version"] for a in after_undo}),
        }

    # ------------------------------------------------------------------ 8. report

    def report(self, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
        from exporters.precision.quantize import record_accuracy

        shifted = str(self.data / "shifted")
        v1 = self.repo / MODEL / "1"
        v2 = self.work / "candidate" / MODEL / "2"
        ap = {
            f"v{i}_{split}": record_accuracy(path, shifted, split, "auto", None, None, write=False).box_ap
            for i, path in ((1, v1), (2, v2))
            for split in ("val",)
        }
        traffic = results["traffic"]
        load = os.getloadavg()
        table = {
            "shift": self.args.shift,
            "ap_shifted_val_before": ap["v1_val"],
            "ap_shifted_val_after": ap["v2_val"],
            "ap_original_val_before": results["base"]["original_val_ap"],
            "ap_original_val_after": results["gate"]["original_val_ap"],
            "no_detection_share_baseline": traffic["baseline_no_detection_share"],
            "no_detection_share_original_traffic": traffic["phases"]["original"]["no_detection_share"],
            "no_detection_share_shifted_traffic": traffic["phases"]["shifted"]["no_detection_share"],
            "detections_per_image_original_traffic": traffic["phases"]["original"]["detections_per_image"],
            "detections_per_image_shifted_traffic": traffic["phases"]["shifted"]["detections_per_image"],
            "captured": traffic["captures"]["images"],
            "captured_by_reason": traffic["captures"]["by_reason"],
            "captured_by_source_and_reason": results["label"].get("by_source_and_reason"),
            "reviewed_images": results["label"]["images"],
            "finetune_steps": results["finetune"]["steps"],
            "mean_agreement": results["rollout"]["mean_agreement"],
            "detection_agreement": results["rollout"]["detection_agreement"],
            "canary_answered_by_version": results["rollout"]["answered_by_version"],
            "gate_precision": results["gate"]["precision"],
            "stage_seconds": {k: v.get("seconds") for k, v in results.items()},
            "loadavg": [round(x, 2) for x in load],
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "flywheel")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "flywheel")
    parser.add_argument("--shift", default="dark")
    parser.add_argument("--traffic", type=int, default=150, help="shifted images served (and captured from)")
    parser.add_argument("--heldout", type=int, default=150, help="shifted val images (AP, rollout)")
    parser.add_argument("--baseline-images", type=int, default=60, help="original val images served first")
    parser.add_argument("--steps", type=int, default=40, help="fine-tuning steps")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--base-lr", type=float, default=0.04)
    parser.add_argument("--mix-ratio", type=float, default=0.5)
    parser.add_argument("--max-ap-drop", type=float, default=0.03, help="gate: AP lost on the original val")
    parser.add_argument("--int8", action="store_true", help="also quantize the candidate (INT8 gate)")
    parser.add_argument("--canary", type=float, default=25.0, help="canary percent of the rollout")
    parser.add_argument("--port", type=int, default=8097)
    args = parser.parse_args()
    demo = Demo(args)
    results: dict[str, dict[str, Any]] = {}
    results["data"] = demo.stage("data", demo.make_data)
    results["base"] = demo.stage("base", demo.make_base)
    results["traffic"] = demo.stage("traffic", demo.traffic)
    results["label"] = demo.stage("label", demo.label)
    results["finetune"] = demo.stage("finetune", demo.finetune)
    results["gate"] = demo.stage("gate", lambda: demo.gate(results["base"]))
    results["rollout"] = demo.stage("rollout", demo.rollout)
    reported_before = (demo.stages / "report.json").exists()
    table = demo.stage("report", lambda: demo.report(results))
    (args.work / "report.json").write_text(json.dumps(table, indent=2))
    if not reported_before:  # one line per run that reached the report
        with (ROOT / "docs" / "results" / "flywheel.jsonl").open("a") as handle:
            handle.write(json.dumps(table) + "\n")
    print(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
