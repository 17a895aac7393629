"""The trainer end to end on a tiny synthetic set: checkpoints, resume, logs, CLI, evaluation."""

import json
from pathlib import Path

import pytest
import torch

from training import cli
from training.config import make_config
from training.train import main as train_main
from training.weights import load_checkpoint

TINY = {
    "backbone": "resnet18",
    "batch_size": 4,
    "workers": 0,
    "pipeline": "torch",
    "precision": "fp32",
    "log_interval": 1,
    "eval_every": 100,
    "eval_batch_size": 4,
    "warmup_iters": 2,
    "base_lr": 0.01,
    "device": "cpu",
}


def test_train_writes_checkpoint_log_and_plot_then_resumes(tiny_coco: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = make_config("ssd300-cpu-small", data=str(tiny_coco), output=str(out), epochs=1, **TINY)
    metrics = train_main(cfg)
    assert set(metrics["bbox"]) >= {"AP", "AP50"}
    ckpt = load_checkpoint(out / "checkpoint.pt")
    assert ckpt.epoch == 1 and ckpt.iteration == 2  # 8 images / batch 4
    assert ckpt.model_args == {"num_classes": len(ckpt.categories), "backbone": "resnet18"}
    assert [c["id"] for c in ckpt.categories] == [
        c["id"]
        for c in json.loads((tiny_coco / "annotations/instances_train.json").read_text())["categories"]
    ]
    assert ckpt.config["backbone"] == "resnet18" and ckpt.optimizer and ckpt.scheduler
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records if r["event"] == "train"] == ["train", "train"]
    assert (out / "loss.png").stat().st_size > 1000

    resumed_cfg = make_config(
        "ssd300-cpu-small",
        data=str(tiny_coco),
        output=str(out),
        epochs=2,
        resume=str(out / "checkpoint.pt"),
        **TINY,
    )
    train_main(resumed_cfg)
    resumed = load_checkpoint(out / "checkpoint.pt")
    assert resumed.epoch == 2 and resumed.iteration == 4
    assert resumed.scheduler is not None and resumed.scheduler["last_epoch"] == 4
    assert any(not torch.equal(resumed.model[k], ckpt.model[k]) for k in ckpt.model if k.endswith("weight"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (fp16 autocast, grad scaler)")
@pytest.mark.parametrize(
    "preset", ["ssd300-cpu-small", "ssd320-cpu-small", "efficientdet-d0-cpu-small", "maskrcnn-cpu-small"]
)
def test_train_on_the_gpu_with_fp16_autocast(preset: str, tiny_coco: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    settings = {k: v for k, v in TINY.items() if k != "backbone"} | {"device": "auto", "precision": "auto"}
    cfg = make_config(preset, data=str(tiny_coco), output=str(out), epochs=1, **settings)
    metrics = train_main(cfg)
    assert set(metrics["bbox"]) >= {"AP", "AP50"}
    start = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert start["device"].startswith("cuda") and start["precision"] == "fp16"
    ckpt = load_checkpoint(out / "checkpoint.pt")
    # An enabled grad scaler saves its scale; a disabled one (fp32, bf16) saves nothing.
    assert ckpt.scaler and ckpt.scaler["scale"] > 0
    assert ckpt.iteration == 2  # 8 images / batch 4


def test_resume_rejects_another_architecture(tiny_coco: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    train_main(make_config(data=str(tiny_coco), output=str(out), epochs=1, max_iters=1, **TINY))
    other = make_config(
        data=str(tiny_coco),
        output=str(tmp_path / "b"),
        epochs=1,
        resume=str(out / "checkpoint.pt"),
        **{**TINY, "backbone": "resnet34"},
    )
    with pytest.raises(ValueError, match="--resume checkpoint is ssd300"):
        train_main(other)


def test_cli_train_and_eval(tiny_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    rc = cli.main(
        [
            "train",
            "--data",
            str(tiny_coco),
            "--output",
            str(out),
            "--backbone",
            "resnet18",
            "--epochs",
            "1",
            "--max-iters",
            "1",
            "--batch-size",
            "4",
            "--workers",
            "0",
            "--pipeline",
            "torch",
            "--precision",
            "bf16",
            "--device",
            "cpu",
        ]
    )
    assert rc == 0
    # One step (log interval 20): still a loss to plot. The terminal gets one line per evaluation and a
    # closing line; pycocotools' table goes to train.log only.
    assert (out / "loss.png").stat().st_size > 1000
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("eval epoch 0 iter 1: AP ") for line in lines)
    assert (
        lines[-1].startswith("done: iteration 1, AP ") and f"checkpoint {out / 'checkpoint.pt'}" in lines[-1]
    )
    assert not any("Average Precision" in line for line in lines)
    assert "Average Precision  (AP) @[ IoU=0.50:0.95" in (out / "train.log").read_text()
    results = tmp_path / "results.json"
    rc = cli.main(
        [
            "eval",
            "--checkpoint",
            str(out / "checkpoint.pt"),
            "--data",
            str(tiny_coco),
            "--batch-size",
            "2",
            "--workers",
            "0",
            "--device",
            "cpu",
            "--results",
            str(results),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    for name in ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"):
        assert f"{name}:" in printed
    assert isinstance(json.loads(results.read_text()), list)


def test_cli_reports_bad_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(
        ["train", "--data", str(tmp_path / "nope"), "--output", str(tmp_path / "o"), "--device", "cpu"]
    )
    assert rc == 2
    assert "nope" in capsys.readouterr().err
