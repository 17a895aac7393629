"""Accuracy and time of tiled inference, measured through the served path (docs/tiling.md).

For each model and tiling configuration this starts ``detect-serve`` on 127.0.0.1 with a repository holding
only that model, posts every image of a COCO split (``/detect?tiling=...&score_threshold=0.05``, one
request at a time), and scores the answers with pycocotools: AP, AP50, AP-small, AP-medium, plus the
median and mean seconds per image as the client saw them. The large synthetic scenes come from::

    .venv/bin/detect-train synth --out data/large --num-train 0 --num-val 20 --seed 3 --scene large

Resumable: each finished (model, configuration) is a line of ``--out`` (JSON lines) and is skipped when
the script runs again. ``--table`` prints the results as the Markdown table of docs/tiling.md.

    .venv/bin/python scripts/bench/bench_tiling.py --data data/large --models efficientdet-d0-synth-int8 \\
        --tiling off auto 256x256 --overlap 0.2 --merge greedy_nmm:ios nms:iou --out runs/tiling.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from bench.server.local_server import local_server, single_model_repository

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serving(model_dir: Path, settings: dict[str, str]) -> Iterator[str]:
    """``detect-serve`` on a repository holding only ``model_dir``; yields its base URL."""
    env = {**settings, "DETECT_DEFAULT_MODEL": model_dir.name}
    with single_model_repository(model_dir) as repo, local_server(repo, env) as server:
        yield server.url


def run_config(
    url: str,
    coco: COCO,
    image_ids: list[int],
    images_dir: Path,
    tiling: str,
    overlap: float,
    score_threshold: float = 0.05,
) -> dict[str, Any]:
    """Detections of ``image_ids`` of ``coco`` through ``url``, scored; with seconds per image."""
    detections: list[dict[str, Any]] = []
    seconds: list[float] = []
    inputs: list[int] = []
    params = {"tiling": tiling, "tile_overlap": str(overlap), "score_threshold": str(score_threshold)}
    with httpx.Client(timeout=600) as client:
        for image_id in image_ids:
            info = coco.loadImgs(image_id)[0]
            data = (images_dir / info["file_name"]).read_bytes()
            started = time.perf_counter()
            response = client.post(
                f"{url}/detect", params=params, content=data, headers={"Content-Type": "image/jpeg"}
            )
            seconds.append(time.perf_counter() - started)
            response.raise_for_status()
            body = response.json()
            inputs.append(len(body.get("tiles") or []))
            for d in body["detections"]:
                box = d["box"]
                detections.append(
                    {
                        "image_id": image_id,
                        "category_id": d["category_id"],
                        "bbox": [box["x1"], box["y1"], box["x2"] - box["x1"], box["y2"] - box["y1"]],
                        "score": d["score"],
                    }
                )
    stats = _coco_stats(coco, image_ids, detections)
    return {
        **stats,
        "images": len(seconds),
        "tiles_per_image": statistics.mean(inputs),
        "median_s": statistics.median(seconds),
        "mean_s": statistics.mean(seconds),
    }


def _coco_stats(coco: COCO, image_ids: list[int], detections: list[dict[str, Any]]) -> dict[str, float]:
    if not detections:
        return {"ap": 0.0, "ap50": 0.0, "ap_small": 0.0, "ap_medium": 0.0, "ar": 0.0}
    with contextlib.redirect_stdout(io.StringIO()):
        evaluator = COCOeval(coco, coco.loadRes(detections), "bbox")
        evaluator.params.imgIds = image_ids
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    s = np.maximum(evaluator.stats, 0.0)  # -1: no ground truth of that size
    stats = {"ap": float(s[0]), "ap50": float(s[1]), "ap_small": float(s[3]), "ap_medium": float(s[4])}
    return stats | {"ar": float(s[8])}  # recall: COCO's AR at 100 detections per image


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    keys = ("model", "tiling", "overlap", "merge", "full_image", "images", "score_threshold", "max_inputs")
    return tuple(row.get(k) for k in keys)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/large"), help="COCO root (val split)")
    parser.add_argument("--split", default="val")
    parser.add_argument("--max-images", type=int, default=None, help="the first N images of the split")
    parser.add_argument(
        "--score-threshold", type=float, default=0.05, help="sent with each request (COCO AP: 0.05)"
    )
    parser.add_argument("--models", nargs="+", default=["efficientdet-d0-synth-int8"])
    parser.add_argument("--repository", type=Path, default=REPO / "models")
    parser.add_argument("--tiling", nargs="+", default=["off", "auto"])
    parser.add_argument("--overlap", nargs="+", type=float, default=[0.2])
    parser.add_argument("--merge", nargs="+", default=["greedy_nmm:ios"], help="METHOD:METRIC[:THRESHOLD]")
    parser.add_argument("--no-full-image", action="store_true", help="tiles only, not the whole image too")
    parser.add_argument("--max-inputs", type=int, default=None, help="DETECT_MAX_TILES_PER_REQUEST")
    parser.add_argument("--out", type=Path, default=Path("runs/tiling.jsonl"))
    parser.add_argument("--table", action="store_true", help="print --out as a Markdown table and exit")
    args = parser.parse_args(argv)
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    if args.table:
        print_table(done)
        return
    seen = {_key(row) for row in done}
    coco = COCO(str(args.data / "annotations" / f"instances_{args.split}.json"))
    image_ids = sorted(coco.getImgIds())[: args.max_images]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        for merge in args.merge:
            method, metric, *threshold = merge.split(":")
            settings = {
                "DETECT_TILING_MERGE": method,
                "DETECT_TILING_MATCH_METRIC": metric,
                "DETECT_TILING_MATCH_THRESHOLD": threshold[0] if threshold else "0.5",
                "DETECT_TILING_FULL_IMAGE": "false" if args.no_full_image else "true",
                "DETECT_REQUEST_TIMEOUT_MS": "600000",
            }
            if args.max_inputs:
                settings["DETECT_MAX_TILES_PER_REQUEST"] = str(args.max_inputs)
            full_image = not args.no_full_image
            todo = [
                (t, o)
                for t in args.tiling
                for o in args.overlap
                if (model, t, o, merge, full_image, len(image_ids), args.score_threshold, args.max_inputs)
                not in seen
            ]
            if not todo:
                continue
            with serving(args.repository / model, settings) as url:
                for tiling, overlap in todo:
                    row = {"model": model, "tiling": tiling, "overlap": overlap, "merge": merge}
                    row["score_threshold"] = args.score_threshold
                    row |= {"full_image": not args.no_full_image, "max_inputs": args.max_inputs}
                    images = args.data / args.split
                    row |= run_config(url, coco, image_ids, images, tiling, overlap, args.score_threshold)
                    print(json.dumps(row), flush=True)
                    with args.out.open("a") as out:
                        out.write(json.dumps(row) + "\n")


def print_table(rows: list[dict[str, Any]]) -> None:
    header = [
        "model",
        "tiling",
        "overlap",
        "merge",
        "score ≥",
        "whole image too",
        "inputs limit",
        "tiles / image",
    ]
    header += ["AP", "AP50", "AP-small", "AP-medium", "recall (AR@100)", "s / image (median)"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        cells = [r["model"], r["tiling"], str(r["overlap"]), r["merge"], str(r["score_threshold"])]
        cells.append("yes" if r["full_image"] else "no")
        cells.append(str(r.get("max_inputs") or "default"))
        cells.append(f"{r['tiles_per_image']:.0f}")
        cells += [f"{r[k]:.3f}" for k in ("ap", "ap50", "ap_small", "ap_medium")]
        cells.append(f"{r['ar']:.3f}" if "ar" in r else "-")
        cells.append(f"{r['median_s']:.2f}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
