"""``detect-export import`` on ONNX sources of each head type: artifacts that match the source runtime,
and clear refusals that write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from importing_testkit import (
    SIZE,
    AnchorSource,
    DecodedSource,
    DetectionsSource,
    anchors_file,
    export_source,
    sample_images,
    spec,
    write_spec,
)

from contract.manifest import Manifest
from exporters import cli
from exporters.importing import command


def _import(
    source: Path, spec_path: Path, out: Path, samples: list[Path], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    code = cli.main(
        [
            "import",
            "--source",
            str(source),
            "--spec",
            str(spec_path),
            "--output",
            str(out),
            "--samples",
            *map(str, samples),
        ]
    )
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _sources(tmp_path: Path) -> dict[str, Path]:
    anchors_file(tmp_path / "anchors.npy")
    return {
        "anchors": export_source(AnchorSource(nchw=True), tmp_path / "anchors.onnx", "anchors", nchw=True),
        "decoded": export_source(DecodedSource(), tmp_path / "decoded.onnx", "decoded"),
        "detections": export_source(DetectionsSource(), tmp_path / "detections.onnx", "detections"),
    }


@pytest.mark.parametrize("kind", ["anchors", "decoded", "detections"])
def test_import_writes_an_artifact_that_obeys_the_contract(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _sources(tmp_path)[kind]
    out = tmp_path / "models" / f"toy-{kind}" / "1"
    samples = sample_images(tmp_path)
    code, text = _import(source, write_spec(tmp_path, spec(kind)), out, samples, capsys)
    assert code == 0, text
    manifest = Manifest.read(out)
    assert [label.name for label in manifest.labels] == ["red", "green", "blue"]
    assert manifest.verification["passed"] and manifest.verification["reference_detections"] > 0
    assert manifest.verification["matched"] == manifest.verification["reference_detections"]
    assert manifest.self_check is not None and (out / manifest.self_check.file).is_file()
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    images = np.random.default_rng(1).integers(0, 256, (5, SIZE, SIZE, 3), dtype=np.uint8)
    num, boxes, scores, classes = session.run(list(manifest.outputs), {"images": images})
    assert num.shape == (5, 1) and boxes.shape == (5, 20, 4) and scores.shape == classes.shape == (5, 20)
    assert num.dtype == classes.dtype == np.int32
    for i in range(5):
        n = int(num[i, 0])
        assert n > 0 and np.all(np.diff(scores[i, :n]) <= 0) and np.all(scores[i, :n] > 0.2)
        assert np.all(scores[i, n:] == 0) and np.all(classes[i, :n] < 3)


def test_the_anchor_head_decodes_as_the_reference_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The served boxes are the reference decode's: a box coder read the other way round would not pass."""
    source = _sources(tmp_path)["anchors"]
    samples = sample_images(tmp_path)
    fields = spec("anchors")
    code, text = _import(source, write_spec(tmp_path, fields), tmp_path / "a" / "1", samples, capsys)
    assert code == 0, text
    from exporters.importing.reference import decode_anchors
    from exporters.importing.spec import AnchorHead

    anchors = np.load(tmp_path / "anchors.npy").astype(np.float64)
    codes = np.zeros((len(anchors), 4))
    head = AnchorHead.model_validate(fields["head"])
    boxes = decode_anchors(codes, anchors, head)  # zero codes: the anchors themselves
    assert np.allclose(boxes[:, 0], anchors[:, 1] - anchors[:, 3] / 2)
    assert np.allclose(boxes[:, 3], anchors[:, 0] + anchors[:, 2] / 2)
    codes[:, 2] = 5.0  # th = h_scale: the height grows by e
    grown = decode_anchors(codes, anchors, head)
    assert np.allclose(grown[:, 3] - grown[:, 1], np.e * anchors[:, 2])


def _refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    fields: dict[str, object],
    source: Path | None = None,
) -> str:
    out = tmp_path / "models" / "refused" / "1"
    source = source or _sources(tmp_path)[kind]
    code, text = _import(source, write_spec(tmp_path, fields), out, sample_images(tmp_path), capsys)
    assert code == cli.EXIT_BAD_INPUT, text
    assert (
        not out.exists() and not any((tmp_path / "models").glob("**/*"))
        if (tmp_path / "models").exists()
        else True
    )
    return text


def test_outputs_that_do_not_match_the_declared_head_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _refused(tmp_path, capsys, "anchors", spec("anchors", boxes="raw_boxes"))
    assert "'raw_boxes'" in text and "box_encodings" in text
    # The scores output declared as the boxes: [1, 32, 3] cannot be boxes.
    text = _refused(tmp_path, capsys, "decoded", spec("decoded", boxes="scores", scores="boxes"))
    assert "head.boxes 'scores' has shape [batch, 32, 3]; expected [batch, rows, 4]" in text


def test_a_label_map_with_the_wrong_number_of_classes_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _refused(tmp_path, capsys, "anchors", spec("anchors", labels=["background", "red", "green"]))
    assert "labels: 2 classes (background removed) but 'class_predictions' scores 4 columns" in text


def test_anchors_that_do_not_match_the_output_count_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = _sources(tmp_path)
    np.save(tmp_path / "anchors.npy", np.load(tmp_path / "anchors.npy")[:30])
    text = _refused(tmp_path, capsys, "anchors", spec("anchors"), sources["anchors"])
    assert "anchors: 30 anchors but 'box_encodings' has 32 rows" in text


def test_a_tfjs_model_missing_its_weights_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model_json = tmp_path / "model.json"
    manifest = {
        "weightsManifest": [{"paths": ["group1-shard1of2.bin", "group1-shard2of2.bin"], "weights": []}]
    }
    model_json.write_text(json.dumps(manifest))
    (tmp_path / "group1-shard1of2.bin").write_bytes(b"\0" * 16)
    text = _refused(tmp_path, capsys, "anchors", spec("anchors"), model_json)
    assert "TF.js weight files missing beside it: ['group1-shard2of2.bin']" in text


def test_a_graph_that_disagrees_with_the_source_runtime_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversion fault (here: one weight of the network changed) fails the verification, naming where."""
    original = command.store_weights_fp16

    def faulty(model: onnx.ModelProto) -> onnx.ModelProto:
        model = original(model)
        weight = next(t for t in model.graph.initializer if len(t.dims) == 4)
        array = onnx.numpy_helper.to_array(weight).copy()
        array.flat[0] += np.float16(3.0) if array.dtype == np.float16 else 3.0
        weight.CopyFrom(onnx.numpy_helper.from_array(array, weight.name))
        return model

    monkeypatch.setattr(command, "store_weights_fp16", faulty)
    source = _sources(tmp_path)["decoded"]
    out = tmp_path / "models" / "bad" / "1"
    code, text = _import(source, write_spec(tmp_path, spec("decoded")), out, sample_images(tmp_path), capsys)
    assert code == cli.EXIT_VERIFICATION, text
    assert "sample0.png: output 'boxes' differs by" in text
    assert not out.exists()
