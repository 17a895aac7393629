"""Every registered architecture: its folder agrees with its registry line, it trains one step (at its
fabricated checkpoint's tiny sizes, on the dataset's classes), and its fabricated checkpoint
(``detectors_testkit``) exports to ONNX with verification against eager PyTorch."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch
from detectors_testkit import FABRICATED

from exporters.checkpoint_export import OnnxExportRequest, export_onnx
from exporters.onnx.wrappers import UnsupportedArchitectureError, get_wrapper
from training.cli import build_parser
from training.config import PRESETS
from training.data.loader import LoaderRequest
from training.detectors.registry import ENTRIES, get_detector, get_task, model_names
from training.weights import load_checkpoint


def test_each_folder_defines_exactly_the_names_of_its_registry_line() -> None:
    for entry in ENTRIES:
        detectors = importlib.import_module(f"{entry.package}.detector").DETECTORS
        assert tuple(detector.name for detector in detectors) == entry.names


@pytest.mark.parametrize("name", model_names())
def test_task_wrapper_and_test_kit_agree_with_the_registered_name(name: str) -> None:
    detector = get_detector(name)
    assert detector.task.model_name == name
    assert get_task(name) is detector.task
    assert detector.export_wrapper.architecture == name
    assert get_wrapper(name) is detector.export_wrapper
    assert name in FABRICATED


def test_presets_and_the_cli_name_registered_architectures_only() -> None:
    assert {values.get("model", "ssd300") for values in PRESETS.values()} <= set(model_names())
    args = build_parser().parse_args(["train", "--data", "x", "--model", model_names()[0]])
    assert args.model == model_names()[0]


def test_unknown_architectures_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown model 'yolo'"):
        get_detector("yolo")
    with pytest.raises(UnsupportedArchitectureError, match="exportable"):
        get_wrapper("yolo")


@pytest.mark.slow
@pytest.mark.parametrize("name", model_names())
def test_trains_one_step_then_exports_and_verifies(name: str, tiny_coco: Path, tmp_path: Path) -> None:
    path = FABRICATED[name](tmp_path / "checkpoint.pt")
    ckpt = load_checkpoint(path)
    assert ckpt.model_name == name
    categories = json.loads((tiny_coco / "annotations" / "instances_train.json").read_text())["categories"]
    task = get_task(name)({**ckpt.model_args, "num_classes": len(categories)})
    model = task.build_model().train()
    criterion = task.build_criterion()
    loader = task.train_loader(LoaderRequest("torch", str(tiny_coco), "train", 2, 0, 0, 0, 1))
    loader.set_epoch(0)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    loss = task.loss(model, criterion, next(iter(loader)), torch.device("cpu"))
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    after = [p.detach() for p in model.parameters() if p.requires_grad]
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))

    manifest = export_onnx(OnnxExportRequest(checkpoint=path, output=tmp_path / "models" / "tiny" / "1"))
    assert manifest.architecture == name
    assert (tmp_path / "models" / "tiny" / "1" / manifest.file).is_file()
