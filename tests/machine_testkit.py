"""Markers for tests whose expectations hold only on some CPUs (each skip says which and why)."""

from __future__ import annotations

import pytest

from service.runtime.backends.machine import cpu_has_bf16, cpu_int8_instructions, openvino_cpu_capabilities

CPU_BF16 = cpu_has_bf16()

# bf16 inference needs bf16 units (AVX-512 BF16 or AMX); elsewhere OpenVINO can only run f32.
needs_bf16 = pytest.mark.skipif(
    not CPU_BF16,
    reason=f"this CPU has no bf16 units (OpenVINO capabilities {list(openvino_cpu_capabilities())})",
)


def needs_int8_instructions(recorded: str | None) -> pytest.MarkDecorator:
    """Skip unless this CPU gives OpenVINO's INT8 kernels the instructions an accuracy was measured with
    (`contract.manifest.Accuracy.cpu_int8`; None, from before it was recorded, means amx_int8).

    OpenVINO's INT8 results differ between them: lower with AVX2 alone (its vpmaddubsw sums saturate), and
    lower too on an AMD EPYC with AVX-512 VNNI than on a Xeon with AMX (docs/cpu-inference.md has the
    figures)."""
    wanted = recorded or "amx_int8"
    here = cpu_int8_instructions()
    return pytest.mark.skipif(
        here != wanted,
        reason=f"the INT8 figures were measured with {wanted}; this CPU gives OpenVINO {here}, where its "
        "INT8 results differ from them (docs/cpu-inference.md)",
    )


# The first shipped INT8 figures (and the tests' own INT8 expectations) were measured on a Xeon with AMX.
needs_amx_int8 = needs_int8_instructions("amx_int8")
