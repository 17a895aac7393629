"""Golden inputs: the file round trip, what makes it unusable, and how detections are compared."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from contract.manifest import InputSpec, SelfCheckSpec
from contract.self_check import GoldenFileError, compare, read_golden, write_golden

INPUT = InputSpec(height=24, width=32)
K = 6

Row = tuple[tuple[float, float, float, float], float, int]  # box, score, class


def outputs(*images: list[Row]) -> dict[str, np.ndarray]:
    """The output contract for one list of detections per image (K rows, padded with zeros)."""
    n = len(images)
    out = {
        "num_detections": np.zeros((n, 1), np.int32),
        "detection_boxes": np.zeros((n, K, 4), np.float32),
        "detection_scores": np.zeros((n, K), np.float32),
        "detection_classes": np.zeros((n, K), np.int32),
    }
    for i, rows in enumerate(images):
        out["num_detections"][i, 0] = len(rows)
        for j, (box, score, cls) in enumerate(rows):
            out["detection_boxes"][i, j] = box
            out["detection_scores"][i, j] = score
            out["detection_classes"][i, j] = cls
    return out


def spec_for(sha256: str = "0" * 64, images: int = 2, **fields: object) -> SelfCheckSpec:
    values: dict[str, object] = {
        "sha256": sha256,
        "images": images,
        "min_score": 0.4,
        "score_tolerance": 0.1,
        "iou": 0.7,
        "min_agreement": 0.9,
        "reference": "onnxruntime[CPUExecutionProvider] as CPU class avx2",
    }
    values.update(fields)
    return SelfCheckSpec.model_validate(values)


SQUARE = (0.1, 0.1, 0.4, 0.4)
WIDE = (0.5, 0.2, 0.9, 0.6)
CORNER = (0.0, 0.6, 0.3, 1.0)
EXPECTED = outputs([(SQUARE, 0.9, 0), (WIDE, 0.75, 2)], [(CORNER, 0.8, 1)])


@pytest.fixture
def images() -> np.ndarray:
    return np.random.default_rng(3).integers(0, 256, (2, INPUT.height, INPUT.width, 3), dtype=np.uint8)


def test_round_trip_is_exact(tmp_path: Path, images: np.ndarray) -> None:
    file, sha256 = write_golden(tmp_path, images, EXPECTED)
    assert sha256 == hashlib.sha256((tmp_path / file).read_bytes()).hexdigest()
    golden = read_golden(tmp_path, spec_for(sha256, file=file), INPUT)
    assert golden.images.dtype == np.uint8 and np.array_equal(golden.images, images)  # RGB kept, lossless
    for key, value in EXPECTED.items():
        assert np.array_equal(golden.expected[key], value) and golden.expected[key].dtype == value.dtype


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(GoldenFileError, match=f"golden file {tmp_path / 'golden.npz'} cannot be read"):
        read_golden(tmp_path, spec_for(), INPUT)


def test_a_truncated_file_or_one_of_another_version_is_refused(tmp_path: Path, images: np.ndarray) -> None:
    file, sha256 = write_golden(tmp_path, images, EXPECTED)
    path = tmp_path / file
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(GoldenFileError, match=f"{path} has sha256 .* names {sha256[:12]}.*truncated"):
        read_golden(tmp_path, spec_for(sha256), INPUT)
    _, other = write_golden(tmp_path, images[::-1].copy(), EXPECTED)  # a golden file for another model
    assert other != sha256
    with pytest.raises(GoldenFileError, match="another version of the model"):
        read_golden(tmp_path, spec_for(sha256), INPUT)


def test_inputs_of_another_size_or_inconsistent_outputs_are_refused(
    tmp_path: Path, images: np.ndarray
) -> None:
    _, sha256 = write_golden(tmp_path, images, EXPECTED)
    with pytest.raises(GoldenFileError, match=r"image_0 is \(24, 32, 3\), the model takes \(48, 32, 3\)"):
        read_golden(tmp_path, spec_for(sha256), InputSpec(height=48, width=32))
    short = {**EXPECTED, "detection_scores": EXPECTED["detection_scores"][:, :3]}
    _, sha256 = write_golden(tmp_path, images, short)
    with pytest.raises(GoldenFileError, match=r"detection_scores has shape \(2, 3\), expected \(2, 6\)"):
        read_golden(tmp_path, spec_for(sha256), INPUT)


def test_the_file_must_lie_beside_the_manifest(tmp_path: Path) -> None:
    with pytest.raises(GoldenFileError, match="not a path"):
        read_golden(tmp_path, spec_for(file="../elsewhere/golden.npz"), INPUT)


def test_identical_detections_agree() -> None:
    result = compare(EXPECTED, EXPECTED, spec_for())
    assert result.passed and result.agreement == 1.0
    assert (result.agreeing, result.missing, result.unexpected, result.moved) == (3, 0, 0, 0)
    assert result.to_dict()["agreement"] == 1.0 and result.problems == []


def test_small_differences_within_the_tolerances_agree() -> None:
    nudged = outputs(
        [((0.11, 0.1, 0.41, 0.4), 0.85, 0), (WIDE, 0.79, 2)],
        [(CORNER, 0.8, 1)],
    )
    result = compare(EXPECTED, nudged, spec_for())
    assert result.passed and result.agreeing == 3
    assert result.max_score_error == pytest.approx(0.05, abs=1e-6) and result.min_iou < 1.0


def test_a_missing_detection_disagrees() -> None:
    actual = outputs([(SQUARE, 0.9, 0)], [(CORNER, 0.8, 1)])
    result = compare(EXPECTED, actual, spec_for())
    assert (result.agreeing, result.missing) == (2, 1)
    assert result.agreement == pytest.approx(2 / 3) and not result.passed
    assert "1 expected detections missing" in result.problems[0]


def test_a_detection_of_another_class_is_missing_and_unexpected() -> None:
    actual = outputs([(SQUARE, 0.9, 0), (WIDE, 0.75, 3)], [(CORNER, 0.8, 1)])
    result = compare(EXPECTED, actual, spec_for())
    assert (result.missing, result.unexpected, result.agreeing) == (1, 1, 2) and not result.passed


def test_a_borderline_detection_on_either_side_of_the_threshold_is_not_counted() -> None:
    # 0.45 is within score_tolerance of min_score 0.4: a CPU may keep or drop it.
    expected = outputs([(SQUARE, 0.9, 0), (WIDE, 0.45, 2)], [(CORNER, 0.8, 1)])
    without = outputs([(SQUARE, 0.9, 0)], [(CORNER, 0.8, 1)])
    for a, b in ((expected, without), (without, expected)):
        result = compare(a, b, spec_for())
        assert (result.missing, result.unexpected, result.agreeing) == (0, 0, 2)
        assert result.passed and result.agreement == 1.0
    # The same detection clearly above the threshold (0.55 >= 0.4 + 0.1) does count.
    clear = outputs([(SQUARE, 0.9, 0), (WIDE, 0.55, 2)], [(CORNER, 0.8, 1)])
    assert compare(clear, without, spec_for()).missing == 1


def test_a_moved_score_or_box_disagrees() -> None:
    lower = outputs([(SQUARE, 0.7, 0), (WIDE, 0.75, 2)], [(CORNER, 0.8, 1)])
    result = compare(EXPECTED, lower, spec_for())
    assert (result.moved, result.agreeing) == (1, 2) and not result.passed
    assert result.max_score_error == pytest.approx(0.2, abs=1e-6)
    shifted = outputs([((0.2, 0.1, 0.5, 0.4), 0.9, 0), (WIDE, 0.75, 2)], [(CORNER, 0.8, 1)])  # IoU 0.5
    result = compare(EXPECTED, shifted, spec_for())
    assert result.moved == 1 and result.min_iou == pytest.approx(0.5, abs=1e-3)
    assert compare(EXPECTED, shifted, spec_for(iou=0.45)).passed


def test_no_detection_on_either_side_agrees() -> None:
    empty = outputs([], [])
    result = compare(empty, empty, spec_for())
    assert result.passed and result.agreement == 1.0 and result.agreeing == 0
    assert not compare(EXPECTED, empty, spec_for()).passed
