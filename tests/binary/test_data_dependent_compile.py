"""Binary tier: gathers, scatters and atomics compile for sm_80, sm_90a (PTX/cubin) and gfx942 (HSACO); a
gathered GEMM operand keeps 16-byte ``cp.async`` copies on NVIDIA (TMA needs affine boxes), and atomics
lower to global atomic instructions."""

from __future__ import annotations

import re

import pytest

import wavec as wc
from tests import dyn_kernels as dk

pytest.importorskip("iree.compiler")

MMA = {"sm_80": wc.MMAType.NV_F32_16x8x16_F16, "sm_90a": wc.MMAType.NV_F32_16x8x16_F16}


def _compile(kernel, subs: dict, target: str):
    backend = "rocm" if target.startswith("gfx") else "cuda"
    return wc.compile(kernel, subs, target=target, backend=backend, cache=False)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_gather_gemm_compiles(target: str) -> None:
    amd = target.startswith("gfx")
    mma = wc.MMAType.F32_16x16x16_F16 if amd else MMA[target]
    k = _compile(dk.make_gather_gemm(dk.gemm_constraints(mma, 64 if amd else 32)), dk.GEMM_SUBS, target)
    assert k.artifact.binary
    assert "memref.atomic_rmw addf" in k.mlir
    if not amd:  # the gathered rows: 16-byte cp.async with the row index from a register
        assert re.search(r"nvgpu.device_async_copy %\d+\[%\d+, %\d+\], .*, 8, %\d+ bypassL1", k.mlir)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("kind, dtype", [("add", wc.f32), ("max", wc.i32), ("min", wc.f32)])
def test_atomics_compile(kind: str, dtype, target: str) -> None:
    k = _compile(dk.make_atomic(kind, dtype, 64 if target.startswith("gfx") else 32), {}, target)
    assert k.artifact.binary
    assert (
        f"memref.atomic_rmw {dict(add='addf' if dtype.is_float else 'addi', max='maxs', min='minimumf')[kind]}"
        in k.mlir
    )


@pytest.mark.parametrize("target", ["sm_80", "gfx942"])
def test_scatter_and_paged_compile(target: str) -> None:
    tpw = 64 if target.startswith("gfx") else 32
    assert _compile(dk.make_scatter(wc.i64, tpw), {}, target).artifact.binary
    if tpw == 32:
        assert _compile(dk.make_paged_read(), {}, target).artifact.binary
        assert _compile(dk.make_relative_bias(), {}, target).artifact.binary
