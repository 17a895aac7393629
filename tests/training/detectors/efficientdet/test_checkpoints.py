"""Weights people already have load into the same EfficientDet-D0 model with no missing or unexpected keys.

The files are built here in the published layouts: effdet's own model writes its state dict (the layout
of ``tf_efficientdet_d0_34-f153e0cf.pth`` / ``efficientdet_d0-f3276ba8.pth``); NVIDIA's training
checkpoints are written from a description of NVIDIA's backbone modules (DeepLearningExamples
``effdet/efficientnet.py``: ``input_conv``, ``mbconv_blocks.<i>.{expand_conv, depthwise_conv,
squeeze_and_excitation, project_conv}``), independent of the loader's key mapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from training.checkpoint import Checkpoint, CheckpointError
from training.detectors.efficientdet.effdet_compat import EfficientDet, get_efficientdet_config
from training.detectors.efficientdet.model import EfficientDetD0
from training.weights import build_checkpoint_model, load_checkpoint


def effdet_model(name: str, image_size: int | None = None, num_classes: int | None = None) -> Any:
    config = get_efficientdet_config(name)
    if image_size is not None:
        config.image_size = (image_size, image_size)
    if num_classes is not None:
        config.num_classes = num_classes
    torch.manual_seed(0)
    return EfficientDet(config, pretrained_backbone=False).eval()


def randomized(state: dict[str, Tensor], seed: int) -> dict[str, Tensor]:
    """Distinct values everywhere, so a tensor loaded into the wrong slot cannot go unnoticed."""
    gen = torch.Generator().manual_seed(seed)
    return {
        k: (torch.rand(v.shape, generator=gen) + 0.5 if v.is_floating_point() else v.clone())
        for k, v in state.items()
    }


@pytest.mark.parametrize(
    ("name", "backbone", "entries"),
    [("tf_efficientdet_d0", "tf_efficientnet_b0", 784), ("efficientdet_d0", "efficientnet_b0", 748)],
)
def test_effdet_published_state_dict_loads(tmp_path: Path, name: str, backbone: str, entries: int) -> None:
    state = randomized(effdet_model(name).state_dict(), seed=1)
    assert len(state) == entries
    path = tmp_path / f"{name}.pth"
    torch.save(state, path)  # effdet's release files are bare state dicts

    ckpt = load_checkpoint(path)
    assert ckpt.model_name == "efficientdet-d0" and ckpt.source == "effdet"
    assert ckpt.model_args == {"num_classes": 90, "backbone": backbone, "image_size": 512}
    assert [c["id"] for c in ckpt.categories] == list(range(1, 91))
    assert ckpt.categories[0]["name"] == "person" and ckpt.categories[11]["name"] == "street sign"
    model = build_checkpoint_model(ckpt)  # strict
    assert isinstance(model, EfficientDetD0)
    loaded = model.state_dict()
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    # Same architecture as effdet's own config, not only the same key names.
    reference = get_efficientdet_config(name)
    for field in ("backbone_name", "pad_type", "redundant_bias", "fpn_channels", "anchor_scale"):
        assert model.config[field] == reference[field], field


def test_effdet_weights_compute_what_effdet_computes(tmp_path: Path) -> None:
    """Loaded at another input size (anchors follow it), the network's outputs are effdet's, bit for bit."""
    reference = effdet_model("efficientdet_d0", image_size=128, num_classes=5)
    torch.save({"state_dict": reference.state_dict()}, tmp_path / "trained.pth.tar")
    raw = torch.load(tmp_path / "trained.pth.tar")
    model = EfficientDetD0(num_classes=5, backbone="efficientnet_b0", image_size=128).eval()
    model.load_state_dict(load_checkpoint(tmp_path / "trained.pth.tar").model, strict=True)
    assert raw["state_dict"].keys() == model.state_dict().keys()
    images = torch.randn(2, 3, 128, 128)
    with torch.no_grad():
        ours, theirs = model(images), reference(images)
    for a, b in zip([*ours[0], *ours[1]], [*theirs[0], *theirs[1]], strict=True):
        assert torch.equal(a, b)


# --------------------------------------------------------------------------- NVIDIA DeepLearningExamples

# NVIDIA's EfficientNet-B0 (kernel, stride, repeats, in, out, expand ratio) per stage, stem 3 -> 32.
NVIDIA_B0_STAGES = [
    (3, 1, 1, 32, 16, 1),
    (3, 2, 2, 16, 24, 6),
    (5, 2, 2, 24, 40, 6),
    (3, 2, 3, 40, 80, 6),
    (5, 1, 3, 80, 112, 6),
    (5, 2, 4, 112, 192, 6),
    (3, 1, 1, 192, 320, 6),
]


def _bn(prefix: str, channels: int) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {f"{prefix}.{p}": (channels,) for p in ("weight", "bias")}
    shapes |= {f"{prefix}.running_mean": (channels,), f"{prefix}.running_var": (channels,)}
    shapes[f"{prefix}.num_batches_tracked"] = ()
    return shapes


def nvidia_backbone_shapes() -> dict[str, tuple[int, ...]]:
    """Key -> shape of NVIDIA's ``EfficientNet(features_only=True)`` state dict under ``backbone.``."""
    shapes = {"backbone.input_conv.0.weight": (32, 3, 3, 3), **_bn("backbone.input_conv.1", 32)}
    index = 0
    for kernel, _stride, repeats, c_in, c_out, expand in NVIDIA_B0_STAGES:
        for _ in range(repeats):
            p = f"backbone.mbconv_blocks.{index}"
            hidden, squeeze = c_in * expand, max(1, int(c_in * 0.25))
            if hidden != c_in:
                shapes |= {
                    f"{p}.expand_conv.0.weight": (hidden, c_in, 1, 1),
                    **_bn(f"{p}.expand_conv.1", hidden),
                }
            shapes |= {f"{p}.squeeze_and_excitation.squeeze.weight": (squeeze, hidden)}
            shapes |= {f"{p}.squeeze_and_excitation.squeeze.bias": (squeeze,)}
            shapes |= {f"{p}.squeeze_and_excitation.expand.weight": (hidden, squeeze)}
            shapes |= {f"{p}.squeeze_and_excitation.expand.bias": (hidden,)}
            shapes |= {f"{p}.depthwise_conv.0.weight": (hidden, 1, kernel, kernel)}
            shapes |= _bn(f"{p}.depthwise_conv.1", hidden)
            shapes |= {
                f"{p}.project_conv.0.weight": (c_out, hidden, 1, 1),
                **_bn(f"{p}.project_conv.1", c_out),
            }
            index, c_in = index + 1, c_out
    return shapes


def nvidia_state_dict(seed: int, padded_classes: int = 96) -> dict[str, Tensor]:
    """NVIDIA's D0 layout: its backbone, effdet's ``efficientdet_d0`` BiFPN/heads, a class head padded to
    ``padded_classes`` (``--fused-focal-loss``), as ``DetBenchTrain`` saves it (``model.``, anchors)."""
    gen = torch.Generator().manual_seed(seed)
    state: dict[str, Tensor] = {}
    for key, shape in nvidia_backbone_shapes().items():
        state[key] = torch.tensor(3) if not shape else torch.rand(shape, generator=gen) + 0.5
    heads = effdet_model("efficientdet_d0", num_classes=padded_classes).state_dict()
    state |= randomized({k: v for k, v in heads.items() if not k.startswith("backbone.")}, seed + 1)
    bench = {f"model.{k}": v for k, v in state.items()}
    bench["anchors.boxes"] = torch.zeros(49104, 4)
    return bench


def test_nvidia_training_checkpoint_loads_with_ema_and_padded_head(tmp_path: Path) -> None:
    raw_state, ema_state = nvidia_state_dict(seed=1), nvidia_state_dict(seed=7)
    path = tmp_path / "checkpoint_299.pth.tar"
    torch.save(
        {
            "epoch": 299,
            "arch": "efficientdet_d0",
            "state_dict": raw_state,
            "optimizer": {},
            "version": 2,
            "state_dict_ema": ema_state,
            "metric": 0.34,
        },
        path,
    )
    ckpt = load_checkpoint(path)
    assert ckpt.source == "nvidia-efficientdet" and ckpt.epoch == 299
    assert ckpt.model_args == {"num_classes": 90, "backbone": "nvidia_efficientnet_b0", "image_size": 512}
    assert ckpt.model_ema is not None
    model = build_checkpoint_model(ckpt)  # strict, and from the EMA weights
    loaded = model.state_dict()
    assert len(loaded) == 748

    def nv(key: str) -> Tensor:
        return ema_state[f"model.{key}"]

    # Spot checks of the mapping, stated independently of the loader.
    assert torch.equal(loaded["backbone.conv_stem.weight"], nv("backbone.input_conv.0.weight"))
    assert torch.equal(loaded["backbone.bn1.running_var"], nv("backbone.input_conv.1.running_var"))
    assert torch.equal(
        loaded["backbone.blocks.0.0.bn1.weight"], nv("backbone.mbconv_blocks.0.depthwise_conv.1.weight")
    )
    assert torch.equal(
        loaded["backbone.blocks.0.0.conv_pw.weight"], nv("backbone.mbconv_blocks.0.project_conv.0.weight")
    )
    assert torch.equal(
        loaded["backbone.blocks.1.1.bn1.bias"], nv("backbone.mbconv_blocks.2.expand_conv.1.bias")
    )
    assert torch.equal(
        loaded["backbone.blocks.1.1.bn2.bias"], nv("backbone.mbconv_blocks.2.depthwise_conv.1.bias")
    )
    assert torch.equal(
        loaded["backbone.blocks.6.0.conv_pwl.weight"], nv("backbone.mbconv_blocks.15.project_conv.0.weight")
    )
    assert torch.equal(
        loaded["backbone.blocks.6.0.bn3.running_mean"],
        nv("backbone.mbconv_blocks.15.project_conv.1.running_mean"),
    )
    se = nv("backbone.mbconv_blocks.3.squeeze_and_excitation.squeeze.weight")
    assert torch.equal(loaded["backbone.blocks.2.0.se.conv_reduce.weight"], se[:, :, None, None])
    assert torch.equal(
        loaded["fpn.cell.2.fnode.7.combine.edge_weights"], nv("fpn.cell.2.fnode.7.combine.edge_weights")
    )
    # The padded class head: channel = anchor * 96 + class; the 6 padding classes are dropped.
    head = nv("class_net.predict.conv_pw.bias").reshape(9, 96)[:, :90].reshape(-1)
    assert torch.equal(loaded["class_net.predict.conv_pw.bias"], head)
    # The raw (non-EMA) weights are kept for anyone resuming training.
    assert torch.equal(
        ckpt.model["backbone.conv_stem.weight"], raw_state["model.backbone.input_conv.0.weight"]
    )
    assert model.backbone.bn1.eps == pytest.approx(1e-3)  # NVIDIA's EfficientNet BatchNorm eps


@pytest.mark.parametrize("prefix", ["module.", "module.model."])
def test_nvidia_processed_state_dict_with_prefix(tmp_path: Path, prefix: str) -> None:
    """NVIDIA's ``checkpoint_processing.py`` output: a bare (EMA) state dict; DDP may add ``module.``."""
    state = {prefix + k.removeprefix("model."): v for k, v in nvidia_state_dict(3, padded_classes=8).items()}
    torch.save(state, tmp_path / "Effdet_B0.pth")
    ckpt = load_checkpoint(tmp_path / "Effdet_B0.pth")
    assert ckpt.model_args["num_classes"] == 8 and ckpt.model_ema is None
    build_checkpoint_model(ckpt)


def test_other_efficientdet_sizes_are_refused(tmp_path: Path) -> None:
    state = effdet_model("tf_efficientdet_d1").state_dict()
    torch.save(state, tmp_path / "d1.pth")
    with pytest.raises(CheckpointError, match="only EfficientDet-D0"):
        load_checkpoint(tmp_path / "d1.pth")


def test_own_checkpoint_round_trips_ema(tmp_path: Path) -> None:
    model = EfficientDetD0(num_classes=2, backbone="efficientnet_b0", image_size=128)
    raw = model.state_dict()
    ema = randomized(raw, seed=4)
    ckpt = Checkpoint(
        model_name="efficientdet-d0",
        model_args={"num_classes": 2, "backbone": "efficientnet_b0", "image_size": 128},
        categories=[{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
        model=raw,
        model_ema=ema,
    )
    from training.checkpoint import save_checkpoint

    loaded = load_checkpoint(save_checkpoint(ckpt, tmp_path / "c.pt"))
    assert loaded.model_ema is not None and loaded.model.keys() == loaded.model_ema.keys()
    built = build_checkpoint_model(loaded).state_dict()
    assert all(torch.equal(built[k], v) for k, v in ema.items())  # inference uses the EMA weights
