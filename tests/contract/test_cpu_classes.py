"""The x86 CPU classes: a machine's own class from its flags, the classes a cap reaches, cap validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.cpu_classes import (
    CLASS_NAMES,
    ISA_ENV,
    ONEDNN_ISAS,
    UnknownIsaError,
    check_isa_cap,
    class_cap,
    cpu_flags,
    effective_class,
    native_class,
    reachable_classes,
)

# Fabricated /proc/cpuinfo flag sets of one CPU per class (plus the usual others).
BASE = frozenset({"fpu", "sse4_1", "sse4_2", "avx", "popcnt"})
ZEN3 = BASE | {"avx2", "fma"}
SKYLAKE_SP = ZEN3 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}  # AVX-512 without VNNI
CASCADE_LAKE = SKYLAKE_SP | {"avx512_vnni"}
ZEN4 = CASCADE_LAKE | {"avx512_bf16"}
SAPPHIRE_RAPIDS = ZEN4 | {"avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"}


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        (None, None),
        (BASE, None),
        (ZEN3, "avx2"),
        (SKYLAKE_SP, "avx512_core"),
        (CASCADE_LAKE, "avx512_vnni"),
        (ZEN4, "avx512_bf16"),
        (SAPPHIRE_RAPIDS, "amx"),
    ],
)
def test_native_class_is_the_highest_whose_flags_the_cpu_has(
    flags: frozenset[str] | None, native: str
) -> None:
    assert native_class(flags) == native


def test_reachable_classes_are_every_class_up_to_the_native_one() -> None:
    assert reachable_classes(SAPPHIRE_RAPIDS) == list(CLASS_NAMES)
    assert reachable_classes(CASCADE_LAKE) == ["avx2", "avx512_core", "avx512_vnni"]
    assert reachable_classes(ZEN3) == ["avx2"]
    assert reachable_classes(BASE) == [] and reachable_classes(None) == []


@pytest.mark.parametrize(
    ("flags", "cap", "expected"),
    [
        (SAPPHIRE_RAPIDS, "AVX2", "avx2"),
        (SAPPHIRE_RAPIDS, "AVX512_CORE", "avx512_core"),  # AVX-512 without VNNI
        (SAPPHIRE_RAPIDS, "AVX512_CORE_VNNI", "avx512_vnni"),
        (SAPPHIRE_RAPIDS, "AVX512_CORE_BF16", "avx512_bf16"),
        (SAPPHIRE_RAPIDS, "AVX10_1_512", "avx512_bf16"),
        (SAPPHIRE_RAPIDS, "AVX512_CORE_AMX", "amx"),
        (SAPPHIRE_RAPIDS, "AVX10_1_512_AMX", "amx"),  # an alias of AVX512_CORE_AMX
        (SAPPHIRE_RAPIDS, "AVX10_2_512", "avx512_bf16"),  # above AVX10_1_512, but without AMX
        (SAPPHIRE_RAPIDS, "AVX2_VNNI_2", "avx2"),  # AVX2 with VNNI is no AVX-512
        (SAPPHIRE_RAPIDS, "SSE41", None),
        (SAPPHIRE_RAPIDS, "DEFAULT", "amx"),
        (SAPPHIRE_RAPIDS, "ALL", "amx"),
        (SAPPHIRE_RAPIDS, "avx512_core_vnni", "avx512_vnni"),  # case does not matter
        (ZEN3, "AVX512_CORE_AMX", "avx2"),  # a cap above the CPU leaves its own class
        (CASCADE_LAKE, "AVX512_CORE_BF16", "avx512_vnni"),
        (None, "AVX2", None),
    ],
)
def test_effective_class_under_a_cap(flags: frozenset[str] | None, cap: str, expected: str | None) -> None:
    assert effective_class(flags, cap) == expected


def test_effective_class_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ISA_ENV, raising=False)
    assert effective_class(ZEN4) == "avx512_bf16"
    monkeypatch.setenv(ISA_ENV, "AVX512_CORE_VNNI")
    assert effective_class(ZEN4) == "avx512_vnni"
    monkeypatch.setenv(ISA_ENV, "AVX3")
    with pytest.raises(UnknownIsaError, match="AVX3"):
        effective_class(ZEN4)


def test_an_unknown_cap_is_refused_with_the_known_values() -> None:
    assert check_isa_cap(" avx2 ") == "AVX2"
    with pytest.raises(UnknownIsaError) as refused:
        check_isa_cap("AVX512")
    message = str(refused.value)
    assert "ONEDNN_MAX_CPU_ISA='AVX512'" in message
    assert all(value in message for value in ONEDNN_ISAS)


def test_every_class_has_a_cap_that_reproduces_it() -> None:
    for name in CLASS_NAMES:
        assert effective_class(SAPPHIRE_RAPIDS, class_cap(name)) == name
    with pytest.raises(UnknownIsaError, match="avx512_vnni"):
        class_cap("avx512")


def test_cpu_flags_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nflags\t\t: fpu avx2 fma avx512f\nbugs\t\t: spectre_v1\n\n"
        "processor\t: 1\nflags\t\t: fpu avx2 fma avx512f\n"
    )
    flags = cpu_flags(str(cpuinfo))
    assert flags is not None and {"avx2", "fma", "avx512f"} <= flags and "spectre_v1" not in flags
    assert cpu_flags(str(tmp_path / "absent")) is None
