"""Decoding: formats, EXIF orientation, reduced-scale JPEG decoding, bad and hostile input."""

from __future__ import annotations

import struct

import cv2
import numpy as np
import pytest
from service_testkit import encode, png_bomb, with_exif_orientation

from service.errors import BadRequest, PayloadTooLarge
from service.imaging import decoding
from service.imaging.decoding import decode_image
from service.imaging.headers import ImageHeaderError, read_header

LIMIT = 40_000_000


def quadrants(height: int = 40, width: int = 60) -> np.ndarray:
    """RGB image: top-left red, top-right green, bottom-left blue, bottom-right white."""
    image = np.zeros((height, width, 3), dtype=np.uint8)
    h, w = height // 2, width // 2
    image[:h, :w] = (255, 0, 0)
    image[:h, w:] = (0, 255, 0)
    image[h:, :w] = (0, 0, 255)
    image[h:, w:] = (255, 255, 255)
    return image


def corner_colors(image: np.ndarray) -> list[tuple[int, ...]]:
    """Colours sampled well inside each quadrant (JPEG blurs edges), rounded to 0 / 255."""
    h, w = image.shape[:2]
    points = [(h // 4, w // 4), (h // 4, 3 * w // 4), (3 * h // 4, w // 4), (3 * h // 4, 3 * w // 4)]
    return [tuple(int(round(c / 255) * 255) for c in image[y, x]) for y, x in points]


RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


@pytest.mark.parametrize(
    ("ext", "params"),
    [
        (".jpg", [cv2.IMWRITE_JPEG_QUALITY, 95]),
        (".png", []),
        (".bmp", []),
        (".webp", [cv2.IMWRITE_WEBP_QUALITY, 101]),
    ],
)
def test_decodes_supported_formats_to_rgb(ext: str, params: list[int]) -> None:
    data = encode(quadrants(), ext, params)
    image = decode_image(data, max_pixels=LIMIT)
    assert image.shape == (40, 60, 3) and image.dtype == np.uint8
    assert corner_colors(image) == [RED, GREEN, BLUE, WHITE]
    header = read_header(data)
    assert (header.width, header.height) == (60, 40)


def test_lossy_webp_header() -> None:
    data = encode(quadrants(), ".webp", [cv2.IMWRITE_WEBP_QUALITY, 80])
    assert data[12:16] == b"VP8 "
    assert (read_header(data).width, read_header(data).height) == (60, 40)


def test_progressive_jpeg_decodes() -> None:
    data = encode(quadrants(), ".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])
    assert corner_colors(decode_image(data, max_pixels=LIMIT)) == [RED, GREEN, BLUE, WHITE]


@pytest.mark.parametrize(
    ("orientation", "shape", "expected"),
    [
        (1, (40, 60, 3), [RED, GREEN, BLUE, WHITE]),
        (3, (40, 60, 3), [WHITE, BLUE, GREEN, RED]),  # rotated 180
        (6, (60, 40, 3), [BLUE, RED, WHITE, GREEN]),  # viewer rotates 90 degrees clockwise
        (8, (60, 40, 3), [GREEN, WHITE, RED, BLUE]),  # viewer rotates 90 degrees counter-clockwise
    ],
)
def test_exif_orientation_is_applied(
    orientation: int, shape: tuple[int, int, int], expected: list[tuple[int, ...]]
) -> None:
    jpeg = with_exif_orientation(encode(quadrants(), ".jpg", [cv2.IMWRITE_JPEG_QUALITY, 95]), orientation)
    image = decode_image(jpeg, max_pixels=LIMIT)
    assert image.shape == shape
    assert corner_colors(image) == expected


def test_empty_body_is_rejected() -> None:
    with pytest.raises(BadRequest, match="images\\[0\\] is empty") as excinfo:
        decode_image(b"", max_pixels=LIMIT, field="images[0]")
    assert excinfo.value.field == "images[0]"


@pytest.mark.parametrize("data", [b"hello, not an image", b"GIF89a" + bytes(100), b'{"json": true}'])
def test_non_image_bytes_are_rejected(data: bytes) -> None:
    with pytest.raises(BadRequest, match="not a supported image"):
        decode_image(data, max_pixels=LIMIT)


@pytest.mark.parametrize(
    ("ext", "cut", "message"),
    [
        (".jpg", 0.5, "truncated JPEG"),
        (".jpg", 2, "truncated JPEG"),  # only the end-of-image marker missing: OpenCV alone would accept it
        (".png", 0.5, "truncated PNG"),
        (".webp", 0.5, "truncated WebP"),
        (".bmp", 0.5, "truncated BMP"),
    ],
)
def test_truncated_images_are_rejected(ext: str, cut: float, message: str) -> None:
    rng = np.random.default_rng(0)
    data = encode(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8), ext)
    truncated = data[: int(len(data) * cut)] if cut < 1 else data[: -int(cut)]
    with pytest.raises(BadRequest, match=message):
        decode_image(truncated, max_pixels=LIMIT)


def test_jpeg_cut_inside_its_header_is_rejected() -> None:
    data = encode(quadrants(), ".jpg")
    with pytest.raises(BadRequest, match="truncated JPEG"):
        decode_image(data[:40], max_pixels=LIMIT)


def test_decompression_bomb_is_rejected_from_the_header_without_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*args: object) -> None:
        raise AssertionError("no decoder may run on an over-limit image")

    monkeypatch.setattr(decoding.cv2, "imdecode", never)
    monkeypatch.setattr(decoding.simplejpeg, "decode_jpeg", never)
    bomb = png_bomb(50_000, 50_000)  # 2.5 gigapixels in a few hundred bytes
    assert len(bomb) < 1000
    with pytest.raises(PayloadTooLarge, match="50000x50000 PNG is 2500000000 pixels; the limit is 40000000"):
        decode_image(bomb, max_pixels=LIMIT, field="body")


@pytest.mark.parametrize("ext", [".jpg", ".png", ".bmp", ".webp"])
def test_pixel_limit_applies_to_every_format(ext: str) -> None:
    data = encode(np.zeros((100, 120, 3), np.uint8), ext)
    with pytest.raises(PayloadTooLarge, match="12000 pixels; the limit is 11999"):
        decode_image(data, max_pixels=11_999)
    assert decode_image(data, max_pixels=12_000).shape == (100, 120, 3)


def test_header_errors_name_the_problem() -> None:
    with pytest.raises(ImageHeaderError, match="no IHDR"):
        read_header(b"\x89PNG\r\n\x1a\n" + bytes(30))
    with pytest.raises(ImageHeaderError, match="no frame header"):
        read_header(b"\xff\xd8\xff\xda\x00\x02\xff\xd9")


# ------------------------------------------------------------------- strict and reduced-scale JPEG


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_matches_opencv_pixel_for_pixel(orientation: int) -> None:
    rng = np.random.default_rng(orientation)
    jpeg = with_exif_orientation(
        encode(rng.integers(0, 256, (40, 64, 3), dtype=np.uint8), ".jpg"), orientation
    )
    expected = cv2.cvtColor(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    np.testing.assert_array_equal(decode_image(jpeg, max_pixels=LIMIT), expected)


def test_jpeg_with_fewer_scan_rows_than_its_header_declares_is_rejected() -> None:
    data = bytearray(encode(quadrants(64, 64), ".jpg"))
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, 6000, 6000)  # header: 6000x6000; data: a 64x64 scan
    with pytest.raises(BadRequest, match="truncated JPEG: its data ends before the 6000x6000 pixels"):
        decode_image(bytes(data), max_pixels=LIMIT, field="images[0]")


@pytest.mark.parametrize(
    ("size", "network", "orientation", "denominator"),
    [
        ((4000, 3000), (300, 300), 1, 8),  # 500x375 still covers 300x300
        ((1200, 900), (300, 300), 1, 2),  # 1/4 would be 300x225: too small
        ((500, 500), (300, 300), 1, 1),  # under twice the network size: full decode
        ((3000, 1000), (300, 300), 6, 2),  # stored 3000x1000, shown 1000x3000 after rotation
    ],
)
def test_reduced_jpeg_decode_never_goes_below_the_network_size(
    size: tuple[int, int], network: tuple[int, int], orientation: int, denominator: int
) -> None:
    width, height = size
    jpeg = with_exif_orientation(encode(np.full((height, width, 3), 77, np.uint8), ".jpg"), orientation)
    plan = decoding.plan_decode(jpeg, max_pixels=LIMIT, reduce_to=lambda _: network)
    assert plan.scale_denominator == denominator
    shown = (height, width) if orientation >= 5 else (width, height)
    assert plan.original_size == shown
    image = decoding.decode_planned(jpeg, plan)
    assert image.shape[1] >= network[0] and image.shape[0] >= network[1]
    assert image.shape[0] * image.shape[1] == plan.decoded_pixels
    assert image.shape[:2] == (-(-shown[1] // denominator), -(-shown[0] // denominator))


def test_reduced_decode_gives_nearly_the_pixels_of_a_full_decode() -> None:
    from contract.geometry import stretch_resize

    rng = np.random.default_rng(0)
    image = cv2.GaussianBlur(rng.integers(0, 256, (1200, 1600, 3), dtype=np.uint8), (0, 0), 4)
    jpeg = encode(image, ".jpg", [cv2.IMWRITE_JPEG_QUALITY, 95])
    full, _ = stretch_resize(decode_image(jpeg, max_pixels=LIMIT), 300, 300)
    plan = decoding.plan_decode(jpeg, max_pixels=LIMIT, reduce_to=lambda _: (300, 300))
    assert plan.scale_denominator == 4
    reduced, transform = stretch_resize(decoding.decode_planned(jpeg, plan), 300, 300, plan.original_size)
    assert (transform.original_width, transform.original_height) == (1600, 1200)
    assert np.abs(full.astype(int) - reduced.astype(int)).mean() < 1.0
