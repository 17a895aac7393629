"""``detect-export`` on bad inputs: a clear message, a non-zero exit, and nothing half-written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from exporters_testkit import ExportedArtifact, copy_artifact

from contract.manifest import Manifest
from exporters.cli import EXIT_BAD_INPUT, main
from training.checkpoint import Checkpoint, save_checkpoint


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".partial" in p.name or ".old" in p.name)


def test_missing_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "models" / "m" / "1"
    code, err = _run(["onnx", "--checkpoint", str(tmp_path / "nope.pt"), "--output", str(out)], capsys)
    assert code == EXIT_BAD_INPUT
    assert err.strip() == f"detect-export onnx: error: checkpoint not found: {tmp_path / 'nope.pt'}"
    assert not out.exists() and _leftovers(tmp_path) == []


def test_checkpoint_of_another_architecture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = save_checkpoint(
        Checkpoint("yolov3", {"num_classes": 3}, [{"id": 1, "name": "a"}], {"w": torch.zeros(1)}),
        tmp_path / "yolo.pt",
    )
    out = tmp_path / "models" / "m" / "1"
    code, err = _run(["onnx", "--checkpoint", str(ckpt), "--output", str(out)], capsys)
    assert code == EXIT_BAD_INPUT
    assert (
        "no exporter for architecture 'yolov3'; exportable: "
        "['efficientdet-d0', 'maskrcnn_resnet50_fpn', 'maskrcnn_resnet50_fpn_v2', 'ssd300', 'ssd320']"
    ) in err
    assert not out.exists() and _leftovers(tmp_path) == []


def test_file_that_is_not_a_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    code, err = _run(["onnx", "--checkpoint", str(bad), "--output", str(tmp_path / "m" / "1")], capsys)
    assert code == EXIT_BAD_INPUT and f"cannot read checkpoint {bad}" in err


def test_existing_output_is_left_alone(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "models" / "m" / "1"
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("mine")
    code, err = _run(["onnx", "--checkpoint", str(tiny_checkpoint), "--output", str(out)], capsys)
    assert code == EXIT_BAD_INPUT and "already exists (use --force to replace it)" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_corrupt_onnx_is_rejected_by_verify_and_trt(
    exported: ExportedArtifact, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    artifact = copy_artifact(exported, tmp_path)
    (artifact / "model.onnx").write_bytes(b"\x08\x07garbage")
    before = (artifact / "manifest.json").read_text()
    code, err = _run(
        ["verify", "--artifact", str(artifact), "--checkpoint", str(exported.checkpoint)], capsys
    )
    assert code == EXIT_BAD_INPUT and "is not a valid ONNX model" in err
    out = tmp_path / "trt" / "1"
    code, err = _run(["trt", "--artifact", str(artifact), "--output", str(out)], capsys)
    assert code == EXIT_BAD_INPUT and "is not a valid ONNX model" in err
    assert not out.exists() and _leftovers(tmp_path) == []
    assert (artifact / "manifest.json").read_text() == before


def test_a_folder_without_manifest_is_not_an_artifact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run(["fp16-eval", "--artifact", str(tmp_path)], capsys)
    assert code == EXIT_BAD_INPUT and "has no manifest.json; is it an exported artifact?" in err


def test_onnx_with_custom_settings_and_no_verify(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "models" / "custom" / "3"
    args = ["onnx", "--checkpoint", str(tiny_checkpoint), "--output", str(out), "--no-verify"]
    args += [
        "--max-detections",
        "50",
        "--score-threshold",
        "0.2",
        "--iou-threshold",
        "0.45",
        "--max-batch",
        "8",
    ]
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().out
    manifest = Manifest.read(out)
    assert (manifest.name, manifest.version, manifest.max_detections, manifest.max_batch_size) == (
        "custom",
        "3",
        50,
        8,
    )
    assert (manifest.score_threshold, manifest.iou_threshold) == (0.2, 0.45)
    assert manifest.verification == {"skipped": "--no-verify"}


def test_bad_threshold_is_named(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["onnx", "--checkpoint", str(tiny_checkpoint), "--output", str(tmp_path / "m" / "1")]
    code, err = _run([*args, "--max-detections", "5000"], capsys)
    assert code == EXIT_BAD_INPUT and "max_detections must be in 1..3839" in err


def test_each_command_turns_its_flags_into_its_request() -> None:
    from exporters.checkpoint_export import OnnxExportRequest
    from exporters.cli import _request, build_parser
    from exporters.precision.quantize import QuantizeRequest
    from exporters.tensorrt.config import TensorRTExportRequest

    parse = build_parser().parse_args
    onnx = parse(["onnx", "--checkpoint", "c.pt", "--output", "o", "--max-batch", "4", "--no-verify"])
    request = _request(OnnxExportRequest, onnx, max_batch_size=onnx.max_batch, verify=not onnx.no_verify)
    assert request == OnnxExportRequest(Path("c.pt"), Path("o"), max_batch_size=4, verify=False)
    trt = parse(["trt", "--artifact", "a", "--output", "o", "--max-batch", "8", "--split", "val"])
    assert _request(TensorRTExportRequest, trt, verify=True) == TensorRTExportRequest(
        Path("a"), Path("o"), max_batch=8, split="val"
    )
    q = parse(["quantize", "--artifact", "a", "--output", "o", "--data", "d", "--seed", "3", "--split", "v"])
    assert _request(
        QuantizeRequest, q, val_split=q.split, max_eval_images=None, gate=True
    ) == QuantizeRequest(Path("a"), Path("o"), "d", seed=3, val_split="v")
