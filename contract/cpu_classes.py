"""The x86 CPU classes an artifact can land on, and which of them this machine can reach.

OpenVINO's CPU plugin builds a different graph per instruction set (INT8 kernels, bf16 units), so an
INT8 artifact is measured under each class, not only the machine's own. oneDNN's ``ONEDNN_MAX_CPU_ISA``
(read once, when the library loads: set it before ``openvino`` is imported) caps the instruction set, so
one machine reproduces every class at or below its own.

==============  ======================  ===================================================
class           ``ONEDNN_MAX_CPU_ISA``  what it is
==============  ======================  ===================================================
avx2            AVX2                    AVX2 alone (AMD Zen 2/3, Intel before Skylake-SP)
avx512_core     AVX512_CORE             AVX-512 without VNNI (Skylake-SP)
avx512_vnni     AVX512_CORE_VNNI        AVX-512 with VNNI, no bf16 (Cascade Lake, Ice Lake)
avx512_bf16     AVX512_CORE_BF16        AVX-512 VNNI and BF16 (AMD Zen 4/5, Cooper Lake)
amx             AVX512_CORE_AMX         AMX tiles, INT8 and bf16 (Sapphire Rapids and later)
==============  ======================  ===================================================
"""

from __future__ import annotations

import os
from pathlib import Path

ISA_ENV = "ONEDNN_MAX_CPU_ISA"

# The gate's classes, lowest first: (class, the cap that reproduces it, the CPU flags it needs).
CLASSES: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("avx2", "AVX2", frozenset({"avx2", "fma"})),
    ("avx512_core", "AVX512_CORE", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})),
    ("avx512_vnni", "AVX512_CORE_VNNI", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_vnni"})),
    ("avx512_bf16", "AVX512_CORE_BF16", frozenset({"avx512f", "avx512_vnni", "avx512_bf16"})),
    ("amx", "AVX512_CORE_AMX", frozenset({"amx_int8", "amx_bf16", "amx_tile"})),
)
CLASS_NAMES = tuple(name for name, _, _ in CLASSES)

# Every value oneDNN accepts for ONEDNN_MAX_CPU_ISA on x86 (its cpu_isa_traits, upper-cased), with the highest
# class each one allows (None: below AVX2). The ISAs are only partially ordered (AVX2_VNNI is no AVX-512,
# AVX10_2_512 has no AMX) and some names are aliases (AVX512_CORE_AMX = AVX10_1_512_AMX), so this is a
# table rather than a ranking. DEFAULT (and the older ALL): no cap.
_CAP_CLASS: dict[str, str | None] = {
    "SSE41": None,
    "AVX": None,
    "AVX2": "avx2",
    "AVX2_VNNI": "avx2",
    "AVX2_VNNI_2": "avx2",
    "AVX512_CORE": "avx512_core",
    "AVX512_CORE_VNNI": "avx512_vnni",
    "AVX512_CORE_BF16": "avx512_bf16",
    "AVX10_1_512": "avx512_bf16",
    "AVX512_CORE_FP16": "avx512_bf16",
    "AVX10_1_512_AMX": "amx",
    "AVX512_CORE_AMX": "amx",
    "AVX10_1_512_AMX_FP16": "amx",
    "AVX512_CORE_AMX_FP16": "amx",
    "AVX10_2_512": "avx512_bf16",
    "AVX10_2_512_AMX_2": "amx",
}
NO_CAP = ("DEFAULT", "ALL")
ONEDNN_ISAS = (*_CAP_CLASS, *NO_CAP)


class UnknownIsaError(ValueError):
    """A cap or class name that is not one of the known ones (the message lists them)."""


def check_isa_cap(value: str) -> str:
    """``value`` upper-cased if oneDNN knows it as an ``ONEDNN_MAX_CPU_ISA`` value (oneDNN itself ignores an
    unknown one silently, which would measure the native class under another's name)."""
    cap = value.strip().upper()
    if cap not in ONEDNN_ISAS:
        raise UnknownIsaError(
            f"{ISA_ENV}={value!r} is not an ISA oneDNN knows; use one of {list(ONEDNN_ISAS)}"
        )
    return cap


def class_cap(name: str) -> str:
    """The ``ONEDNN_MAX_CPU_ISA`` value that reproduces class ``name``."""
    for known, cap, _ in CLASSES:
        if known == name:
            return cap
    raise UnknownIsaError(f"unknown CPU class {name!r}; the classes are {list(CLASS_NAMES)}")


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The CPU's flags from Linux's ``/proc/cpuinfo``; None when it cannot be read."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    return frozenset(flag for line in text.splitlines() if line.startswith("flags") for flag in line.split())


def native_class(flags: frozenset[str] | None) -> str | None:
    """The highest class whose flags the CPU has; None for a CPU below AVX2 or flags unknown."""
    if flags is None:
        return None
    found = [name for name, _, needs in CLASSES if needs <= flags]
    return found[-1] if found else None


def reachable_classes(flags: frozenset[str] | None) -> list[str]:
    """Every class at or below the machine's own, lowest first: the ones a cap can reproduce here."""
    native = native_class(flags)
    return [] if native is None else list(CLASS_NAMES[: CLASS_NAMES.index(native) + 1])


def effective_class(flags: frozenset[str] | None, cap: str | None = None) -> str | None:
    """The class OpenVINO runs as in this process: the native class, lowered by ``cap`` (default: the
    ``ONEDNN_MAX_CPU_ISA`` environment variable, validated) to the highest class at or below it."""
    native = native_class(flags)
    cap = os.environ.get(ISA_ENV) if cap is None else cap
    if native is None or not cap:
        return native
    cap = check_isa_cap(cap)
    if cap in NO_CAP:
        return native
    limit = _CAP_CLASS[cap]
    if limit is None:
        return None
    return CLASS_NAMES[min(CLASS_NAMES.index(native), CLASS_NAMES.index(limit))]
