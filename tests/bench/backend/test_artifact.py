"""``detect-bench backend`` on the exported artifact: a tiny run prints the table and writes files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from exporters_testkit import ExportedArtifact
from machine_testkit import CPU_BF16, needs_bf16

from bench.backend.artifact import COLUMNS
from bench.backend.runtimes import plan_variants
from bench.cli import main


def test_tiny_run_prints_table_breakdown_and_writes_outputs(
    exported: ExportedArtifact, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path, csv_path, plot_path = tmp_path / "b.json", tmp_path / "b.csv", tmp_path / "b.png"
    args = ["backend", "--artifact", str(exported.directory), "--batch-sizes", "1,2", "--iterations", "2"]
    args += ["--warmup", "1", "--breakdown", "--json", str(json_path), "--csv", str(csv_path)]
    assert main([*args, "--plot", str(plot_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "2 timed iterations after 1 warm-up per batch size" in out[0]
    assert out[1].split() == ["runtime", "batch", "img/s", "avg", "ms", "p90", "ms", "p95", "ms", "p99", "ms"]
    assert list(COLUMNS) == ["runtime", "batch", "img/s", "avg ms", "p90 ms", "p95 ms", "p99 ms"]
    rows = [line.split() for line in out[3:5]]
    assert [(r[0], r[2]) for r in rows] == [("onnxruntime-cpu", "1"), ("onnxruntime-cpu", "2")]
    assert any("post-processing" in line and "% of network" in line for line in out)
    report = json.loads(json_path.read_text())
    assert len(report["rows"]) == 2 and report["rows"][1]["batch"] == 2
    assert [b["batch"] for b in report["breakdown"]] == [1, 2]
    assert all(b["postprocess_ms"] > 0 for b in report["breakdown"])
    with csv_path.open() as f:
        assert len(list(csv.DictReader(f))) == 2
    assert plot_path.stat().st_size > 0


def test_batch_larger_than_the_artifact_allows_is_an_error(
    exported: ExportedArtifact, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["backend", "--artifact", str(exported.directory), "--batch-sizes", "64", "--iterations", "1"]
    )
    assert code == 2 and "exceed the artifact's max batch 32" in capsys.readouterr().err


def test_models_compares_runtimes_and_precisions_with_ap(
    exported: ExportedArtifact, synthetic_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("openvino", reason="the openvino package (serve extra) is not installed")
    json_path = tmp_path / "runtimes.json"
    args = ["backend", "--models", str(exported.directory), "--data", str(synthetic_data)]
    args += ["--batch-sizes", "1,2", "--rounds", "2", "--iterations", "1", "--threads", "1"]
    assert main([*args, "--json", str(json_path)]) == 0
    out = capsys.readouterr().out
    assert "2 interleaved rounds x 1 calls per variant and batch size" in out
    report = json.loads(json_path.read_text())
    variants = {v["label"].split(" (")[0]: v for v in report["variants"]}
    # Where the CPU has no bf16 units, the bf16 variant is left out and said to be.
    bf16 = ["openvino bf16"] if CPU_BF16 else []
    assert list(variants) == ["onnxruntime fp32", "openvino f32", *bf16]
    assert [v["inference_precision"] for v in variants.values()] == [
        "f32",
        "f32",
        *(["bf16"] if bf16 else []),
    ]
    assert len(report["skipped"]) == (0 if CPU_BF16 else 1)
    assert CPU_BF16 or "skipped: openvino bf16 (" in out
    assert variants["onnxruntime fp32"]["cached_load_s"] is None
    assert all(variants[name]["cached_load_s"] > 0 for name in ("openvino f32", *bf16))
    assert variants["onnxruntime fp32"]["speedup"]["1"] == 1.0
    for v in variants.values():
        assert v["images_per_s"]["1"] > 0 and v["images_per_s"]["2"] > 0
        assert 0.0 <= v["ap"] <= 1.0 and v["mask_ap"] is None
    # Same graph, same precision, same images: the two f32 runtimes score the same AP.
    assert abs(variants["openvino f32"]["ap"] - variants["onnxruntime fp32"]["ap"]) < 1e-3


@needs_bf16
def test_models_of_different_input_sizes_compare_against_their_own_fp32(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("openvino", reason="the openvino package (serve extra) is not installed")
    shipped = Path(__file__).resolve().parents[3] / "models"
    json_path = tmp_path / "runtimes.json"
    # SSD300 at 300x300 in fp32 and INT8, SSD320 at 256x256 in INT8 only (its fp32 parent is not shipped).
    models = [str(shipped / name) for name in ("ssd300-synth", "ssd300-synth-int8", "ssd320-synth-int8")]
    args = ["backend", "--models", *models, "--batch-sizes", "1", "--rounds", "1", "--iterations", "1"]
    assert main([*args, "--threads", "1", "--json", str(json_path)]) == 0
    report = json.loads(json_path.read_text())
    variants = {(Path(v["artifact"]).parent.name, v["label"].split(" (")[0]): v for v in report["variants"]}
    assert variants[("ssd300-synth", "onnxruntime fp32")]["speedup"] == {"1": 1.0}
    assert variants[("ssd300-synth-int8", "openvino int8")]["speedup"]["1"] > 0
    assert variants[("ssd320-synth-int8", "openvino int8")]["images_per_s"]["1"] > 0
    assert variants[("ssd320-synth-int8", "openvino int8")]["speedup"] == {}  # no fp32 of its checkpoint ran
    # An INT8 artifact also runs with its unquantized layers in the precision its manifest does not name.
    as_served, other = (
        variants[("ssd300-synth-int8", label)] for label in ("openvino int8", "openvino int8, bf16 rest")
    )
    assert (as_served["inference_precision"], other["inference_precision"]) == ("f32", "bf16")


def test_without_bf16_units_the_bf16_variants_are_planned_as_skipped() -> None:
    shipped = Path(__file__).resolve().parents[3] / "models"
    artifacts = [shipped / "ssd300-synth" / "1", shipped / "ssd300-synth-int8" / "1"]
    variants, skipped = plan_variants(artifacts, bf16=False)
    assert [v.label.split(" (")[0] for v in variants] == [
        "onnxruntime fp32",
        "openvino f32",
        "onnxruntime int8",
        "openvino int8",
    ]
    assert skipped == [
        "openvino bf16 (ssd300-synth/1): this CPU has no bf16 units",
        "openvino int8, bf16 rest (ssd300-synth-int8/1): this CPU has no bf16 units",
    ]
    assert len(plan_variants(artifacts, bf16=True)[0]) == 6 and plan_variants(artifacts)[1] == []
