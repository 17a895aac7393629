"""SSD320 through the shared trainer: loader batches against its anchors, a short run, the checkpoint."""

from pathlib import Path

import pytest
import torch

from training.arguments import config_from_args
from training.cli import build_parser
from training.config import PRESETS, make_config
from training.data.loader import LoaderRequest
from training.detectors.registry import get_task
from training.detectors.ssd320.anchors import AnchorConfig
from training.detectors.ssd320.model import SSD320
from training.train import main as train_main
from training.weights import build_checkpoint_model, load_checkpoint

SIZE = 64  # anchors follow the input size: 6 x (8² + 4² + 2² + 1 + 1) = 516


def test_torch_loader_yields_matched_targets_for_the_ssd320_anchors(tiny_coco: Path) -> None:
    task = get_task("ssd320")({"num_classes": 6, "backbone": "resnet18", "image_size": SIZE})
    loader = task.train_loader(LoaderRequest("torch", str(tiny_coco), "train", 4, 0, 0, 0, 1))
    images, boxes, labels = next(iter(loader))
    anchors = AnchorConfig(image_size=SIZE).num_anchors
    assert anchors == 516
    assert (
        images.shape == (4, 3, SIZE, SIZE) and boxes.shape == (4, anchors, 4) and labels.shape == (4, anchors)
    )
    assert labels.dtype == torch.int64 and int(labels.max()) <= 6 and bool((labels > 0).any())
    unmatched = labels == 0
    assert torch.allclose(boxes[unmatched], task.anchors_xywh.expand(4, -1, -1)[unmatched])
    loss = task.loss(task.build_model(), task.build_criterion(), (images, boxes, labels), torch.device("cpu"))
    assert loss.dim() == 0 and torch.isfinite(loss)


def test_cli_model_args_extend_the_preset() -> None:
    args = build_parser().parse_args(
        ["train", "--preset", "ssd320-cpu-small", "--data", "d", "--model-arg", "image_size=96"]
    )
    cfg = config_from_args(args)
    assert cfg.model == "ssd320" and cfg.model_args == {"image_size": 96, "freeze_bn": False}
    assert PRESETS["ssd320-cpu-small"]["model_args"]["image_size"] == 256  # the preset itself is untouched
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--data", "d", "--model-arg", "image_size"])


def test_coco_preset_is_nvidias_recipe() -> None:
    cfg = make_config("ssd320-coco", data="coco")
    lr_8_gpus = cfg.base_lr * 8 * cfg.batch_size / 32
    assert lr_8_gpus == pytest.approx(0.16) and lr_8_gpus * cfg.warmup_factor == pytest.approx(0.0693312)
    assert (cfg.max_iters, cfg.warmup_iters, cfg.schedule, cfg.momentum, cfg.weight_decay) == (
        12_500,
        1000,
        "cosine",
        0.9,
        4e-4,
    )
    assert cfg.model_args == {"image_size": 320, "freeze_bn": True} and cfg.backbone == "resnet50"
    assert (
        cfg.epochs * (117_266 // 8 // cfg.batch_size) >= cfg.max_iters
    )  # COCO train2017 reaches 12,500 steps


def test_short_run_checkpoints_a_model_that_rebuilds(tiny_coco: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = make_config(
        "ssd320-cpu-small",
        data=str(tiny_coco),
        output=str(out),
        model_args={"image_size": SIZE, "freeze_bn": False},
        epochs=1,
        batch_size=4,
        workers=0,
        precision="fp32",
        log_interval=1,
        eval_batch_size=4,
        warmup_iters=1,
        device="cpu",
    )
    metrics = train_main(cfg)
    assert set(metrics["bbox"]) >= {"AP", "AP50"}
    ckpt = load_checkpoint(out / "checkpoint.pt")
    assert ckpt.model_name == "ssd320" and ckpt.iteration == 2
    assert ckpt.model_args == {
        "num_classes": 6,
        "backbone": "resnet18",
        "image_size": SIZE,
        "freeze_bn": False,
    }
    model = build_checkpoint_model(ckpt)
    assert isinstance(model, SSD320) and model.image_size == SIZE
