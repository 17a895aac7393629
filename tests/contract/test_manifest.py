"""The manifest schema's cross-field rules (contract/manifest.py)."""

from __future__ import annotations

import pytest
from service_testkit import PROJECT

from contract.manifest import Manifest

SSD300 = PROJECT / "models" / "ssd300-synth" / "1"


def test_unquantized_precision_is_for_int8_artifacts_only() -> None:
    fields = Manifest.read(SSD300).model_dump() | {"unquantized_precision": "bf16"}
    with pytest.raises(ValueError, match="unquantized_precision is for int8 artifacts; this one is fp32"):
        Manifest.model_validate(fields)
    assert Manifest.model_validate(fields | {"precision": "int8"}).unquantized_precision == "bf16"
