"""Read an image's format and size from its header, without decoding pixels.

OpenCV has no header-only API, and decoding first is exactly what a decompression bomb exploits (a few
kilobytes of PNG can inflate to gigabytes). So the service reads width and height here, checks them
against its pixel limit, and only then decodes. Also detects the common truncation signs (a JPEG with
no end-of-image marker after its scan, a RIFF container shorter than it declares), which OpenCV may
otherwise decode into a partly grey image.

Formats: JPEG, PNG, BMP, WebP (the ones OpenCV decodes that are worth sending to a detector).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass


class ImageHeaderError(ValueError):
    """The bytes are not a supported image, or its header is malformed or truncated."""


@dataclass(frozen=True)
class ImageHeader:
    format: str  # "jpeg" | "png" | "bmp" | "webp"
    width: int  # as stored (before any EXIF orientation)
    height: int
    exif: bytes | None = None  # JPEG: the APP1 Exif payload ("Exif\0\0..."), when there is one

    @property
    def pixels(self) -> int:
        return self.width * self.height


SUPPORTED_FORMATS = ("JPEG", "PNG", "BMP", "WebP")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Start-of-frame markers (baseline, extended, progressive, lossless; Huffman and arithmetic coded).
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_JPEG_SOS = 0xDA
_JPEG_APP1 = 0xE1
_JPEG_EOI = b"\xff\xd9"
# Markers without a length field: TEM and the restart markers.
_JPEG_STANDALONE = {0x01, *range(0xD0, 0xD8)}


def read_header(data: bytes | bytearray) -> ImageHeader:
    """Format, width and height of ``data``. Raises `ImageHeaderError` saying what is wrong."""
    if data.startswith(b"\xff\xd8\xff"):
        return _jpeg(data)
    if data.startswith(_PNG_SIGNATURE):
        return _png(data)
    if data.startswith(b"BM"):
        return _bmp(data)
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return _webp(data)
    raise ImageHeaderError(f"not a supported image (expected {', '.join(SUPPORTED_FORMATS)})")


def _jpeg(data: bytes | bytearray) -> ImageHeader:
    size: tuple[int, int] | None = None
    exif: bytes | None = None
    i = 2
    n = len(data)
    while True:
        if i + 2 > n:
            raise ImageHeaderError("truncated JPEG (ends inside its header)")
        if data[i] != 0xFF:
            raise ImageHeaderError(f"malformed JPEG (expected a marker at byte {i})")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte before a marker
            i += 1
            continue
        if marker in _JPEG_STANDALONE:
            i += 2
            continue
        if i + 4 > n:
            raise ImageHeaderError("truncated JPEG (ends inside its header)")
        (length,) = struct.unpack_from(">H", data, i + 2)
        if length < 2:
            raise ImageHeaderError(f"malformed JPEG (segment length {length} at byte {i})")
        if marker in _JPEG_SOF:
            if i + 9 > n:
                raise ImageHeaderError("truncated JPEG (ends inside its frame header)")
            height, width = struct.unpack_from(">HH", data, i + 5)
            size = (width, height)
        elif marker == _JPEG_SOS:
            break
        elif marker == _JPEG_APP1 and exif is None and data.startswith(b"Exif\0\0", i + 4):
            exif = bytes(data[i + 4 : i + 2 + length])
        i += 2 + length
    if size is None:
        raise ImageHeaderError("malformed JPEG (no frame header before the image data)")
    # Entropy-coded data never contains FF D9 (FF is byte-stuffed), so an EOI after the first scan marks
    # the end of the image; without one the file was cut off.
    if data.rfind(_JPEG_EOI) < i:
        raise ImageHeaderError("truncated JPEG (no end-of-image marker after the image data)")
    width, height = size
    if width == 0 or height == 0:
        raise ImageHeaderError(f"unsupported JPEG with a {width}x{height} frame header")
    return ImageHeader("jpeg", width, height, exif)


def _png(data: bytes | bytearray) -> ImageHeader:
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise ImageHeaderError("truncated or malformed PNG (no IHDR chunk)")
    width, height = struct.unpack_from(">II", data, 16)
    if data.rfind(b"IEND") < 33:
        raise ImageHeaderError("truncated PNG (no IEND chunk)")
    if width == 0 or height == 0:
        raise ImageHeaderError(f"malformed PNG ({width}x{height})")
    return ImageHeader("png", width, height)


def _bmp(data: bytes | bytearray) -> ImageHeader:
    if len(data) < 26:
        raise ImageHeaderError("truncated BMP header")
    file_size, _, pixel_offset, dib_size = struct.unpack_from("<IIII", data, 2)
    if dib_size == 12:  # BITMAPCOREHEADER: 16-bit unsigned sizes
        width, height = struct.unpack_from("<HH", data, 18)
    elif dib_size >= 40:  # BITMAPINFOHEADER and later: 32-bit signed; negative height = top-down rows
        width, height = struct.unpack_from("<ii", data, 18)
        height = abs(height)
    else:
        raise ImageHeaderError(f"malformed BMP (DIB header size {dib_size})")
    if file_size > len(data) or pixel_offset >= len(data):
        raise ImageHeaderError(f"truncated BMP ({len(data)} of {file_size} bytes)")
    if width <= 0 or height == 0:
        raise ImageHeaderError(f"malformed BMP ({width}x{height})")
    return ImageHeader("bmp", width, height)


def _webp(data: bytes | bytearray) -> ImageHeader:
    (riff_size,) = struct.unpack_from("<I", data, 4)
    if riff_size + 8 > len(data):
        raise ImageHeaderError(f"truncated WebP ({len(data)} of {riff_size + 8} bytes)")
    if len(data) < 30:
        raise ImageHeaderError("truncated WebP header")
    chunk = data[12:16]
    if chunk == b"VP8X":  # extended: 24-bit canvas size minus one
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
    elif chunk == b"VP8L":  # lossless: signature 0x2F, then 14-bit width-1 and height-1
        if data[20] != 0x2F:
            raise ImageHeaderError("malformed WebP (bad VP8L signature)")
        (bits,) = struct.unpack_from("<I", data, 21)
        width = (bits & 0x3FFF) + 1
        height = ((bits >> 14) & 0x3FFF) + 1
    elif chunk == b"VP8 ":  # lossy: 3-byte frame tag, start code 9D 01 2A, then 14-bit sizes
        if data[23:26] != b"\x9d\x01\x2a":
            raise ImageHeaderError("malformed WebP (bad VP8 start code)")
        w, h = struct.unpack_from("<HH", data, 26)
        width, height = w & 0x3FFF, h & 0x3FFF
    else:
        raise ImageHeaderError(f"malformed WebP (unknown chunk {chunk!r})")
    if width == 0 or height == 0:
        raise ImageHeaderError(f"malformed WebP ({width}x{height})")
    return ImageHeader("webp", width, height)
