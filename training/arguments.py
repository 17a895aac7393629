"""``detect-train``'s arguments, importable without torch (``--help`` and ``synth`` need no torch)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from training.config import PRESETS, TrainConfig, make_config
from training.detectors.registry import model_names


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--preset", choices=sorted(PRESETS), help="named recipe; flags below override it")
    parser.add_argument("--model", choices=model_names())
    parser.add_argument("--backbone", help="resnet18 | resnet34 | resnet50 | resnet101 | resnet152")
    parser.add_argument("--backbone-weights", help="torchvision ImageNet weights file for the backbone")
    parser.add_argument(
        "--weights", help="initial weights of the whole model (a checkpoint or a published file), strict"
    )
    parser.add_argument(
        "--model-arg",
        dest="model_args",
        action=ModelArgAction,
        metavar="KEY=VALUE",
        help="architecture argument, repeatable (VALUE as JSON, else a string), e.g. image_size=256; "
        "replaces the preset's value for KEY",
    )
    parser.add_argument("--data", required=True, help="COCO-format dataset root (images + annotations/)")
    parser.add_argument("--train-split")
    parser.add_argument("--val-split")
    parser.add_argument("--output", help="run directory for checkpoints, logs and plots")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--max-iters", type=int)
    parser.add_argument("--batch-size", type=int, help="per process")
    parser.add_argument(
        "--base-lr", type=float, help="LR for 32 images per step; scaled by world x batch / 32"
    )
    parser.add_argument("--momentum", type=float)
    parser.add_argument("--weight-decay", type=float)
    parser.add_argument("--schedule", choices=["multistep", "cosine"])
    parser.add_argument("--milestones", type=int, nargs="+", help="epochs at which multistep decays x0.1")
    parser.add_argument("--warmup-iters", type=int)
    parser.add_argument("--pipeline", choices=["dali", "torch"])
    parser.add_argument("--workers", type=int)
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"])
    parser.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--eval-every", type=int, help="evaluate every N epochs (and after the last)")
    parser.add_argument("--eval-batch-size", type=int)
    parser.add_argument("--log-interval", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--resume", help="checkpoint to continue from (model, optimizer, schedule, step)")
    parser.add_argument(
        "--finetune-data",
        help="fine-tune: a reviewed captured COCO dataset (docs/capture.md) mixed into --data's train split; "
        "start from --weights CHECKPOINT (its EMA weights when it has them)",
    )
    parser.add_argument("--finetune-split", help="the captured dataset's split (default: captured)")
    parser.add_argument(
        "--mix-ratio", type=float, help="share of reviewed captured images in the fine-tuning split (0.5)"
    )
    parser.add_argument(
        "--ema-decay", type=float, help="EMA of the weights per step (evaluated, checkpointed, exported)"
    )
    parser.add_argument(
        "--clip-grad-norm", type=float, help="clip the global gradient L2 norm to this before each step"
    )
    parser.add_argument(
        "--scale-jitter",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        help="efficientdet-d0: random scale range of the train-time resize (default 0.1 2.0)",
    )
    return parser


class ModelArgAction(argparse.Action):
    """Collects ``--model-arg KEY=VALUE`` into a dict (values parsed as JSON when they are JSON)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        key, sep, raw = str(values).partition("=")
        if not sep or not key.strip():
            parser.error(f"{option_string} expects KEY=VALUE, got {values!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        setattr(namespace, self.dest, {**(getattr(namespace, self.dest) or {}), key.strip(): value})


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    overrides = {k: v for k, v in vars(args).items() if k not in {"preset", "command", "func", "model_args"}}
    if args.model_args:
        preset_args = PRESETS[args.preset].get("model_args", {}) if args.preset else {}
        overrides["model_args"] = {**preset_args, **args.model_args}
    return make_config(args.preset, **overrides)


def add_eval_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", required=True, help="COCO-format dataset root")
    parser.add_argument("--split", help="default: val2017 if present, else val")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--results", help="write the detections as a COCO results JSON here")
    return parser
