"""Markers for tests whose expectations hold only on some CPUs (each skip says which and why)."""

from __future__ import annotations

import pytest

from service.runtime.backends.machine import (
    INT8_DOT_PRODUCT_FLAGS,
    cpu_has_bf16,
    cpu_has_int8_dot_product,
    openvino_cpu_capabilities,
)

CPU_BF16 = cpu_has_bf16()
CPU_INT8_DOT_PRODUCT = cpu_has_int8_dot_product() is not False

# bf16 inference needs bf16 units (AVX-512 BF16 or AMX); elsewhere OpenVINO can only run f32.
needs_bf16 = pytest.mark.skipif(
    not CPU_BF16,
    reason=f"this CPU has no bf16 units (OpenVINO capabilities {list(openvino_cpu_capabilities())})",
)
# The shipped INT8 accuracy was measured with an INT8 dot-product instruction; without one OpenVINO's
# AVX2 INT8 kernels saturate and score lower (docs/cpu-inference.md has the figures).
needs_int8_dot_product = pytest.mark.skipif(
    not CPU_INT8_DOT_PRODUCT,
    reason=f"this CPU has none of {', '.join(INT8_DOT_PRODUCT_FLAGS)}: INT8 accuracy differs from the "
    "figures measured with them",
)
