"""One training epoch and one evaluation pass, independent of the architecture
(see ``training.detectors.registry``)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass, field
from typing import Any

import torch
from pycocotools.coco import COCO
from torch import nn
from tqdm import tqdm

from training.box_ops import xyxy_to_ltwh
from training.coco_eval import CocoEvaluator
from training.data.letterbox import Letterbox
from training.detectors.task import Batch, DetectorTask, Prediction
from training.ema import ModelEma
from training.masks import masks_to_rles


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    """fp16 autocast on CUDA (with a grad scaler), bf16 autocast on either device, or nothing for fp32."""
    if precision == "fp16":
        return torch.autocast(device.type, dtype=torch.float16)
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass
class Trainer:
    """What every training step of a run uses; built once (``training.train``), then one
    :func:`train_one_epoch` call per epoch.

    With ``ema``, the moving average is updated after every optimizer step. With ``clip_grad_norm``, the
    global L2 norm of the (unscaled) gradients is clipped to it before the step. ``world_size`` scales the
    logged throughput; ``on_log`` receives a ``train`` record every ``log_interval`` steps.
    """

    task: DetectorTask
    model: nn.Module
    criterion: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    device: torch.device
    precision: str = "fp32"
    ema: ModelEma | None = None
    clip_grad_norm: float | None = None
    max_iters: int | None = None
    log_interval: int = 20
    world_size: int = 1
    on_log: Callable[[dict[str, Any]], None] = field(default=lambda record: None)
    show_progress: bool = False

    def step(self, batch: Batch, iteration: int) -> float:
        """One optimizer step on ``batch``; returns the loss."""
        with autocast_context(self.device, self.precision):
            loss = self.task.loss(self.model, self.criterion, batch, self.device)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"loss is {loss.item()} at iteration {iteration}; stopping")
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()  # type: ignore[no-untyped-call]  # GradScaler.scale is untyped
        if self.clip_grad_norm is not None:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update(self.model)
        return float(loss.item())


class _LossWindow:
    """The mean loss and throughput of the steps since the last ``train`` record."""

    def __init__(self) -> None:
        self.start, self.images, self.loss, self.steps = time.perf_counter(), 0, 0.0, 0

    def add(self, loss: float, images: int) -> None:
        self.images += images
        self.loss += loss
        self.steps += 1

    def record(self, epoch: int, iteration: int, lr: float) -> dict[str, Any]:
        elapsed = time.perf_counter() - self.start
        return {
            "event": "train",
            "epoch": epoch,
            "iteration": iteration,
            "loss": self.loss / self.steps,
            "lr": lr,
            "images_per_s": self.images / elapsed,
        }


def train_one_epoch(trainer: Trainer, loader: Iterable[Batch], *, epoch: int, start_iter: int) -> int:
    """Train until the loader ends or ``trainer.max_iters`` is reached; returns the global iteration count."""
    t = trainer
    t.model.train()
    iteration = start_iter
    total = len(loader) if isinstance(loader, Sized) else None
    if total is not None and t.max_iters is not None:  # the bar ends where the run will stop
        total = max(0, min(total, t.max_iters - start_iter))
    bar = tqdm(loader, total=total, desc=f"epoch {epoch}", disable=not t.show_progress, leave=False)
    window = _LossWindow()
    for batch in bar:
        if t.max_iters is not None and iteration >= t.max_iters:
            break
        loss = t.step(batch, iteration)
        iteration += 1
        window.add(loss, int(batch[0].shape[0]) * t.world_size)
        bar.set_postfix(loss=f"{loss:.3f}")
        if iteration % t.log_interval == 0:
            t.on_log(window.record(epoch, iteration, t.optimizer.param_groups[0]["lr"]))
            window = _LossWindow()
    if window.steps:  # the steps since the last record: every run with a step has a loss to plot
        t.on_log(window.record(epoch, iteration, t.optimizer.param_groups[0]["lr"]))
    return iteration


def _to_original_pixels(boxes: torch.Tensor, where: tuple[int, int] | Letterbox) -> torch.Tensor:
    """Boxes normalized to the network input -> original-image pixels."""
    if isinstance(where, Letterbox):
        return torch.from_numpy(where.boxes_to_original(boxes.numpy()))
    height, width = where
    return boxes * torch.tensor([width, height, width, height], dtype=torch.float32)


def _segmentations(
    pred: Prediction, pixels: torch.Tensor, where: tuple[int, int] | Letterbox
) -> list[dict[str, Any]] | None:
    """COCO RLEs of a prediction's ``masks`` (if it has them), pasted into the original image."""
    if "masks" not in pred:
        return None
    height, width = (where.original_height, where.original_width) if isinstance(where, Letterbox) else where
    return masks_to_rles(pred["masks"], pixels, height, width)


@torch.no_grad()
def evaluate(
    *,
    task: DetectorTask,
    model: nn.Module,
    loader: Iterable[Batch],
    coco_gt: COCO,
    categories: list[dict[str, Any]],
    device: torch.device,
    precision: str = "fp32",
    verbose: bool = True,
) -> CocoEvaluator:
    """Predict on every batch ``(images, image_ids, orig_sizes)`` and score with pycocotools.

    ``orig_sizes`` holds per image its original ``(height, width)`` (inputs resized without keeping the
    aspect: boxes scale by the original size) or a :class:`~training.data.letterbox.Letterbox` (letterboxed
    inputs: boxes map back through it, clipped to the image, exactly as the service maps them).
    Predictions with ``masks`` (low-resolution, see :class:`~training.detectors.task.Prediction`) are pasted
    into the original image and scored as ``segm`` too.
    Runs on one process over the whole split (the trainer calls it on rank 0 only).
    """
    model.eval()
    evaluator = CocoEvaluator(coco_gt, iou_types=None)  # bbox, plus segm when predictions carry masks
    category_ids = [int(c["id"]) for c in categories]
    for images, image_ids, orig_sizes in loader:
        with autocast_context(device, precision):
            predictions = task.predict(model, images.to(device))
        results = []
        for pred, image_id, where in zip(predictions, image_ids, orig_sizes, strict=True):
            pixels = _to_original_pixels(pred["boxes"].float().cpu(), where)
            boxes = xyxy_to_ltwh(pixels)
            scores, labels = pred["scores"].tolist(), pred["labels"].tolist()
            masks = _segmentations(pred, pixels, where)
            for i, (box, score, label) in enumerate(zip(boxes.tolist(), scores, labels, strict=True)):
                result = {
                    "image_id": int(image_id),
                    "category_id": category_ids[int(label) - 1],
                    "bbox": [round(v, 3) for v in box],
                    "score": round(float(score), 5),
                }
                if masks is not None:
                    result["segmentation"] = masks[i]
                results.append(result)
        evaluator.update(results, list(image_ids))
    evaluator.accumulate_and_summarize(verbose=verbose)
    return evaluator
