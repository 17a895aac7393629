"""Loading weight files: only tensors and plain data are unpickled, so a crafted file cannot run code."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.checkpoint import FORMAT, CheckpointError
from training.weights import build_checkpoint_model, load_checkpoint, untrained_checkpoint


class _Payload:
    """Pickles as a call to ``Path.touch(marker)``: what a crafted weights file would run on load."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[Path]]:
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize(
    "content",
    [
        lambda payload: {"format": FORMAT, "model": {"w": torch.zeros(2)}, "extra": payload},  # ours
        lambda payload: {"model": {"w": torch.zeros(2)}, "epoch": payload},  # a third-party state dict
    ],
    ids=["project-checkpoint", "third-party-weights"],
)
def test_a_crafted_pickle_is_refused_before_it_runs(tmp_path: Path, content: object) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "weights.pt"
    torch.save(content(_Payload(marker)), path)  # type: ignore[operator]
    with pytest.raises(CheckpointError, match=r"refused to load .*weights\.pt: it holds more than weights"):
        load_checkpoint(path)
    assert not marker.exists(), "the payload ran"


def test_missing_and_corrupt_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "absent.pt")
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"garbage\.pt"):
        load_checkpoint(tmp_path / "garbage.pt")


def test_untrained_checkpoint_describes_its_preset_and_builds() -> None:
    ckpt = untrained_checkpoint("ssd320-cpu-small")
    assert (ckpt.model_name, ckpt.config) == ("ssd320", {"preset": "ssd320-cpu-small"})
    assert ckpt.model_args == {
        "num_classes": 6,
        "backbone": "resnet18",
        "image_size": 256,
        "freeze_bn": False,
    }
    model = build_checkpoint_model(ckpt)
    state = torch.random.get_rng_state()
    again = untrained_checkpoint("ssd320-cpu-small")  # the same seed: the same weights
    assert all(torch.equal(model.state_dict()[k], v) for k, v in again.model.items())
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's random state is untouched
