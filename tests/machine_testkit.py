"""Markers for tests whose expectations hold only on some CPUs (each skip says which and why)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.runtime.backends.machine import (
    INT8_DOT_PRODUCT_FLAGS,
    cpu_has_bf16,
    cpu_int8_instructions,
    openvino_cpu_capabilities,
)


def _cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()}


CPU_BF16 = cpu_has_bf16()

# bf16 inference needs bf16 units (AVX-512 BF16 or AMX); elsewhere OpenVINO can only run f32.
needs_bf16 = pytest.mark.skipif(
    not CPU_BF16,
    reason=f"this CPU has no bf16 units (OpenVINO capabilities {list(openvino_cpu_capabilities())})",
)
# The shipped INT8 accuracy was measured on a Xeon with AMX (amx_int8). Elsewhere OpenVINO's INT8 results
# differ: lower with AVX2 alone (its vpmaddubsw sums saturate), and lower too on an AMD EPYC with AVX-512
# VNNI (docs/cpu-inference.md has both sets of figures), so the checks against those figures need AMX.
CPU_AMX_INT8 = "amx_int8" in _cpu_flags()
_DOT_PRODUCT = [flag for flag in INT8_DOT_PRODUCT_FLAGS if flag in _cpu_flags()]
_THIS_CPU = f"{', '.join(_DOT_PRODUCT)} but no AMX" if _DOT_PRODUCT else "no INT8 dot-product instruction"
needs_amx_int8 = pytest.mark.skipif(
    not CPU_AMX_INT8,
    reason=f"the INT8 figures were measured on a CPU with AMX (amx_int8); this one has {_THIS_CPU}, where "
    "OpenVINO's INT8 results differ from them (docs/cpu-inference.md)",
)


def needs_int8_instructions(recorded: str | None) -> pytest.MarkDecorator:
    """Skip unless this CPU gives OpenVINO's INT8 kernels the instructions an accuracy was measured with
    (`contract.manifest.Accuracy.cpu_int8`; None, from before it was recorded, means amx_int8)."""
    wanted = recorded or "amx_int8"
    here = cpu_int8_instructions()
    return pytest.mark.skipif(
        here != wanted,
        reason=f"the INT8 figures were measured with {wanted}; this CPU gives OpenVINO {here}, where its "
        "INT8 results differ from them (docs/cpu-inference.md)",
    )
