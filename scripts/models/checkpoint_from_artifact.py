"""Rebuild a training checkpoint from an exported ONNX artifact whose checkpoint is not at hand.

    .venv/bin/python scripts/models/checkpoint_from_artifact.py --artifact models/efficientdet-d0-synth/1 \\
        --output runs/flywheel/base/checkpoint.pt

The shipped models come without their checkpoints (runs/ is not in the repository), yet fine-tuning
starts from one. The exporter folds each BatchNorm into the convolution before it (``onnx::Conv_*``
initializers: weight x gamma / sqrt(var + eps), beta - mean x gamma / sqrt(var + eps)) and keeps every
other parameter under its module name. This script builds the artifact's architecture from its manifest,
sets every BatchNorm to a known state (gamma 1, mean 0, var 1 - eps, so the fold leaves the weight as it is;
beta a distinct random value) with random convolutions, exports that probe with the same exporter, and
pairs each folded initializer of the probe with the parameter it came from by value. The artifact's
initializers of the same names then become the convolutions' weights and the BatchNorms' betas (gamma 1,
mean 0, var 1 - eps): the rebuilt model computes what the artifact computes. Its BatchNorms hold no
real statistics, so train it with ``--model-arg freeze_bn=true`` (they stay in inference mode: an affine
map). The check at the end runs both graphs on the same input and fails on any difference above 1e-4.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper
from torch import nn

from contract.manifest import Manifest
from exporters.checkpoint_export import OnnxExportRequest, export_onnx
from training.checkpoint import Checkpoint, save_checkpoint
from training.detectors.registry import build_model


def _probe_model(manifest: Manifest, seed: int) -> tuple[nn.Module, dict[str, object]]:
    model_args = dict(manifest.provenance.export_settings["model_args"])
    torch.manual_seed(seed)
    model = build_model(manifest.architecture, **model_args)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)  # distinct per BatchNorm: tells shared convs' levels apart
                module.bias.copy_(torch.randn_like(module.bias))
                module.running_mean.zero_()
                module.running_var.fill_(1.0 - module.eps)
    return model.eval(), model_args


def _initializers(path: Path) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def _edge_weights(
    state: dict[str, torch.Tensor],
    probe: dict[str, np.ndarray],
    shipped: dict[str, np.ndarray],
    rebuilt: dict[str, torch.Tensor],
) -> set[str]:
    """BiFPN's fast-attention weights: folded into constants, relu(w)[k] named ``.../combine/Gather[_k]``.
    Where neither graph has those constants, the weights kept their initial value (the exporter shared
    the equal constants in both): the probe's, which is that value, stays."""
    placed: set[str] = set()
    for key, tensor in state.items():
        match = re.fullmatch(r"fpn\.cell\.(\d+)\.fnode\.(\d+)\.combine\.edge_weights", key)
        if match is None:
            continue
        scope = f"/network/model/fpn/cell/cell.{match[1]}/fnode.{match[2]}/combine/Gather"
        names = [scope + ("" if k == 0 else f"_{k}") + "_output_0" for k in range(len(tensor))]
        if all(name in shipped for name in names):
            rebuilt[key] = torch.tensor([float(shipped[name]) for name in names], dtype=tensor.dtype)
            placed.add(key)
        elif not any(name in shipped or name in probe for name in names):
            placed.add(key)
    return placed


def _channel_scale(folded: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per output channel s minimizing |folded - s * weight| (least squares)."""
    axes = tuple(range(1, weight.ndim))
    num = (folded.astype(np.float64) * weight).sum(axis=axes)
    den = (weight.astype(np.float64) ** 2).sum(axis=axes)
    return np.where(den > 0, num / np.where(den > 0, den, 1), 1.0)


def _unfold(
    state: dict[str, torch.Tensor],
    probe: dict[str, np.ndarray],
    shipped: dict[str, np.ndarray],
    rebuilt: dict[str, torch.Tensor],
) -> set[str]:
    """Place the folded ``onnx::`` initializers: each probe weight is conv x its BatchNorm's gamma (found
    by the ratio), each probe bias a BatchNorm's beta. A conv shared by several BatchNorms (EfficientDet's
    heads: one per level) keeps the first level's folded weight, the others' gammas become the ratios."""
    bns = [k[: -len(".running_var")] for k in state if k.endswith(".running_var")]
    convs = [k for k, v in state.items() if v.dim() == 4]
    folds: dict[str, list[tuple[str, str]]] = {}
    placed: set[str] = set()
    for name, value in probe.items():
        if name not in shipped or not name.startswith("onnx::"):
            continue
        if value.ndim == 1:
            for bn in bns:
                beta = state[bn + ".bias"].numpy()
                if beta.shape == value.shape and np.allclose(beta, value, rtol=1e-5, atol=1e-6):
                    rebuilt[bn + ".bias"] = torch.from_numpy(shipped[name].copy())
                    placed.add(bn + ".bias")
                    break
            continue
        for conv in convs:
            weight = state[conv].numpy()
            if weight.shape != value.shape:
                continue
            scale = _channel_scale(value, weight)
            if not np.allclose(value, weight * scale.reshape(-1, *[1] * (weight.ndim - 1)), atol=1e-6):
                continue
            bn = next(
                (
                    b
                    for b in bns
                    if state[b + ".weight"].shape == scale.shape
                    and np.allclose(state[b + ".weight"].numpy(), scale, rtol=1e-4)
                ),
                None,
            )
            if bn is not None:
                folds.setdefault(conv, []).append((name, bn))
                break
    for bn in bns:
        rebuilt[bn + ".weight"] = torch.ones_like(state[bn + ".weight"])
    for conv, levels in folds.items():
        first = shipped[levels[0][0]]
        rebuilt[conv] = torch.from_numpy(first.copy())
        placed.add(conv)
        for name, bn in levels[1:]:
            scale = _channel_scale(shipped[name], first)
            rebuilt[bn + ".weight"] = torch.from_numpy(scale.astype(np.float32))
    return placed


def rebuild(artifact: Path, output: Path, seed: int = 0) -> Path:
    manifest = Manifest.read(artifact)
    model, model_args = _probe_model(manifest, seed)
    categories = [
        {"id": label.coco_id if label.coco_id is not None else i + 1, "name": label.name}
        for i, label in enumerate(manifest.labels)
    ]
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with tempfile.TemporaryDirectory() as work:
        probe_ckpt = save_checkpoint(
            Checkpoint(manifest.architecture, model_args, categories, state), Path(work) / "probe.pt"
        )
        export_onnx(
            OnnxExportRequest(
                checkpoint=probe_ckpt, output=Path(work) / "probe" / "1", name="probe", verify=False
            )
        )
        probe = _initializers(Path(work) / "probe" / "1" / "model.onnx")
    shipped = _initializers(artifact / manifest.file)
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for key, tensor in state.items():
        if tensor.is_floating_point():
            by_shape.setdefault(tuple(tensor.shape), []).append(key)
    rebuilt = dict(state)
    placed: set[str] = set()
    for name in shipped:  # parameters the exporter kept under their module names
        key = name.removeprefix("network.model.")
        if key in state and key != name and tuple(state[key].shape) == shipped[name].shape:
            rebuilt[key] = torch.from_numpy(shipped[name].copy())
            placed.add(key)
    placed |= _unfold(state, probe, shipped, rebuilt)
    placed |= _edge_weights(state, probe, shipped, rebuilt)
    statistics = (".running_mean", ".running_var", ".num_batches_tracked")
    gammas = {k[: -len(".running_var")] + ".weight" for k in state if k.endswith(".running_var")}
    missing = [k for k in state if not k.endswith(statistics) and k not in gammas and k not in placed]
    for key in missing[:]:  # an initializer the exporter shared between equal tensors (e.g. untrained zeros)
        value = state[key].numpy()
        name = next(
            (
                n
                for n, v in probe.items()
                if n in shipped and v.shape == value.shape and np.array_equal(v, value)
            ),
            None,
        )
        if name is not None:
            rebuilt[key] = torch.from_numpy(shipped[name].copy())
            missing.remove(key)
    if missing:
        raise SystemExit(f"{len(missing)} parameters not found in the artifact, e.g. {missing[:5]}")
    print(f"placed {len(placed)} of {len(probe)} initializers into {len(state)} state entries")
    checkpoint = Checkpoint(
        manifest.architecture,
        model_args,
        categories,
        rebuilt,
        config={"source": f"rebuilt from {artifact} by scripts/models/checkpoint_from_artifact.py"},
        source="detect",
    )
    path = save_checkpoint(checkpoint, output)
    _check(path, artifact, manifest)
    return path


def _check(checkpoint_path: Path, artifact: Path, manifest: Manifest) -> None:
    """Export the rebuilt checkpoint and run it and the artifact on the same images: the same number of
    detections, the same scores (sorted, within 1e-4), and each detection scoring clearly inside the kept
    set (1e-3 above the last) found with its class and box (within 1e-3) among the rebuilt model's: near
    ties may swap places, the set may not change."""
    with tempfile.TemporaryDirectory() as work:
        export_onnx(
            OnnxExportRequest(checkpoint=checkpoint_path, output=Path(work) / "check" / "1", verify=False)
        )
        ours = ort.InferenceSession(str(Path(work) / "check" / "1" / "model.onnx"))
        theirs = ort.InferenceSession(str(artifact / manifest.file))
        size = manifest.input.height
        rng = np.random.default_rng(1)
        images = np.stack([_scene(rng, size) for _ in range(4)])
        feed = {theirs.get_inputs()[0].name: images}
        a = dict(zip(manifest.outputs, ours.run(None, feed), strict=True))
        b = dict(zip(manifest.outputs, theirs.run(None, feed), strict=True))
    found = int(np.asarray(b["num_detections"]).sum())
    print(f"the artifact finds {found} objects in the {len(images)} check images")
    if found == 0:
        raise SystemExit("the check images gave no detections: nothing was compared")
    worst, compared = 0.0, 0
    for i in range(len(images)):
        n = int(np.asarray(b["num_detections"]).reshape(len(images), -1)[i, 0])
        if n != int(np.asarray(a["num_detections"]).reshape(len(images), -1)[i, 0]):
            raise SystemExit(f"check image {i}: {n} detections in the artifact, another count rebuilt")
        ours_scores, theirs_scores = a["detection_scores"][i, :n], b["detection_scores"][i, :n]
        worst = max(worst, float(np.abs(np.sort(ours_scores) - np.sort(theirs_scores)).max(initial=0)))
        last = float(theirs_scores.min(initial=1.0))
        for j in np.flatnonzero(theirs_scores > last + 1e-3):
            compared += 1
            same = a["detection_classes"][i, :n] == b["detection_classes"][i, j]
            gaps = np.abs(a["detection_boxes"][i, :n] - b["detection_boxes"][i, j]).max(axis=1)
            if not (same & (gaps <= 1e-3)).any():
                raise SystemExit(
                    f"check image {i}: detection {j} of the artifact is not in the rebuilt one's"
                )
    print(f"rebuilt vs artifact: {compared} detections compared, scores within {worst:.2e}")
    if compared == 0:
        raise SystemExit("no detection scored clearly inside the kept set: nothing was compared")
    if worst > 1e-4:
        raise SystemExit("the rebuilt model does not compute what the artifact computes")


def _scene(rng: np.random.Generator, size: int) -> np.ndarray:
    """A few filled shapes on a gradient: something the detector finds."""
    import cv2

    image = np.zeros((size, size, 3), np.uint8)
    image[:] = rng.integers(0, 256, 3, dtype=np.uint8)
    for _ in range(3):
        centre = (int(rng.integers(40, size - 40)), int(rng.integers(40, size - 40)))
        cv2.circle(image, centre, int(rng.integers(15, 40)), rng.integers(0, 256, 3).tolist(), -1)
    return image


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    print(rebuild(args.artifact, args.output))


if __name__ == "__main__":
    main()
