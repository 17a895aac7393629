"""The capture folder: a COCO dataset that survives a crash or a full disk at any point.

Layout (the one `training.data.synthetic` writes and training reads)::

    <root>/captured/<name>.jpg              the encoded image as it was sent (never re-encoded)
    <root>/records/<name>.json              that image and the model's predictions for it
    <root>/annotations/instances_captured.json   every record, as one COCO file

Every file is written to a temporary file (``.tmp-*``) in its own folder, flushed and fsynced, then
renamed over its final name (`os.replace`, atomic on POSIX), and the folder is fsynced: a reader sees a
whole file or none. The image is written before its record, so a record never names a missing image. The
per-image records are the source of truth; the COCO file is derived from them and rewritten (atomically)
when the writer is idle, so it may lag the records after a crash but is never torn. `open` then removes
temporary files and images without a record, and rewrites the COCO file, so the folder is consistent again.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

IMAGES = "captured"
RECORDS = "records"
ANNOTATIONS = "annotations/instances_captured.json"
TMP_PREFIX = ".tmp-"


class QuotaExceeded(Exception):
    """Writing the capture would take the folder over its disk quota."""


def write_atomic(path: Path, data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` to ``path`` so that a reader (or a crash) sees the old file or the new one, whole."""
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def image_suffix(data: bytes | bytearray | memoryview) -> str:
    """The file suffix of encoded image ``data``, from its first bytes."""
    head = bytes(data[:12])
    if head.startswith(b"\xff\xd8"):
        return ".jpg"
    if head.startswith(b"\x89PNG"):
        return ".png"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return ".webp"
    if head.startswith(b"BM"):
        return ".bmp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return ".tif"
    return ".img"


@dataclass(frozen=True)
class CaptureRecord:
    """One captured image and the model's predictions for it (each a COCO annotation marked as such)."""

    name: str  # file stem, sortable by capture time
    file_name: str  # under IMAGES
    width: int
    height: int
    model: str
    version: str
    reason: str
    captured_at: str  # ISO 8601, UTC
    # {"category_id", "bbox": [x, y, w, h] in original pixels, "score"}
    predictions: list[dict[str, Any]] = field(default_factory=list)
    categories: list[dict[str, Any]] = field(default_factory=list)  # {"id", "name"}

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, text: bytes) -> CaptureRecord:
        return cls(**json.loads(text))


class CaptureStore:
    """The capture folder at ``root``, at most ``max_bytes`` on disk; safe to use from several threads."""

    def __init__(self, root: Path, max_bytes: int):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.used_bytes = 0
        self._records: list[CaptureRecord] = []
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()
        self._sequence = 0

    def open(self) -> None:
        """Create the folders, remove what a crash left half done, load the records, publish the COCO file.
        Raises `OSError` when the folder cannot be written."""
        images, records = self.root / IMAGES, self.root / RECORDS
        for folder in (images, records, (self.root / ANNOTATIONS).parent):
            folder.mkdir(parents=True, exist_ok=True)
            for tmp in folder.glob(f"{TMP_PREFIX}*"):
                tmp.unlink()
        loaded: list[CaptureRecord] = []
        for path in sorted(records.glob("*.json")):
            record = CaptureRecord.from_json(path.read_bytes())
            if (images / record.file_name).exists():
                loaded.append(record)
            else:  # its image was removed by hand: the record goes too
                path.unlink()
        named = {r.file_name for r in loaded}
        for image in images.iterdir():
            if image.name not in named:  # written, but the crash came before its record
                image.unlink()
        sizes = {}
        for r in loaded:
            sizes[r.name] = (images / r.file_name).stat().st_size + (
                records / f"{r.name}.json"
            ).stat().st_size
        with self._lock:
            self._records, self._sizes = loaded, sizes
            self.used_bytes = sum(sizes.values())
        self.publish()

    def write(self, data: bytes | bytearray | memoryview, record: CaptureRecord) -> int:
        """Write one image and its record; the bytes it took. Raises `QuotaExceeded` (nothing written) or
        `OSError` (disk full, read-only folder: nothing visible was written)."""
        body = record.to_json()
        size = len(data) + len(body)
        if self.used_bytes + size > self.max_bytes:
            raise QuotaExceeded(f"{self.used_bytes} + {size} bytes > capture_max_bytes {self.max_bytes}")
        write_atomic(self.root / IMAGES / record.file_name, data)
        try:
            write_atomic(self.root / RECORDS / f"{record.name}.json", body)
        except OSError:
            with contextlib.suppress(OSError):
                (self.root / IMAGES / record.file_name).unlink()
            raise
        with self._lock:
            self._records.append(record)
            self._sizes[record.name] = size
            self.used_bytes += size
        return size

    def next_name(self) -> str:
        """A new record name: capture time in nanoseconds and a sequence number, so names sort by time."""
        self._sequence += 1
        return f"{time.time_ns():020d}-{self._sequence:06d}"

    def counts(self) -> tuple[int, dict[str, int]]:
        """Images kept, and how many for each capture reason."""
        with self._lock:
            return len(self._records), dict(Counter(r.reason for r in self._records))

    def coco(self) -> dict[str, Any]:
        """Every record as one COCO dataset; predictions carry ``score``, ``prediction: true``, the model,
        version and capture reason."""
        with self._lock:
            records = list(self._records)
        return coco_dataset(records)

    def publish(self) -> None:
        """Rewrite the COCO file from the records (atomically)."""
        body = json.dumps(self.coco(), separators=(",", ":")).encode()
        write_atomic(self.root / ANNOTATIONS, body)

    def archive(self) -> Iterator[bytes]:
        """The dataset as a tar stream: the COCO file as of now, then every image it names."""
        with self._lock:
            records = list(self._records)
        sink = _Sink()
        with tarfile.open(fileobj=sink, mode="w|") as tar:
            body = json.dumps(coco_dataset(records), separators=(",", ":")).encode()
            info = tarfile.TarInfo(ANNOTATIONS)
            info.size, info.mtime = len(body), int(time.time())
            tar.addfile(info, io.BytesIO(body))
            yield sink.take()
            for record in records:
                tar.add(self.root / IMAGES / record.file_name, arcname=f"{IMAGES}/{record.file_name}")
                yield sink.take()
        yield sink.take()


class _Sink(io.RawIOBase):
    """A write-only file whose bytes are taken out as they come (the tar stream's chunks)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


def coco_dataset(records: list[CaptureRecord]) -> dict[str, Any]:
    """``records`` as a COCO instances dataset (image ids 1.. in capture order)."""
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    categories: dict[int, dict[str, Any]] = {}
    for image_id, r in enumerate(records, start=1):
        images.append(
            {
                "id": image_id,
                "file_name": r.file_name,
                "width": r.width,
                "height": r.height,
                "captured_at": r.captured_at,
                "capture_reason": r.reason,
                "model": r.model,
                "version": r.version,
            }
        )
        for p in r.predictions:
            x, y, w, h = p["bbox"]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": p["category_id"],
                    "bbox": [x, y, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                    "score": p["score"],
                    "prediction": True,  # the model's output, not a reviewed label
                    "model": r.model,
                    "version": r.version,
                    "capture_reason": r.reason,
                }
            )
        for c in r.categories:
            categories.setdefault(c["id"], {"id": c["id"], "name": c["name"], "supercategory": ""})
    return {
        "info": {"description": "images captured by the detect service, predictions as annotations"},
        "images": images,
        "annotations": annotations,
        "categories": [categories[k] for k in sorted(categories)],
    }
