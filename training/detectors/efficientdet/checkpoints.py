"""EfficientDet-D0 weights people already have, as ``efficientdet-d0`` checkpoints.

Recognised layouts (``training.weights.load_checkpoint`` dispatches here):

- effdet's published files (``tf_efficientdet_d0_34-f153e0cf.pth``, ``efficientdet_d0-f3276ba8.pth``):
  a bare state dict of effdet's ``EfficientDet`` (``backbone.*`` in timm's naming, ``fpn.*``,
  ``class_net.*``, ``box_net.*``).
- Training checkpoints of effdet's and NVIDIA DeepLearningExamples' PyTorch ``train.py``: a dict with
  ``state_dict`` and optionally ``state_dict_ema`` (plus epoch, optimizer, ...), keys prefixed with
  ``module.`` (DistributedDataParallel) and/or ``model.`` (the ``DetBenchTrain`` wrapper, whose
  ``anchors.boxes`` buffer is dropped: anchors are recomputed from the input size).
- NVIDIA's backbone is its own EfficientNet (``backbone.input_conv.*``, ``backbone.mbconv_blocks.<i>.*``,
  squeeze-excitation as ``nn.Linear``); it is mapped onto timm's names (``conv_stem``, ``blocks.<stage>.<j>``,
  SE as 1x1 convs) so the same model class loads it. NVIDIA's recipe pads the class head to a multiple of
  8 classes (``--fused-focal-loss``: 96 for COCO's 90); the padding rows are dropped.

Variant (``backbone`` model argument) from the weights: NVIDIA's backbone names ->
``nvidia_efficientnet_b0``; the TF port's redundant conv biases -> ``tf_efficientnet_b0``; otherwise
``efficientnet_b0``. With 90 classes, labels are COCO category ids 1..90 (as the TF-ported weights).
The EMA weights (``state_dict_ema``), when present, become the checkpoint's ``model_ema``: what
``training.weights.build_checkpoint_model`` (evaluation, export) uses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from torch import Tensor

from training.checkpoint import Checkpoint, CheckpointError
from training.data.coco_categories import COCO_2017_CATEGORIES

__all__ = ["NVIDIA_BLOCK_REPEATS", "efficientdet_checkpoint", "is_efficientdet_state", "state_dicts_of"]

MODEL_NAME = "efficientdet-d0"
ANCHORS_PER_LOCATION = 9
D0_FPN_CHANNELS = 64
_TOP_LEVEL = ("backbone.", "fpn.", "class_net.", "box_net.")
_WRAPPER_PREFIXES = ("module.", "model.")
# EfficientNet-B0 MBConv repeats per stage: NVIDIA's flat block index -> timm's blocks.<stage>.<j>.
NVIDIA_BLOCK_REPEATS = (1, 2, 2, 3, 3, 4, 1)
# COCO's 10 category ids without 2017 annotations (names from the COCO paper's 91-category list).
_COCO_UNUSED = {
    12: "street sign",
    26: "hat",
    29: "shoe",
    30: "eye glasses",
    45: "plate",
    66: "mirror",
    68: "window",
    69: "desk",
    71: "door",
    83: "blender",
}


def _strip(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix) :], True
    return key


def _clean(state: dict[str, Any]) -> dict[str, Tensor]:
    """Wrapper prefixes removed, bench-only buffers (``anchors.*``) dropped."""
    cleaned = {_strip(k): v for k, v in state.items()}
    return {k: v for k, v in cleaned.items() if not k.startswith("anchors.")}


def is_efficientdet_state(state: Any) -> bool:
    """Whether ``state`` is a tensor dict shaped like an EfficientDet state dict (any wrapper prefix)."""
    if not isinstance(state, dict) or not state:
        return False
    keys = [_strip(str(k)) for k in state]
    return any(k.startswith("class_net.") for k in keys) and any(k.startswith("backbone.") for k in keys)


def state_dicts_of(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """``(weights, ema weights or None)`` if ``raw`` is one of the layouts above, else None."""
    if is_efficientdet_state(raw) and all(isinstance(v, Tensor) for v in raw.values()):
        return raw, None
    state, ema = raw.get("state_dict"), raw.get("state_dict_ema")
    if is_efficientdet_state(state) or is_efficientdet_state(ema):
        ema_dict = ema if is_efficientdet_state(ema) else None
        state_dict = state if is_efficientdet_state(state) else ema_dict
        assert state_dict is not None
        return state_dict, ema_dict
    return None


def _nvidia_block_names() -> list[tuple[int, int]]:
    return [(stage, j) for stage, repeats in enumerate(NVIDIA_BLOCK_REPEATS) for j in range(repeats)]


_NVIDIA_FIRST_STAGE = {"depthwise_conv.0": "conv_dw", "depthwise_conv.1": "bn1"}
_NVIDIA_FIRST_STAGE |= {"project_conv.0": "conv_pw", "project_conv.1": "bn2"}
_NVIDIA_INVERTED = {"expand_conv.0": "conv_pw", "expand_conv.1": "bn1", "depthwise_conv.0": "conv_dw"}
_NVIDIA_INVERTED |= {"depthwise_conv.1": "bn2", "project_conv.0": "conv_pwl", "project_conv.1": "bn3"}
_NVIDIA_SE = {
    "squeeze_and_excitation.squeeze": "se.conv_reduce",
    "squeeze_and_excitation.expand": "se.conv_expand",
}
_NVIDIA_BLOCK = re.compile(r"^backbone\.mbconv_blocks\.(\d+)\.(\w+(?:\.\w+)?)\.(\w+)$")


def _nvidia_backbone_to_timm(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """NVIDIA's EfficientNet-B0 backbone names -> timm's; everything else passes through."""
    blocks = _nvidia_block_names()
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if key.startswith("backbone.input_conv."):
            module, param = key.split(".")[2], key.split(".")[3]
            out[f"backbone.{'conv_stem' if module == '0' else 'bn1'}.{param}"] = value
            continue
        match = _NVIDIA_BLOCK.match(key)
        if match is None:
            if key.startswith("backbone."):
                raise CheckpointError(f"unrecognised NVIDIA EfficientNet backbone tensor {key!r}")
            out[key] = value
            continue
        index, module, param = int(match.group(1)), match.group(2), match.group(3)
        if index >= len(blocks):
            raise CheckpointError(
                f"NVIDIA backbone block {index} does not exist in EfficientNet-B0 ({len(blocks)} blocks)"
            )
        stage, j = blocks[index]
        names = _NVIDIA_FIRST_STAGE if stage == 0 else _NVIDIA_INVERTED
        if module in _NVIDIA_SE:
            value = value[:, :, None, None] if param == "weight" else value  # Linear -> 1x1 conv
            timm_module = _NVIDIA_SE[module]
        elif module in names:
            timm_module = names[module]
        else:
            raise CheckpointError(f"unrecognised NVIDIA EfficientNet backbone tensor {key!r}")
        out[f"backbone.blocks.{stage}.{j}.{timm_module}.{param}"] = value
    return out


def _num_classes(state: dict[str, Tensor], declared: int | None, nvidia: bool) -> tuple[int, int]:
    """``(classes to keep, classes in the head)``."""
    weight = state.get("class_net.predict.conv_pw.weight")
    if weight is None:
        raise CheckpointError("EfficientDet state dict without class_net.predict.conv_pw.weight")
    channels = int(weight.shape[0])
    if channels % ANCHORS_PER_LOCATION:
        raise CheckpointError(f"class head has {channels} outputs, not a multiple of 9 anchors")
    in_head = channels // ANCHORS_PER_LOCATION
    if declared is not None:
        if not 1 <= declared <= in_head:
            raise CheckpointError(f"checkpoint declares {declared} classes but its head has {in_head}")
        return declared, in_head
    # NVIDIA's --fused-focal-loss pads the head to a multiple of 8; COCO's 90 classes become 96.
    if nvidia and in_head == 96:
        return 90, in_head
    return in_head, in_head


def _slice_class_head(state: dict[str, Tensor], keep: int, in_head: int) -> dict[str, Tensor]:
    """Drop padded classes: channel = anchor * in_head + class -> anchor * keep + class."""
    if keep == in_head:
        return state
    out = dict(state)
    for name in ("class_net.predict.conv_pw.weight", "class_net.predict.conv_pw.bias"):
        value = state[name]
        shaped = value.reshape(ANCHORS_PER_LOCATION, in_head, *value.shape[1:])
        out[name] = shaped[:, :keep].reshape(ANCHORS_PER_LOCATION * keep, *value.shape[1:]).contiguous()
    return out


def _check_d0(state: dict[str, Tensor], path: Path) -> None:
    weight = state.get("class_net.predict.conv_pw.weight")
    assert weight is not None
    if int(weight.shape[1]) != D0_FPN_CHANNELS or "fpn.cell.3.fnode.0.combine.edge_weights" in state:
        raise CheckpointError(
            f"{path}: only EfficientDet-D0 is supported (64 BiFPN channels, 3 cells); this file has "
            f"{int(weight.shape[1])} channels"
        )


def coco_90_categories() -> list[dict[str, Any]]:
    """COCO's 90 category ids in order (label i + 1 -> id i + 1), as the TF-ported EfficientDet predicts."""
    names = dict(COCO_2017_CATEGORIES) | _COCO_UNUSED
    return [{"id": i, "name": names[i]} for i in range(1, 91)]


def _convert(state: dict[str, Any], declared: int | None) -> tuple[dict[str, Tensor], str, int]:
    cleaned = _clean(state)
    nvidia = "backbone.input_conv.0.weight" in cleaned
    if nvidia:
        cleaned = _nvidia_backbone_to_timm(cleaned)
    keep, in_head = _num_classes(cleaned, declared, nvidia)
    cleaned = _slice_class_head(cleaned, keep, in_head)
    if nvidia:
        backbone = "nvidia_efficientnet_b0"
    elif "fpn.cell.0.fnode.0.after_combine.conv.conv_pw.bias" in cleaned:
        backbone = "tf_efficientnet_b0"  # the TF port keeps conv biases in front of BatchNorm
    else:
        backbone = "efficientnet_b0"
    return cleaned, backbone, keep


def _declared(raw: dict[str, Any], name: str) -> Any:
    args = raw.get("args")
    value = getattr(args, name, None) if args is not None and not isinstance(args, dict) else None
    if isinstance(args, dict):
        value = args.get(name)
    return value


def efficientdet_checkpoint(raw: dict[str, Any], path: Path) -> Checkpoint | None:
    """The ``efficientdet-d0`` checkpoint in ``raw`` (see the module docstring), or None if not this layout.

    Raises:
        CheckpointError: an EfficientDet layout this project cannot load (not D0, unknown tensors).
    """
    found = state_dicts_of(raw)
    if found is None:
        return None
    state, ema = found
    declared = _declared(raw, "num_classes")
    model, backbone, num_classes = _convert(state, int(declared) if declared else None)
    model_ema = _convert(ema, num_classes)[0] if ema is not None else None
    _check_d0(model, path)
    image_size = _declared(raw, "input_size") or _declared(raw, "image_size") or 512
    if isinstance(image_size, list | tuple):
        image_size = image_size[-1]
    if num_classes == 90:
        categories = coco_90_categories()
    else:
        categories = [{"id": i, "name": f"class_{i}"} for i in range(1, num_classes + 1)]
    epoch = raw.get("epoch", 0)
    return Checkpoint(
        model_name=MODEL_NAME,
        model_args={"num_classes": num_classes, "backbone": backbone, "image_size": int(image_size)},
        categories=categories,
        model=model,
        model_ema=model_ema,
        epoch=int(epoch) if isinstance(epoch, int | float) else 0,
        source="nvidia-efficientdet" if backbone == "nvidia_efficientnet_b0" else "effdet",
    )
