"""``detect-train train``: the training recipe as ``get_args_parser()`` + ``main(cfg)``."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from pycocotools.coco import COCO
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from training import distributed
from training.checkpoint import Checkpoint, save_checkpoint
from training.config import TrainConfig
from training.data.coco import resolve_split
from training.data.finetune import write_mixed_dataset
from training.data.loader import LoaderRequest, TrainLoader
from training.detectors.registry import get_task
from training.detectors.task import DetectorTask
from training.ema import ModelEma
from training.engine import Trainer, evaluate, train_one_epoch
from training.optim import build_scheduler, build_sgd
from training.run_log import RunLog
from training.weights import load_checkpoint


def default_split(root: str, kind: str) -> str:
    """``train2017``/``val2017`` when the dataset is laid out like COCO 2017, else ``train``/``val``."""
    coco_name = f"{kind}2017"
    return coco_name if (Path(root) / "annotations" / f"instances_{coco_name}.json").exists() else kind


def resolve_precision(precision: str, device: torch.device) -> str:
    if precision == "auto":
        return "fp16" if device.type == "cuda" else "fp32"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("fp16 autocast needs a GPU; use --precision bf16 or fp32 on the CPU")
    return precision


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def main(cfg: TrainConfig) -> dict[str, Any]:
    """Train, checkpoint every epoch, evaluate; returns the last evaluation's metrics (rank 0)."""
    if cfg.data is None:
        raise ValueError("--data is required")
    if cfg.finetune_data is not None:
        cfg = _finetune_config(cfg)
    info = distributed.init_distributed(cfg.device)
    try:
        return _train(cfg, info)
    finally:
        distributed.cleanup()


def _train(cfg: TrainConfig, info: distributed.DistInfo) -> dict[str, Any]:
    run = _setup(cfg, info)
    return _loop(run)


@dataclass
class _Run:
    """One run: what :func:`_setup` builds and :func:`_loop` advances."""

    cfg: TrainConfig
    info: distributed.DistInfo
    trainer: Trainer
    model: nn.Module  # the raw model (``trainer.model`` may be its DDP wrapper)
    loader: TrainLoader
    model_args: dict[str, Any]
    categories: list[dict[str, Any]]
    val_split: str
    log: RunLog
    start_epoch: int = 0
    iteration: int = 0


def _finetune_config(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` training on the mixed dataset it describes, written under ``<output>/finetune-data``."""
    assert cfg.data is not None and cfg.finetune_data is not None
    if cfg.resume:
        raise ValueError(
            "--finetune-data starts from --weights CHECKPOINT with a schedule of its own; --resume would "
            "continue the checkpoint's finished schedule (its last LR and step)"
        )
    if not cfg.weights:
        raise ValueError("--finetune-data needs --weights CHECKPOINT (the model to fine-tune)")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("--finetune-data runs in one process (not under torchrun)")
    mixed = write_mixed_dataset(
        cfg.data,
        cfg.train_split or default_split(cfg.data, "train"),
        cfg.val_split or default_split(cfg.data, "val"),
        cfg.finetune_data,
        cfg.finetune_split,
        Path(cfg.output) / "finetune-data",
        cfg.mix_ratio,
        cfg.seed,
    )
    print(
        f"fine-tuning on {mixed.root}: {mixed.captured_images} reviewed images "
        f"({mixed.reviewed_annotations} annotations) and {mixed.original_images} original ones",
        flush=True,
    )
    return dataclasses.replace(cfg, data=str(mixed.root), train_split="train", val_split="val")


def _categories(cfg: TrainConfig, train_split: str) -> list[dict[str, Any]]:
    assert cfg.data is not None
    _, train_ann = resolve_split(cfg.data, train_split)
    return [
        {"id": int(c["id"]), "name": str(c["name"])}
        for c in json.loads(Path(train_ann).read_text())["categories"]
    ]


def _load_resume(cfg: TrainConfig, model_args: dict[str, Any]) -> Checkpoint | None:
    resume: Checkpoint | None = load_checkpoint(cfg.resume) if cfg.resume else None
    if resume is not None and (resume.model_name != cfg.model or resume.model_args != model_args):
        raise ValueError(
            f"--resume checkpoint is {resume.model_name} {resume.model_args}, "
            f"this run is {cfg.model} {model_args}"
        )
    return resume


def _build_model(
    cfg: TrainConfig, task: DetectorTask, resume: Checkpoint | None, device: torch.device
) -> tuple[nn.Module, ModelEma | None]:
    """The model with its initial weights (resumed, ``--weights``, or fresh), and its EMA if configured."""
    model: nn.Module = task.build_model(None if resume else cfg.backbone_weights).to(device)
    if resume is not None:
        model.load_state_dict(resume.model, strict=True)
    elif cfg.weights:
        load_initial_weights(model, cfg.model, cfg.weights, inference=cfg.finetune_data is not None)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    ema = ModelEma(model, cfg.ema_decay) if cfg.ema_decay else None
    if ema is not None and resume is not None and resume.model_ema is not None:
        ema.load_state_dict(resume.model_ema, updates=resume.iteration)
    return model, ema


def _setup(cfg: TrainConfig, info: distributed.DistInfo) -> _Run:
    """Seed, read the dataset's classes, build (or resume) the model, loader, optimizer and log."""
    assert cfg.data is not None
    device = info.device
    _seed_everything(cfg.seed + info.rank)
    train_split = cfg.train_split or default_split(cfg.data, "train")
    categories = _categories(cfg, train_split)
    model_args = {"num_classes": len(categories), "backbone": cfg.backbone, **cfg.model_args}
    resume = _load_resume(cfg, model_args)
    task = get_task(cfg.model)(model_args)
    model, ema = _build_model(cfg, task, resume, device)
    train_model: nn.Module = (
        DistributedDataParallel(model, device_ids=[info.local_rank] if device.type == "cuda" else None)
        if info.enabled
        else model
    )
    request = LoaderRequest(
        cfg.pipeline, cfg.data, train_split, cfg.batch_size, cfg.workers, cfg.seed, info.rank, info.world_size
    )
    loader = task.train_loader(
        request,
        # a list from the config; the loader checks it is two numbers 0 < low <= high
        scale_jitter=None if cfg.scale_jitter is None else cast(tuple[float, float], tuple(cfg.scale_jitter)),
    )
    iters_per_epoch = len(loader)
    total_iters = cfg.epochs * iters_per_epoch
    if cfg.max_iters is not None:
        total_iters = min(total_iters, cfg.max_iters)
    lr = cfg.base_lr * info.world_size * cfg.batch_size / 32
    optimizer = build_sgd(model, lr, cfg.momentum, cfg.weight_decay)
    scheduler = build_scheduler(
        optimizer,
        kind=cfg.schedule,
        total_iters=total_iters,
        warmup_iters=cfg.warmup_iters,
        warmup_factor=cfg.warmup_factor,
        milestones=[m * iters_per_epoch for m in cfg.milestones],
    )
    precision = resolve_precision(cfg.precision, device)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    start_epoch, iteration = 0, 0
    if resume is not None:
        optimizer.load_state_dict(resume.optimizer or {})
        scheduler.load_state_dict(resume.scheduler or {})
        if resume.scaler:
            scaler.load_state_dict(resume.scaler)
        start_epoch, iteration = resume.epoch, resume.iteration
    output = Path(cfg.output)
    output.mkdir(parents=True, exist_ok=True)
    log = RunLog(output, enabled=info.is_main)
    start = {
        "config": cfg.to_dict(),
        "world_size": info.world_size,
        "lr": lr,
        "iters_per_epoch": iters_per_epoch,
    }
    log.write({"event": "start", **start, "precision": precision, "device": str(device)})
    trainer = Trainer(
        task=task,
        model=train_model,
        criterion=task.build_criterion().to(device),
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        device=device,
        precision=precision,
        ema=ema,
        clip_grad_norm=cfg.clip_grad_norm,
        max_iters=cfg.max_iters,
        log_interval=cfg.log_interval,
        world_size=info.world_size,
        on_log=log.write,
        show_progress=info.is_main,
    )
    val_split = cfg.val_split or default_split(cfg.data, "val")
    return _Run(
        cfg, info, trainer, model, loader, model_args, categories, val_split, log, start_epoch, iteration
    )


def _loop(run: _Run) -> dict[str, Any]:
    """Train the remaining epochs: evaluate every ``eval_every`` and at the end, checkpoint every epoch."""
    cfg, info = run.cfg, run.info
    coco_gt: COCO | None = None
    metrics: dict[str, Any] = {}
    iteration = run.iteration
    run_start = time.perf_counter()
    for epoch in range(run.start_epoch, cfg.epochs):
        if cfg.max_iters is not None and iteration >= cfg.max_iters:
            break
        run.loader.set_epoch(epoch)
        epoch_start, epoch_iter_start = time.perf_counter(), iteration
        iteration = train_one_epoch(run.trainer, run.loader, epoch=epoch, start_iter=iteration)
        epoch_time = time.perf_counter() - epoch_start
        images = (iteration - epoch_iter_start) * cfg.batch_size * info.world_size
        record = {"event": "epoch", "epoch": epoch, "iteration": iteration, "seconds": epoch_time}
        run.log.write({**record, "images_per_s": images / max(epoch_time, 1e-9)})
        last = epoch == cfg.epochs - 1 or (cfg.max_iters is not None and iteration >= cfg.max_iters)
        if info.is_main and ((epoch + 1) % cfg.eval_every == 0 or last):
            assert cfg.data is not None
            coco_gt = coco_gt or _load_gt(cfg.data, run.val_split)
            metrics = _evaluate(run, coco_gt, epoch, iteration)
        if info.is_main:
            _save(run, epoch, iteration, metrics)
        distributed.barrier()
        run.model.train()
    seconds = time.perf_counter() - run_start
    output = Path(cfg.output)
    run.log.write({"event": "end", "iteration": iteration, "seconds": seconds, **metrics})
    run.log.echo(closing_line(output, iteration, seconds, metrics))
    return metrics


def _evaluate(run: _Run, coco_gt: COCO, epoch: int, iteration: int) -> dict[str, Any]:
    """COCO evaluation of the model (its EMA when there is one); logs it and returns the metrics."""
    cfg, ema = run.cfg, run.trainer.ema
    assert cfg.data is not None
    evaluator = evaluate(
        task=run.trainer.task,
        model=ema.module if ema is not None else run.model,
        loader=run.trainer.task.eval_loader(cfg.data, run.val_split, cfg.eval_batch_size, cfg.workers),
        coco_gt=coco_gt,
        categories=run.categories,
        device=run.info.device,
        verbose=False,
    )
    for iou_type, table in evaluator.summaries.items():  # the full table: train.log only
        run.log.note(f"COCO {iou_type} at epoch {epoch}, iteration {iteration}:\n{table}")
    segm = {"segm": evaluator.stats["segm"]} if "segm" in evaluator.stats else {}
    mask_ap = {f"segm_{k}": v for k, v in segm.get("segm", {}).items()}
    record = {"event": "eval", "epoch": epoch, "iteration": iteration}
    run.log.write({**record, **evaluator.stats["bbox"], **mask_ap})
    return {"bbox": evaluator.stats["bbox"], **segm, "split": run.val_split, "epoch": epoch}


def _save(run: _Run, epoch: int, iteration: int, metrics: dict[str, Any]) -> None:
    t = run.trainer
    ckpt = Checkpoint(
        model_name=run.cfg.model,
        model_args=run.model_args,
        categories=run.categories,
        model=run.model.state_dict(),
        config=run.cfg.to_dict(),
        epoch=epoch + 1,
        iteration=iteration,
        optimizer=t.optimizer.state_dict(),
        scheduler=t.scheduler.state_dict(),
        scaler=t.scaler.state_dict(),
        metrics=metrics,
        model_ema=t.ema.state_dict() if t.ema is not None else None,
    )
    save_checkpoint(ckpt, Path(run.cfg.output) / "checkpoint.pt")
    run.log.plot()


def closing_line(output: Path, iteration: int, seconds: float, metrics: dict[str, Any]) -> str:
    """``done: ...`` with the checkpoint, the last evaluation's AP and the wall time."""
    bbox = metrics.get("bbox")
    ap = f"AP {bbox['AP']:.4f} (AP50 {bbox['AP50']:.4f})" if bbox else "not evaluated"
    minutes, secs = divmod(round(seconds), 60)
    plot = output / "loss.png"
    return (
        f"done: iteration {iteration}, {ap}, {minutes} min {secs} s; checkpoint {output / 'checkpoint.pt'}"
        + (f", loss plot {plot}" if plot.exists() else "")
        + f", log {output / 'train.log'}"
    )


def load_initial_weights(model: nn.Module, model_name: str, path: str, inference: bool = False) -> None:
    """``--weights``: the whole model's weights from any file ``load_checkpoint`` reads (this project's
    checkpoints, NVIDIA's SSD300 files, torchvision's Mask R-CNN files), loaded strictly; with
    ``inference``, the weights it serves (its EMA copy when it has one: fine-tuning starts from those).

    Raises ValueError naming the architecture or the missing / unexpected / mis-shaped keys.
    """
    source = load_checkpoint(path)
    if source.model_name != model_name:
        raise ValueError(f"--weights {path} holds a {source.model_name} model, this run trains {model_name}")
    try:
        model.load_state_dict(source.inference_weights if inference else source.model, strict=True)
    except RuntimeError as exc:
        raise ValueError(
            f"--weights {path} does not fit this {model_name} ({source.model_args}): {exc}"
        ) from exc


def _load_gt(root: str, split: str) -> COCO:
    import contextlib
    import io

    _, ann = resolve_split(root, split)
    with contextlib.redirect_stdout(io.StringIO()):
        return COCO(str(ann))
