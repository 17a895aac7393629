"""Helpers of the capture tests: a record with a few predictions, a JPEG, a checker for the folder."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from service.capture.store import ANNOTATIONS, IMAGES, RECORDS, TMP_PREFIX, CaptureRecord


def jpeg(value: int = 128, size: int = 32) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), value, dtype=np.uint8)).save(out, format="JPEG")
    return out.getvalue()


def record(name: str, reason: str = "score_band", suffix: str = ".jpg") -> CaptureRecord:
    return CaptureRecord(
        name=name,
        file_name=name + suffix,
        width=32,
        height=32,
        model="toy",
        version="1",
        reason=reason,
        captured_at="2026-01-01T00:00:00.000+00:00",
        predictions=[
            {"category_id": 1, "bbox": [1.0, 2.0, 10.0, 12.0], "score": 0.45},
            {"category_id": 2, "bbox": [5.0, 5.0, 3.0, 4.0], "score": 0.2},
        ],
        categories=[{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}],
    )


def check_consistent(root: Path) -> int:
    """Assert what a reader sees is whole: every visible image decodes, every record and the COCO file
    parse, and every image the COCO file names exists. Returns the images the COCO file names."""
    for path in (root / RECORDS).glob("*.json"):
        if not path.name.startswith(TMP_PREFIX):
            rec = CaptureRecord.from_json(path.read_bytes())
            assert (root / IMAGES / rec.file_name).exists(), f"{path.name} names a missing image"
    for path in (root / IMAGES).iterdir():
        if not path.name.startswith(TMP_PREFIX):
            with Image.open(path) as image:
                image.load()  # raises on a truncated file
    coco_file = root / ANNOTATIONS
    if not coco_file.exists():
        return 0
    coco = json.loads(coco_file.read_bytes())
    for image in coco["images"]:
        assert (root / IMAGES / image["file_name"]).exists()
    return len(coco["images"])
