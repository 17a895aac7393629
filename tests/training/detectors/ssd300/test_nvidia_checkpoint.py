"""NVIDIA's published SSD300 v1.1 layout (key names and shapes from their checkpoint) loads strictly."""

import re
from pathlib import Path

import pytest
import torch

from training.weights import build_checkpoint_model, load_checkpoint

KEYS = Path(__file__).parent / "data" / "nvidia_ssd300_resnet50_keys.txt"
_LINE = re.compile(r"^(\S+) \(([\d, ]*)\) (\w+)$")


def _nvidia_state_dict(prefix: str = "") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    state = {}
    for line in KEYS.read_text().splitlines():
        match = _LINE.match(line.strip())
        assert match, line
        name, shape_text, dtype = match.groups()
        shape = tuple(int(s) for s in shape_text.split(",") if s.strip())
        if dtype == "int64":
            state[prefix + name] = torch.tensor(7, dtype=torch.int64)
        else:
            state[prefix + name] = torch.randn(shape, generator=gen)
    return state


@pytest.mark.parametrize("prefix", ["", "module."])
def test_nvidia_layout_loads_without_missing_or_unexpected_keys(tmp_path: Path, prefix: str) -> None:
    state = _nvidia_state_dict(prefix)
    assert len(state) == 342
    path = tmp_path / "nvidia_ssdpyt_amp_200703.pt"
    torch.save(
        {
            "epoch": 64,
            "iteration": 100,
            "optimizer": {},
            "scheduler": {},
            "label_map": {i: f"c{i}" for i in range(81)},
            "model": state,
        },
        path,
    )
    ckpt = load_checkpoint(path)
    assert ckpt.source == "nvidia-ssd300"
    assert ckpt.model_args == {"num_classes": 80, "backbone": "resnet50"}
    assert ckpt.categories[0] == {"id": 1, "name": "person"} and ckpt.categories[-1]["id"] == 90
    model = build_checkpoint_model(ckpt).eval()  # strict: raises on any missing or unexpected key
    loaded = model.state_dict()
    for key, value in state.items():
        assert torch.equal(loaded[key.removeprefix("module.")], value), key
    with torch.no_grad():
        locs, confs = model(torch.zeros(1, 3, 300, 300))
    assert locs.shape == (1, 4, 8732) and confs.shape == (1, 81, 8732)


def test_unrecognised_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"weights": {}}, path)
    with pytest.raises(ValueError, match="neither a detect-checkpoint/1 checkpoint nor NVIDIA"):
        load_checkpoint(path)
    with pytest.raises(ValueError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "corrupt.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot read checkpoint"):
        load_checkpoint(tmp_path / "corrupt.pt")
