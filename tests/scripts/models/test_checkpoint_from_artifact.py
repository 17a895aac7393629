"""A checkpoint rebuilt from an EfficientDet-D0 artifact computes what the artifact computes, BatchNorm
statistics folded into its convolutions included (one conv shared by a BatchNorm per level)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from scripts_testkit import load_script
from torch import nn

from contract.manifest import Manifest
from exporters.checkpoint_export import OnnxExportRequest, export_onnx
from training.checkpoint import Checkpoint, save_checkpoint
from training.detectors.registry import build_model
from training.weights import load_checkpoint


@pytest.mark.slow  # three exports of a small EfficientDet-D0
def test_the_rebuilt_checkpoint_gives_the_artifacts_detections(tmp_path: Path) -> None:
    args = {"num_classes": 3, "backbone": "efficientnet_b0", "image_size": 128}
    torch.manual_seed(0)
    model = build_model("efficientdet-d0", **args)
    with torch.no_grad():  # statistics far from the identity, so the fold changes every weight
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.8, 1.2)
                module.bias.normal_(0, 0.1)
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.8, 1.2)
        for name, parameter in model.named_parameters():  # scores spread around 0.3, not all below 0.05
            if name.startswith("class_net.predict") and name.endswith("bias"):
                parameter.normal_(-1.0, 1.0)
    categories = [{"id": i + 1, "name": f"c{i}"} for i in range(3)]
    checkpoint = save_checkpoint(
        Checkpoint("efficientdet-d0", args, categories, model.state_dict()), tmp_path / "trained.pt"
    )
    artifact = tmp_path / "repo" / "toy-effdet" / "1"
    export_onnx(OnnxExportRequest(checkpoint=checkpoint, output=artifact, verify=False))

    script = load_script("models/checkpoint_from_artifact")
    rebuilt = script.rebuild(artifact, tmp_path / "rebuilt.pt")  # raises unless detections agree (1e-4)

    loaded = load_checkpoint(rebuilt)
    assert loaded.model_name == "efficientdet-d0" and loaded.model_args == args
    assert [c["name"] for c in loaded.categories] == ["c0", "c1", "c2"]
    # The statistics are gone (folded), the parameters are not the original ones, yet they compute the same.
    original = model.state_dict()
    assert all(float(v.abs().max()) == 0 for k, v in loaded.model.items() if k.endswith("running_mean"))
    assert any(
        not torch.equal(loaded.model[k], original[k]) for k in original if k.endswith("conv_dw.weight")
    )

    # The check fails on a model that computes something else: one convolution changed.
    key = next(k for k in loaded.model if k.startswith("class_net") and k.endswith("weight"))
    loaded.model[key] = loaded.model[key] * 1.5
    broken = save_checkpoint(loaded, tmp_path / "broken.pt")
    manifest = Manifest.read(artifact)
    with pytest.raises(
        SystemExit, match=r"not compute what the artifact computes|not in the rebuilt|another count"
    ):
        script._check(broken, artifact, manifest)
