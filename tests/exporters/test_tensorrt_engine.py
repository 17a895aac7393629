"""The engine build configuration, validated against the graph with no GPU."""

from __future__ import annotations

import onnx
import pytest
from exporters_testkit import ExportedArtifact

from exporters.errors import ExportError
from exporters.tensorrt_engine import BuildConfig


def test_build_config_is_validated_against_the_graph(exported: ExportedArtifact) -> None:
    model = onnx.load(str(exported.model_path))
    BuildConfig("images", 300, 300).validate(model)
    with pytest.raises(ExportError, match="min <= opt <= max, got min 4, opt 2"):
        BuildConfig("images", 300, 300, min_batch=4, opt_batch=2).validate(model)
    with pytest.raises(ExportError, match="no input 'pixels'"):
        BuildConfig("pixels", 300, 300).validate(model)
    with pytest.raises(ExportError, match=r"config expects \[B, 320, 320, 3\]"):
        BuildConfig("images", 320, 320).validate(model)
    with pytest.raises(ExportError, match="--workspace-gb must be > 0"):
        BuildConfig("images", 300, 300, workspace_gb=0).validate(model)


def test_build_config_describes_its_profile() -> None:
    config = BuildConfig("images", 300, 300, opt_batch=4, max_batch=16, timing_cache="cache")
    described = config.describe()
    assert described["profile_shapes"] == [[1, 300, 300, 3], [4, 300, 300, 3], [16, 300, 300, 3]]
    assert (described["input_name"], described["timing_cache"], described["workspace_gb"]) == (
        "images",
        "cache",
        None,
    )
