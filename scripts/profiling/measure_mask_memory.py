"""Peak memory of the service's mask path for one large image: paste + RLE, polygons, boxed-image render.

    .venv/bin/python scripts/profiling/measure_mask_memory.py [--width 1920] [--height 1080] \
        [--detections 100]

A fresh process imports only the service (no torch), makes a random RGB image and K detections with
28x28 mask probabilities whose boxes range from a few pixels to the whole image (a quarter of them
larger than half the image), then runs, in order, what ``POST /detect`` does for a mask model: RLE
encoding (JSON), polygon encoding (``mask_format=polygon``) and the boxed image with translucent masks
(``format=jpeg``). It prints the peak RSS (``ru_maxrss``) after each stage, the growth over the baseline
(imports + image + inputs), and for scale what pasting all K masks at once as full-image float32 masks
(torchvision's ``paste_masks_in_image``) would allocate.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np

from contract.manifest import Label
from service.imaging.masks import masks_to_polygons, masks_to_rles, paste_mask
from service.imaging.postprocess import KeptDetections
from service.imaging.render import render_detections


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def detections(count: int, width: int, height: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``count`` boxes (x1, y1, x2, y2 pixels) of every size, and [count, 28, 28] blob-like masks."""
    rng = np.random.default_rng(seed)
    sides = rng.uniform(0.005, 1.0, size=(count, 2)) ** 0.7  # fraction of the image, skewed large
    sides[: count // 4] = rng.uniform(0.5, 1.0, size=(count // 4, 2))
    w, h = sides[:, 0] * width, sides[:, 1] * height
    x1, y1 = rng.uniform(0, width - w), rng.uniform(0, height - h)
    boxes = np.stack([x1, y1, x1 + w, y1 + h], axis=1).astype(np.float32)
    yy, xx = np.mgrid[0:28, 0:28].astype(np.float32)
    centres = rng.uniform(8, 20, size=(count, 2, 1, 1)).astype(np.float32)
    radius = rng.uniform(5, 13, size=(count, 1, 1)).astype(np.float32)
    dist = np.hypot(xx - centres[:, 0], yy - centres[:, 1])
    masks = 1.0 / (1.0 + np.exp(dist - radius))  # soft discs: probabilities crossing 0.5
    return boxes, masks.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--detections", type=int, default=100)
    args = parser.parse_args()
    if "torch" in sys.modules:
        raise SystemExit("torch was imported: the measurement must be of the service alone")

    height, width, count = args.height, args.width, args.detections
    image = np.random.default_rng(1).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    boxes, masks = detections(count, width, height)
    dets = KeptDetections(
        boxes=boxes,
        scores=np.linspace(0.99, 0.5, count, dtype=np.float32),
        classes=(np.arange(count) % 6).astype(np.int32),
        rows=np.arange(count, dtype=np.int64),
    )
    labels = [Label(name=f"class{i}") for i in range(6)]
    baseline = peak_rss_mib()
    report: dict[str, object] = {
        "image": f"{width}x{height}",
        "detections": count,
        "baseline_peak_rss_mib": round(baseline, 1),
    }

    started = time.perf_counter()
    rles = masks_to_rles(masks, boxes, height, width)
    report["rle"] = {
        "seconds": round(time.perf_counter() - started, 3),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }

    started = time.perf_counter()
    polygons = masks_to_polygons(masks, boxes, height, width)
    report["polygons"] = {
        "seconds": round(time.perf_counter() - started, 3),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }

    started = time.perf_counter()
    # As service.pipeline.detect renders: masks pasted lazily, one at a time, while they are drawn.
    pasted = (paste_mask(m, b, height, width) for m, b in zip(masks, boxes, strict=True))
    jpeg = render_detections(image, dets, labels, "jpeg", pasted)
    report["render_jpeg"] = {
        "seconds": round(time.perf_counter() - started, 3),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "bytes": len(jpeg),
    }
    report["mask_path_growth_mib"] = round(peak_rss_mib() - baseline, 1)
    report["torchvision_style_all_masks_float32_mib"] = round(count * height * width * 4 / 2**20, 1)
    report["masks_with_pixels"] = sum(1 for p in polygons if p)
    report["rles"] = len(rles)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
