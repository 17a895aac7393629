"""Fine-tuning data: reviewed captures only (never the model's own predictions), mixed with the original
training split by a ratio; and a fine-tuning run on it from a checkpoint's weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from training.config import make_config
from training.data.finetune import read_reviewed, write_mixed_dataset
from training.data.synthetic_scene import SHIFTS, SyntheticConfig, shifted_config
from training.train import main as train_main
from training.weights import load_checkpoint


def captured_dataset(tiny_coco: Path, root: Path, *, predictions: bool) -> Path:
    """A capture-layout dataset (``captured/`` + ``instances_captured.json``) of tiny_coco's val images;
    its annotations are the ground truth, marked as predictions (unreviewed) or not (reviewed)."""
    coco = json.loads((tiny_coco / "annotations" / "instances_val.json").read_text())
    (root / "captured").mkdir(parents=True)
    for image in coco["images"]:
        shutil.copyfile(tiny_coco / "val" / image["file_name"], root / "captured" / image["file_name"])
    annotations = [
        {**a, **({"prediction": True, "score": 0.4} if predictions else {})} for a in coco["annotations"]
    ]
    (root / "annotations").mkdir()
    captured = {"images": coco["images"], "annotations": annotations, "categories": coco["categories"]}
    (root / "annotations" / "instances_captured.json").write_text(json.dumps(captured))
    return root


def test_unreviewed_predictions_are_refused(tiny_coco: Path, tmp_path: Path) -> None:
    root = captured_dataset(tiny_coco, tmp_path / "captures", predictions=True)
    with pytest.raises(ValueError, match=r'still the model.s predictions \("prediction": true\)'):
        read_reviewed(root, "captured")
    with pytest.raises(ValueError, match="review them first"):
        write_mixed_dataset(tiny_coco, "train", "val", root, "captured", tmp_path / "mixed", 0.5)


def test_a_category_the_model_does_not_know_is_refused(tiny_coco: Path, tmp_path: Path) -> None:
    root = captured_dataset(tiny_coco, tmp_path / "captures", predictions=False)
    path = root / "annotations" / "instances_captured.json"
    coco = json.loads(path.read_text())
    coco["categories"][0]["name"] = "pentagon"
    path.write_text(json.dumps(coco))
    with pytest.raises(ValueError, match="'pentagon' is not one of the original"):
        write_mixed_dataset(tiny_coco, "train", "val", root, "captured", tmp_path / "mixed", 0.5)


@pytest.mark.parametrize(("ratio", "captured", "original"), [(0.5, 4, 4), (0.2, 4, 8), (0.8, 4, 1)])
def test_the_mix_ratio_sets_the_share_of_reviewed_images(
    tiny_coco: Path, tmp_path: Path, ratio: float, captured: int, original: int
) -> None:
    root = captured_dataset(tiny_coco, tmp_path / "captures", predictions=False)
    mixed = write_mixed_dataset(tiny_coco, "train", "val", root, "captured", tmp_path / "mixed", ratio)
    # 4 reviewed images, 8 original ones: 0.2 would want 16 original images and takes the 8 there are,
    # repeating nothing (4 / 12 is the closest share with every reviewed image once and no original twice).
    assert (mixed.captured_images, mixed.original_images) == (captured, original)
    coco: dict[str, Any] = json.loads((mixed.root / "annotations" / "instances_train.json").read_text())
    assert len(coco["images"]) == captured + original
    for image in coco["images"]:
        assert (mixed.root / "train" / image["file_name"]).is_file()
    # Every annotation is a label: no prediction mark, no score; ids are the original's.
    original_ids = {
        c["id"]
        for c in json.loads((tiny_coco / "annotations/instances_train.json").read_text())["categories"]
    }
    assert all("prediction" not in a and "score" not in a for a in coco["annotations"])
    assert {a["category_id"] for a in coco["annotations"]} <= original_ids
    assert (mixed.root / "annotations" / "instances_val.json").read_bytes() == (
        tiny_coco / "annotations" / "instances_val.json"
    ).read_bytes()
    with pytest.raises(ValueError, match="between 0 and 1"):
        write_mixed_dataset(tiny_coco, "train", "val", root, "captured", tmp_path / "m2", 1.0)


@pytest.mark.slow  # two tiny SSD300 runs with their evaluations
def test_finetuning_starts_from_the_weights_and_trains_on_the_mix(tiny_coco: Path, tmp_path: Path) -> None:
    tiny = {"backbone": "resnet18", "batch_size": 4, "workers": 0, "pipeline": "torch", "precision": "fp32"}
    tiny |= {"eval_every": 100, "eval_batch_size": 4, "warmup_iters": 1, "base_lr": 0.01, "device": "cpu"}
    base = tmp_path / "base"
    train_main(make_config("ssd300-cpu-small", data=str(tiny_coco), output=str(base), max_iters=1, **tiny))
    root = captured_dataset(tiny_coco, tmp_path / "captures", predictions=False)
    out = tmp_path / "finetune"
    cfg = make_config(
        "ssd300-cpu-small",
        data=str(tiny_coco),
        output=str(out),
        epochs=1,
        weights=str(base / "checkpoint.pt"),
        finetune_data=str(root),
        mix_ratio=0.5,
        **tiny,
    )
    train_main(cfg)
    tuned = load_checkpoint(out / "checkpoint.pt")
    assert tuned.iteration == 2  # 4 reviewed + 4 original images, batch 4: a schedule of its own
    assert tuned.config["data"] == str(out / "finetune-data")
    with pytest.raises(ValueError, match="--resume would continue"):
        train_main(make_config(**{**cfg.to_dict(), "resume": str(base / "checkpoint.pt")}))
    with pytest.raises(ValueError, match="needs --weights"):
        train_main(make_config(**{**cfg.to_dict(), "weights": None}))


def test_shifts_change_the_scenes_and_unknown_ones_are_named() -> None:
    assert shifted_config(["dark"]).tone == SHIFTS["dark"]["tone"]
    small = shifted_config(["small", "dark"], SyntheticConfig(max_objects=2))
    assert small.size_range == (0.06, 0.2) and small.max_objects == 2 and small.tone is not None
    with pytest.raises(ValueError, match=r"unknown shift\(s\) \['night'\]"):
        shifted_config(["night"])
