"""Mask R-CNN through the shared trainer: a short run evaluated for boxes and masks, presets, --weights."""

from pathlib import Path

import pytest
import torch

from training.arguments import config_from_args
from training.cli import build_parser
from training.config import PRESETS, make_config
from training.data.loader import LoaderRequest
from training.detectors.registry import get_task
from training.train import main as train_main
from training.weights import load_checkpoint

TINY = {
    "backbone": "resnet18",
    "model_args": {"image_size": 96, "rpn_pre_nms_top_n_test": 200, "rpn_post_nms_top_n_test": 50},
    "epochs": 1,
    "max_iters": 2,
    "batch_size": 2,
    "workers": 0,
    "precision": "fp32",
    "log_interval": 1,
    "eval_batch_size": 4,
    "warmup_iters": 1,
    "device": "cpu",
}


def test_short_run_checkpoints_and_scores_boxes_and_masks(tiny_coco: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    metrics = train_main(make_config("maskrcnn-cpu-small", data=str(tiny_coco), output=str(out), **TINY))
    assert set(metrics) >= {"bbox", "segm"}
    assert 0.0 <= metrics["segm"]["AP"] <= 1.0 and 0.0 <= metrics["bbox"]["AP"] <= 1.0
    ckpt = load_checkpoint(out / "checkpoint.pt")
    assert ckpt.model_name == "maskrcnn_resnet50_fpn" and ckpt.iteration == 2
    assert ckpt.model_args["image_size"] == 96 and ckpt.model_args["backbone"] == "resnet18"
    # --weights: the next run starts from this checkpoint's weights (strictly) and trains on.
    again = make_config(
        "maskrcnn-cpu-small",
        data=str(tiny_coco),
        output=str(tmp_path / "finetune"),
        weights=str(out / "checkpoint.pt"),
        **{**TINY, "max_iters": 1, "eval_every": 100, "epochs": 1},
    )
    train_main(again)
    tuned = load_checkpoint(tmp_path / "finetune" / "checkpoint.pt")
    assert tuned.iteration == 1
    changed = [
        k for k in ckpt.model if k.endswith("weight") and not torch.equal(ckpt.model[k], tuned.model[k])
    ]
    assert changed  # it trained from there


def test_predictions_carry_low_resolution_masks(tiny_coco: Path) -> None:
    task = get_task("maskrcnn_resnet50_fpn")({"num_classes": 6, "backbone": "resnet18", "image_size": 64})
    model = task.build_model().eval()
    images, _ids, letterboxes = next(iter(task.eval_loader(str(tiny_coco), "val", 2, 0)))
    assert images.shape == (2, 64, 64, 3) and len(letterboxes) == 2
    for pred in task.predict(model, images):
        k = len(pred["scores"])
        assert pred["boxes"].shape == (k, 4) and pred["masks"].shape == (k, 28, 28)
        assert bool(((pred["boxes"] >= 0.0) & (pred["boxes"] <= 1.0 + 1e-6)).all())  # normalized
    with pytest.raises(ValueError, match="--pipeline torch"):
        task.train_loader(LoaderRequest("dali", str(tiny_coco), "train", 2, 0, 0, 0, 1))


def test_presets_parse_and_the_coco_recipe_is_torchvisions() -> None:
    args = build_parser().parse_args(
        ["train", "--preset", "maskrcnn-cpu-small", "--data", "d", "--model-arg", "image_size=256"]
    )
    cfg = config_from_args(args)
    assert cfg.model == "maskrcnn_resnet50_fpn" and cfg.model_args["image_size"] == 256
    assert cfg.model_args["rpn_post_nms_top_n_test"] == 300  # the preset's other arguments stay
    coco = make_config("maskrcnn-coco", data="d")
    # SGD 0.02 for 16 images (8 GPUs x 2), 26 epochs, x0.1 at 16 and 22, warmup 1000 iterations
    assert coco.base_lr * 8 * coco.batch_size / 32 == pytest.approx(0.02)
    assert (coco.epochs, coco.milestones, coco.warmup_iters) == (26, [16, 22], 1000)
    assert PRESETS["maskrcnn-coco"]["model_args"]["norm"] == "frozen"
