"""From contract outputs to detections in original pixels: validity, filters, box mapping, class filter."""

from __future__ import annotations

import numpy as np
import pytest

from contract.geometry import letterbox_resize, stretch_resize
from contract.manifest import InputSpec, Label, Manifest
from service.errors import BackendError, BadRequest
from service.imaging.postprocess import DetectParams, parse_class_filter, select_detections, to_schema

LABELS = (Label(name="cat"), Label(name="dog"), Label(name="traffic light"))


def manifest(resize: str = "stretch", score_threshold: float = 0.3, max_detections: int = 5) -> Manifest:
    return Manifest(
        name="m",
        version="1",
        architecture="toy",
        format="onnx",
        file="model.onnx",
        input=InputSpec(height=64, width=64, resize=resize),  # type: ignore[arg-type]
        labels=LABELS,
        score_threshold=score_threshold,
        iou_threshold=0.5,
        max_detections=max_detections,
    )


def outputs(
    boxes: list[list[float]], scores: list[float], classes: list[int], num: int
) -> dict[str, np.ndarray]:
    return {
        "num_detections": np.array([num], dtype=np.int32),
        "detection_boxes": np.array(boxes, dtype=np.float32),
        "detection_scores": np.array(scores, dtype=np.float32),
        "detection_classes": np.array(classes, dtype=np.int32),
    }


BOXES = [[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0], [0.25, 0.25, 0.75, 0.75], [0.1, 0.1, 0.2, 0.2]]


def test_rows_beyond_num_detections_are_ignored() -> None:
    _, transform = stretch_resize(np.zeros((64, 64, 3), np.uint8), 64, 64)
    out = outputs(BOXES, [0.9, 0.8, 0.7, 0.99], [0, 1, 2, 0], num=3)
    kept = select_detections(out, transform, manifest(), DetectParams())
    assert kept.scores.tolist() == pytest.approx([0.9, 0.8, 0.7])
    assert kept.rows.tolist() == [0, 1, 2]


def test_manifest_threshold_is_the_default_and_the_request_overrides_it() -> None:
    _, transform = stretch_resize(np.zeros((64, 64, 3), np.uint8), 64, 64)
    out = outputs(BOXES, [0.9, 0.5, 0.2, 0.1], [0, 1, 2, 0], num=4)
    assert len(select_detections(out, transform, manifest(score_threshold=0.3), DetectParams())) == 2
    assert len(select_detections(out, transform, manifest(), DetectParams(score_threshold=0.15))) == 3
    assert len(select_detections(out, transform, manifest(), DetectParams(score_threshold=0.0))) == 4


def test_class_filter_and_max_detections() -> None:
    _, transform = stretch_resize(np.zeros((64, 64, 3), np.uint8), 64, 64)
    out = outputs(BOXES, [0.9, 0.8, 0.7, 0.6], [0, 1, 0, 2], num=4)
    kept = select_detections(out, transform, manifest(), DetectParams(class_ids=frozenset({0, 2})))
    assert kept.classes.tolist() == [0, 0, 2]
    kept = select_detections(out, transform, manifest(), DetectParams(max_detections=2))
    assert kept.scores.tolist() == pytest.approx([0.9, 0.8])
    assert len(select_detections(out, transform, manifest(max_detections=1), DetectParams())) == 1


def test_out_of_order_scores_are_sorted() -> None:
    _, transform = stretch_resize(np.zeros((64, 64, 3), np.uint8), 64, 64)
    out = outputs(BOXES, [0.5, 0.9, 0.7, 0.0], [0, 1, 2, 0], num=3)
    assert select_detections(out, transform, manifest(), DetectParams()).rows.tolist() == [1, 2, 0]


def test_class_index_outside_the_labels_is_a_backend_error() -> None:
    _, transform = stretch_resize(np.zeros((64, 64, 3), np.uint8), 64, 64)
    out = outputs(BOXES, [0.9, 0.8, 0.7, 0.6], [0, 7, 0, 0], num=2)
    with pytest.raises(BackendError, match="class index 7, but its manifest has 3 labels"):
        select_detections(out, transform, manifest(), DetectParams())


@pytest.mark.parametrize(
    ("height", "width"),
    [(200, 100), (100, 400)],  # tall and wide
)
def test_stretch_boxes_map_to_original_pixels(height: int, width: int) -> None:
    _, transform = stretch_resize(np.zeros((height, width, 3), np.uint8), 64, 64)
    out = outputs(BOXES, [0.9, 0.8, 0.7, 0.6], [0, 1, 2, 0], num=2)
    kept = select_detections(out, transform, manifest(), DetectParams())
    np.testing.assert_allclose(
        kept.boxes, [[0, 0, width / 2, height / 2], [width / 2, height / 2, width, height]]
    )


@pytest.mark.parametrize(
    ("height", "width", "network_box", "expected"),
    [
        # tall 200x100 -> content 64 high, 32 wide (scale 0.32); a box over the left half of the content:
        (200, 100, [0.0, 0.0, 0.25, 1.0], [0, 0, 50, 200]),
        # a box reaching into the right padding is clipped at the image's right edge:
        (200, 100, [0.25, 0.5, 0.75, 0.75], [50, 100, 100, 150]),
        # wide 100x400 -> content 64 wide, 16 high (scale 0.16); a box over the content's top half:
        (100, 400, [0.5, 0.0, 1.0, 0.125], [200, 0, 400, 50]),
        # and one reaching into the bottom padding:
        (100, 400, [0.0, 0.125, 0.25, 0.5], [0, 50, 100, 100]),
    ],
)
def test_letterbox_boxes_map_to_original_pixels(
    height: int, width: int, network_box: list[float], expected: list[float]
) -> None:
    _, transform = letterbox_resize(np.zeros((height, width, 3), np.uint8), 64, 64)
    out = outputs([network_box], [0.9], [1], num=1)
    kept = select_detections(out, transform, manifest("letterbox"), DetectParams())
    np.testing.assert_allclose(kept.boxes, [expected], atol=1e-4)


def test_parse_class_filter_accepts_names_and_ids() -> None:
    assert parse_class_filter(None, LABELS) is None
    assert parse_class_filter("cat, 2", LABELS) == frozenset({0, 2})
    assert parse_class_filter("Traffic Light,dog,", LABELS) == frozenset({1, 2})


@pytest.mark.parametrize("spec", ["", " ", ",,,", " , ,"])
def test_parse_class_filter_rejects_a_filter_without_classes(spec: str) -> None:
    with pytest.raises(BadRequest, match="classes: no class given") as caught:
        parse_class_filter(spec, LABELS)
    assert caught.value.field == "classes"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("zebra", "unknown class 'zebra'; this model knows cat, dog, traffic light"),
        ("3", "class id 3 is out of range"),
    ],
)
def test_parse_class_filter_names_the_bad_entry(spec: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as excinfo:
        parse_class_filter(spec, LABELS)
    assert excinfo.value.field == "classes"


COCO_LABELS = (
    Label(name="circle", coco_id=2),
    Label(name="square", coco_id=5),
    Label(name="cross", coco_id=42),
)


def test_parse_class_filter_reads_integers_as_category_ids_when_every_label_has_one() -> None:
    assert parse_class_filter("42, 2", COCO_LABELS) == frozenset({2, 0})
    assert parse_class_filter("Square,42", COCO_LABELS) == frozenset({1, 2})
    with pytest.raises(
        BadRequest, match=r"1 is not a category id of this model; .* 2 \(circle\), 5 \(square\)"
    ):
        parse_class_filter("1", COCO_LABELS)  # an index would be ambiguous: it is refused, not guessed
    mixed = (Label(name="a", coco_id=7), Label(name="b"))
    assert parse_class_filter("1", mixed) == frozenset({1})  # not every label has one: integers are indices


def test_display_threshold_is_the_default_and_a_request_overrides_it() -> None:
    _, transform = stretch_resize(np.zeros((30, 30, 3), np.uint8), 64, 64)
    out = outputs([[0.1, 0.2, 0.3, 0.4]] * 3, [0.9, 0.5, 0.2], [0, 1, 2], num=3)
    readable = manifest(score_threshold=0.1).model_copy(update={"display_score_threshold": 0.6})
    assert len(select_detections(out, transform, readable, DetectParams())) == 1
    assert len(select_detections(out, transform, readable, DetectParams(score_threshold=0.05))) == 3
    assert len(select_detections(out, transform, manifest(score_threshold=0.1), DetectParams())) == 3


def test_to_schema_carries_the_category_id() -> None:
    _, transform = stretch_resize(np.zeros((30, 30, 3), np.uint8), 64, 64)
    out = outputs([[0.1, 0.2, 0.3, 0.4]], [0.9], [2], num=1)
    (detection,) = to_schema(select_detections(out, transform, manifest(), DetectParams()), COCO_LABELS)
    assert (detection.class_id, detection.category_id, detection.label) == (2, 42, "cross")


def test_to_schema_uses_label_names_and_rounds() -> None:
    _, transform = stretch_resize(np.zeros((30, 30, 3), np.uint8), 64, 64)
    out = outputs([[0.1, 0.2, 0.3, 0.4]], [0.876543], [2], num=1)
    (detection,) = to_schema(select_detections(out, transform, manifest(), DetectParams()), LABELS)
    assert detection.label == "traffic light" and detection.class_id == 2
    assert detection.score == pytest.approx(0.87654)
    assert (detection.box.x1, detection.box.y1, detection.box.x2, detection.box.y2) == (3.0, 6.0, 9.0, 12.0)
    assert detection.mask is None
