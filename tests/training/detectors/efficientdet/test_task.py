"""EfficientDet-D0 through the shared trainer: the CPU preset's recipe on a tiny set, with EMA.

The EMA copy is what gets evaluated, checkpointed (``model_ema``) and later built for evaluation and
export; the raw weights stay in ``model`` for resuming.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from training.config import PRESETS, make_config
from training.evaluate import run_eval
from training.train import main as train_main
from training.weights import load_checkpoint

TINY = {
    "model_args": {"image_size": 128},
    "batch_size": 4,
    "workers": 0,
    "precision": "fp32",
    "log_interval": 1,
    "eval_batch_size": 4,
    "warmup_iters": 1,
    "device": "cpu",
    # Same memory format as `detect-train eval` builds: near-tied scores of a 2-step model would otherwise
    # rank differently under the channels-last convolutions' rounding.
    "channels_last": False,
}


def test_presets_hold_the_recipe() -> None:
    coco, cpu = PRESETS["efficientdet-d0-coco"], PRESETS["efficientdet-d0-cpu-small"]
    assert coco["model"] == cpu["model"] == "efficientdet-d0"
    assert coco["model_args"] == {"image_size": 512} and coco["pipeline"] == "dali"
    assert coco["ema_decay"] == cpu["ema_decay"] == 0.9998 and coco["schedule"] == "cosine"
    assert cpu["model_args"]["image_size"] % 128 == 0


def test_trains_evaluates_and_checkpoints_the_ema_weights(tiny_coco: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = make_config(
        "efficientdet-d0-cpu-small", data=str(tiny_coco), output=str(out), epochs=1, pipeline="torch", **TINY
    )
    metrics = train_main(cfg)
    ckpt = load_checkpoint(out / "checkpoint.pt")
    assert ckpt.model_name == "efficientdet-d0" and ckpt.iteration == 2
    assert ckpt.model_args == {"num_classes": 6, "backbone": "efficientnet_b0", "image_size": 128}
    assert ckpt.model_ema is not None and ckpt.config["ema_decay"] == 0.9998
    weights = [k for k in ckpt.model if k.endswith("conv_stem.weight")]
    assert weights and not torch.equal(ckpt.model[weights[0]], ckpt.model_ema[weights[0]])
    # `detect-train eval` builds the checkpoint's inference weights (the EMA) and reproduces the
    # trainer's own evaluation, which ran on the EMA copy with the letterbox geometry.
    again = run_eval(str(out / "checkpoint.pt"), str(tiny_coco), batch_size=4, workers=0, verbose=False)
    assert again == pytest.approx(metrics["bbox"])
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records].count("eval") == 1

    resumed = make_config(
        "efficientdet-d0-cpu-small",
        data=str(tiny_coco),
        output=str(out),
        epochs=2,
        max_iters=3,
        pipeline="torch",
        resume=str(out / "checkpoint.pt"),
        **TINY,
    )
    train_main(resumed)
    after = load_checkpoint(out / "checkpoint.pt")
    assert after.iteration == 3 and after.model_ema is not None
    assert not torch.equal(after.model_ema[weights[0]], ckpt.model_ema[weights[0]])


def test_dali_pipeline_trains_a_step(tiny_coco: Path, tmp_path: Path) -> None:
    pytest.importorskip("nvidia.dali")
    cfg = make_config(
        "efficientdet-d0-cpu-small",
        data=str(tiny_coco),
        output=str(tmp_path / "dali"),
        epochs=1,
        max_iters=1,
        pipeline="dali",
        ema_decay=0.0,  # off: the checkpoint then has no EMA copy
        **{**TINY, "workers": 1},
    )
    train_main(cfg)
    ckpt = load_checkpoint(tmp_path / "dali" / "checkpoint.pt")
    assert ckpt.iteration == 1 and ckpt.model_ema is None


def test_missing_backbone_choice_is_a_clear_cli_error(
    tiny_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from training import cli

    code = cli.main(
        [
            "train",
            "--model",
            "efficientdet-d0",
            "--data",
            str(tiny_coco),
            "--output",
            str(tmp_path),
            "--device",
            "cpu",
        ]
    )
    assert code == 2
    assert "efficientdet-d0 needs --backbone" in capsys.readouterr().err


def test_scale_jitter_reaches_the_training_transform(tiny_coco: Path) -> None:
    from training.data.loader import LoaderRequest
    from training.detectors.efficientdet.task import EfficientDetTask

    task = EfficientDetTask({"num_classes": 3, "backbone": "efficientnet_b0", "image_size": 128})
    default = task.train_loader(LoaderRequest("torch", str(tiny_coco), "train", 2, 0, 0, 0, 1))
    narrow = task.train_loader(
        LoaderRequest("torch", str(tiny_coco), "train", 2, 0, 0, 0, 1), scale_jitter=(0.5, 1.5)
    )
    assert default.dataset.transforms.scale_range == (0.1, 2.0)  # type: ignore[attr-defined]
    assert narrow.dataset.transforms.scale_range == (0.5, 1.5)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("model_args", "message"),
    [
        (["--preset", "ssd320-cpu-small", "--scale-jitter", "0.5", "1.5"], "applies to efficientdet-d0's"),
        (["--preset", "efficientdet-d0-cpu-small", "--scale-jitter", "1.5", "0.5"], "0 < low <= high"),
    ],
)
def test_scale_jitter_errors_are_clear(
    tiny_coco: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], model_args: list[str], message: str
) -> None:
    from training import cli

    argv = ["train", *model_args, "--data", str(tiny_coco), "--output", str(tmp_path), "--device", "cpu"]
    assert cli.main([*argv, "--max-iters", "1", "--workers", "0"]) == 2
    assert message in capsys.readouterr().err
