"""Where `detect-predict` gets detections: a local artifact run the way the service runs it
(`LocalDetector`, through `service.served`), or a running server's ``POST /detect`` (`RemoteDetector`).

Both give, per image or video frame, a `Found`: detections in original-image pixels."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contract.geometry import resize_for_network
from contract.manifest import Label
from service.imaging.postprocess import DetectParams, KeptDetections, select_detections
from service.served import load_backend
from service.video.tracking import Tracker


@dataclass
class Found:
    """One image's or frame's detections: boxes float32 [N, 4] (x1, y1, x2, y2 original pixels), scores
    [N], label indices [N], track ids [N] (-1: none)."""

    width: int
    height: int
    detections: KeptDetections
    labels: tuple[Label, ...]
    track_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    frame: int | None = None
    pts: float | None = None
    image: np.ndarray | None = None  # the frame (RGB), when it was decoded here


class LocalDetector:
    """An artifact's version folder (``models/<name>/<version>``) on the backend the service would pick."""

    def __init__(self, version_dir: str | Path, backend: str = "auto", threads: int = 0):
        self.backend = load_backend(version_dir, backend, threads=threads)
        self.manifest = self.backend.manifest
        self.name = f"{self.manifest.name}"

    def detect(self, images: Sequence[np.ndarray], params: DetectParams) -> list[KeptDetections]:
        """Each RGB ``uint8 [H, W, 3]`` image's detections, in batches of the artifact's size."""
        found: list[KeptDetections] = []
        step = self.backend.max_batch_size
        for start in range(0, len(images), step):
            group = images[start : start + step]
            resized = [resize_for_network(image, self.manifest.input) for image in group]
            outputs = self.backend.infer(np.stack([network for network, _ in resized]))
            for i, (_, transform) in enumerate(resized):
                one = {name: value[i] for name, value in outputs.items()}
                found.append(select_detections(one, transform, self.manifest, params))
        return found

    def close(self) -> None:
        self.backend.close()


def _detections(items: list[dict[str, Any]], labels: tuple[Label, ...]) -> tuple[KeptDetections, np.ndarray]:
    boxes = np.array([[d["box"][k] for k in ("x1", "y1", "x2", "y2")] for d in items], dtype=np.float32)
    kept = KeptDetections(
        boxes=boxes.reshape(-1, 4),
        scores=np.array([d["score"] for d in items], dtype=np.float32),
        classes=np.array([d["class_id"] for d in items], dtype=np.int32),
        rows=np.arange(len(items)),
    )
    return kept, np.array([d.get("track_id", -1) for d in items], dtype=np.int64)


class RemoteDetector:
    """``POST /detect`` of the server at ``url`` (e.g. ``http://127.0.0.1:8000``)."""

    def __init__(
        self, url: str, model: str | None = None, api_key: str | None = None, timeout_s: float = 300
    ):
        self.url = url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self.headers = {"X-API-Key": api_key} if api_key else {}
        self.labels = self._labels()

    def _labels(self) -> tuple[Label, ...]:
        with self.open_path("GET", "/v1/models") as response:
            models = json.load(response)["models"]
        chosen = [m for m in models if (m["name"] == self.model if self.model else m.get("default"))]
        if not chosen:
            raise SystemExit(
                f"detect-predict: the server at {self.url} has no model {self.model or 'marked default'!r}"
            )
        self.model = chosen[0]["name"]
        return tuple(Label.model_validate(label) for label in chosen[0]["labels"])

    def open_path(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> Any:
        headers = dict(self.headers)
        if content_type:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.url + path, data=body, headers=headers, method=method)
        try:
            return urllib.request.urlopen(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as err:
            raise SystemExit(f"detect-predict: {method} {path}: {err.code} {_message(err.read())}") from None
        except urllib.error.URLError as err:
            raise SystemExit(f"detect-predict: cannot reach {self.url}: {err.reason}") from None

    def _query(self, params: DetectParams, **extra: object) -> str:
        query: dict[str, object] = {"model": self.model, **extra}
        if params.score_threshold is not None:
            query["score_threshold"] = params.score_threshold
        if params.class_ids is not None:
            query["classes"] = ",".join(self.labels[i].name for i in sorted(params.class_ids))
        return urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})

    def detect_image(self, data: bytes, params: DetectParams) -> Found:
        with self.open_path(
            "POST", f"/detect?{self._query(params)}", data, "application/octet-stream"
        ) as response:
            body = json.load(response)
        kept, _ = _detections(body["detections"], self.labels)
        return Found(body["width"], body["height"], kept, self.labels)

    def detect_video(
        self, path: Path, params: DetectParams, fps: float | None, max_frames: int | None, track: bool
    ) -> Iterator[Found | dict[str, Any]]:
        """Each processed frame as it is answered, then the summary (a dict)."""
        query = self._query(params, fps=fps, max_frames=max_frames, track=str(track).lower())
        with self.open_path("POST", f"/detect?{query}", path.read_bytes(), "video/mp4") as response:
            for raw in response:
                line = json.loads(raw)
                if "error" in line:
                    raise SystemExit(f"detect-predict: the server stopped: {line['error']}")
                if line.get("summary"):
                    yield line
                    continue
                kept, ids = _detections(line["detections"], self.labels)
                yield Found(line["width"], line["height"], kept, self.labels, ids, line["frame"], line["pts"])


def _message(body: bytes) -> str:
    """The ``error`` of the service's JSON error body, else the body as text."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    return str(error) if error else body.decode(errors="replace")


def coco_rows(found: Found, image_id: int) -> Iterator[dict[str, Any]]:
    """``found`` as COCO results rows (``bbox`` x, y, w, h) with ``label``, and ``track_id`` if tracked."""
    kept = found.detections
    for i in range(len(kept)):
        x1, y1, x2, y2 = (round(float(v), 2) for v in kept.boxes[i])
        label = found.labels[int(kept.classes[i])]
        row: dict[str, Any] = {
            "image_id": image_id,
            "category_id": label.coco_id if label.coco_id is not None else int(kept.classes[i]),
            "bbox": [x1, y1, round(x2 - x1, 2), round(y2 - y1, 2)],
            "score": round(float(kept.scores[i]), 5),
            "label": label.name,
        }
        if i < len(found.track_ids) and found.track_ids[i] >= 0:
            row["track_id"] = int(found.track_ids[i])
        yield row


def track(tracker: Tracker | None, found: KeptDetections) -> np.ndarray:
    """Track ids for one frame's detections (all -1 without a tracker)."""
    if tracker is None:
        return np.full(len(found), -1, dtype=np.int64)
    return tracker.update(found.boxes, found.scores)
