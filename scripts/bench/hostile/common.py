"""Constants, the records a case produces, and the hostile payloads (lying JPEGs, huge PNGs, many parts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

HOST = "127.0.0.1"
PROJECT = Path(__file__).resolve().parents[3]
SNIPPET_CHARS = 160
PROBE_TIMEOUT_S = 3.0
PROBE_INTERVAL_S = 0.1
NORMAL_DELAY_S = 0.3
NORMAL_TIMEOUT_S = 30.0
RSS_INTERVAL_S = 0.02
AFTER_DELAY_S = 2.0
READY_TIMEOUT_S = 180.0
EXIT_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0
MAX_REPLY_BYTES = 64 * 1024
MONITOR_MAX_S = 600.0  # no monitor thread outlives this, whatever happens


def fmt_s(seconds: float | None) -> str:
    """A duration for the report: milliseconds below a second, else seconds; a dash for none."""
    if seconds is None:
        return "–"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


# ---------------------------------------------------------------------------------------------- records


@dataclass
class Reply:
    """One answer (or failure): ``status`` is the HTTP code as text, or timeout/reset/closed/refused/..."""

    status: str
    seconds: float
    body: str = ""
    content_type: str = ""
    retry_after: str | None = None


@dataclass
class Outcome:
    """What a case function reports; ``seconds`` is the case latency as that case defines it."""

    sent: str
    replies: list[Reply]
    seconds: float | None
    extra: dict[str, Any] = field(default_factory=dict)
    after_delay_s: float = AFTER_DELAY_S
    note: str = ""


@dataclass
class CaseReport:
    name: str
    sent: str
    statuses: dict[str, int]
    snippet: str
    note: str
    case_s: float | None
    normal: Reply | None
    probe_ready_max_s: float | None
    probe_live_max_s: float | None
    probe_statuses: dict[str, dict[str, int]]
    rss_before_mb: float | None
    rss_peak_mb: float | None
    rss_after_mb: float | None
    replies: list[Reply]
    extra: dict[str, Any]


# ------------------------------------------------------------------------------------------------ images


def synthetic_image(rng: np.random.Generator, size: int) -> np.ndarray:
    """A ``size`` x ``size`` BGR image: a flat background with a few coloured rectangles and circles."""
    image = np.full((size, size, 3), rng.integers(0, 256, 3), dtype=np.uint8)
    for _ in range(int(rng.integers(2, 6))):
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        x, y = (int(v) for v in rng.integers(0, size - size // 4, 2))
        extent = int(rng.integers(size // 10, size // 3))
        if rng.random() < 0.5:
            cv2.rectangle(image, (x, y), (x + extent, y + extent), colour, -1)
        else:
            cv2.circle(image, (x + extent // 2, y + extent // 2), extent // 2, colour, -1)
    return image


def encode(image: np.ndarray, ext: str) -> bytes:
    ok, data = cv2.imencode(ext, image)
    if not ok:
        raise RuntimeError(f"cv2 could not encode {ext}")
    return data.tobytes()


def patch_jpeg_size(data: bytes, height: int, width: int) -> bytes:
    """``data`` with its start-of-frame header claiming ``height`` x ``width`` (the scan is unchanged)."""
    out = bytearray(data)
    pos = 2  # after SOI
    while pos + 4 <= len(out) and out[pos] == 0xFF:
        marker = out[pos + 1]
        length = int.from_bytes(out[pos + 2 : pos + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            out[pos + 5 : pos + 7] = height.to_bytes(2, "big")
            out[pos + 7 : pos + 9] = width.to_bytes(2, "big")
            return bytes(out)
        pos += 2 + length
    raise RuntimeError("no SOF0/1/2 segment found in the encoded JPEG")


def lying_jpeg(rng: np.random.Generator, claimed: int = 6000) -> bytes:
    """A 64x64 random-noise JPEG whose SOF says ``claimed`` x ``claimed``."""
    noise = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    return patch_jpeg_size(encode(noise, ".jpg"), claimed, claimed)


def many_parts_body(target_bytes: int, boundary: str = "b") -> tuple[bytes, int]:
    """A multipart body of one-byte ``images`` parts, as many as fit in ``target_bytes``."""
    part = f'--{boundary}\r\nContent-Disposition: form-data; name="images"\r\n\r\nx\r\n'.encode()
    closing = f"--{boundary}--\r\n".encode()
    count = (target_bytes - len(closing)) // len(part)
    return part * count + closing, count


@dataclass
class Payloads:
    normal_jpeg: bytes
    overload_jpegs: list[bytes]
    lying: list[bytes]
    png_40mpx: bytes


def make_payloads() -> Payloads:
    rng = np.random.default_rng(0)
    png = encode(np.full((6324, 6324, 3), (40, 120, 200), dtype=np.uint8), ".png")
    return Payloads(
        normal_jpeg=encode(synthetic_image(rng, 160), ".jpg"),
        overload_jpegs=[encode(synthetic_image(rng, 320), ".jpg") for _ in range(8)],
        lying=[lying_jpeg(rng) for _ in range(16)],
        png_40mpx=png,
    )
