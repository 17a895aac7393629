"""Markers for tests of what exists only on some CPUs (each skip says which and why).

Accuracy never skips by CPU: an artifact must give its recorded answers on every class it can land on
(`tests/service/test_shipped_accuracy.py` checks the class this machine is, or is capped to)."""

from __future__ import annotations

import pytest

from service.runtime.backends.machine import cpu_has_bf16, openvino_cpu_capabilities

CPU_BF16 = cpu_has_bf16()

# bf16 inference needs bf16 units (AVX-512 BF16 or AMX); elsewhere OpenVINO can only run f32.
needs_bf16 = pytest.mark.skipif(
    not CPU_BF16,
    reason=f"this CPU has no bf16 units (OpenVINO capabilities {list(openvino_cpu_capabilities())})",
)
