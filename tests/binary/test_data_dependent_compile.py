"""Binary tier: gathers, scatters and atomics compile for sm_80, sm_90a (PTX/cubin) and gfx942 (HSACO); a
gathered GEMM operand keeps 16-byte ``cp.async`` copies on NVIDIA (TMA needs affine boxes), and atomics
lower to relaxed GPU-scope ``red``/``atom`` (vector and packed forms where the target has them), never to
``atom.acq_rel.sys``; ``WAVEC_CHECK_BOUNDS`` kernels compile everywhere."""

from __future__ import annotations

import re

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from tests import dyn_kernels as dk
from wavec.codegen.ptxas import find_ptxas

pytest.importorskip("iree.compiler")

MMA = {"sm_80": wc.MMAType.NV_F32_16x8x16_F16, "sm_90a": wc.MMAType.NV_F32_16x8x16_F16}


def _compile(kernel, subs: dict, target: str):
    backend = "rocm" if target.startswith("gfx") else "cuda"
    return wc.compile(kernel, subs, target=target, backend=backend, cache=False)


HAS_PTXAS = find_ptxas() is not None


def _ptx(kernel, subs: dict, target: str, monkeypatch) -> str:
    """The PTX IREE emits (ptxas bypassed for this compile; the cubin compiles are the tests below)."""
    with monkeypatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        return _compile(kernel, subs, target).artifact.binary.decode()


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_gather_gemm_compiles(target: str, monkeypatch) -> None:
    amd = target.startswith("gfx")
    mma = wc.MMAType.F32_16x16x16_F16 if amd else MMA[target]
    kernel = dk.make_gather_gemm(dk.gemm_constraints(mma, 64 if amd else 32))
    k = _compile(kernel, dk.GEMM_SUBS, target)
    assert k.artifact.binary
    if amd:
        assert "memref.atomic_rmw addf" in k.mlir
        return
    # the gathered rows: 16-byte cp.async with the row index from a register
    assert re.search(r"nvgpu.device_async_copy %\d+\[%\d+, %\d+\], .*, 8, %\d+ bypassL1", k.mlir)
    ptx = _ptx(kernel, dk.GEMM_SUBS, target, monkeypatch)
    # the weighted scatter of C: each thread's pairs of accumulator columns, one 8-byte red on Hopper
    want = "red.relaxed.gpu.global.add.v2.f32" if target == "sm_90a" else "red.relaxed.gpu.global.add.f32"
    assert want in ptx and "atom." not in ptx and "memref.atomic_rmw" not in k.mlir


# (kind, dtype, target) -> the reduction in the PTX; None: memref.atomic_rmw (a compare-and-swap loop)
RED = {
    ("add", "f32", "sm_80"): "red.relaxed.gpu.global.add.f32 ",
    ("add", "f32", "sm_90a"): "red.relaxed.gpu.global.add.v4.f32 ",
    ("add", "i32", "sm_80"): "red.relaxed.gpu.global.add.u32 ",
    ("max", "i32", "sm_90a"): "red.relaxed.gpu.global.max.s32 ",
    ("min", "f32", "sm_80"): None,
    ("add", "f16", "sm_80"): "red.relaxed.gpu.global.add.noftz.f16x2 ",
    ("add", "f16", "sm_90a"): "red.relaxed.gpu.global.add.noftz.v2.f16x2 ",
    ("add", "bf16", "sm_80"): None,  # no bf16x2 reduction before sm_90
    ("add", "bf16", "sm_90a"): "red.relaxed.gpu.global.add.noftz.v2.bf16x2 ",
    ("min", "f16", "sm_80"): None,  # halves: a compare-and-swap loop on the 32-bit word
    ("max", "bf16", "sm_90a"): None,
}


@pytest.mark.parametrize("kind, dtype, target", list(RED), ids=["-".join(k) for k in RED])
def test_atomics_reach_ptx_as_relaxed_reductions(kind: str, dtype: str, target: str, monkeypatch) -> None:
    kernel = dk.make_atomic(kind, getattr(wc, dtype))
    ptx = _ptx(kernel, {}, target, monkeypatch)
    want = RED[(kind, dtype, target)]
    if want is None:  # LLVM's compare-and-swap loop (system scope: memref.atomic_rmw's)
        assert "red." not in ptx and "atom.relaxed.sys.global.cas" in ptx
    else:
        assert want in ptx and "atom." not in ptx and ".sys" not in ptx, [ln for ln in ptx.splitlines() if "red." in ln]
    if HAS_PTXAS:
        assert _compile(kernel, {}, target).artifact.format == "cubin"  # ptxas accepts the inline PTX


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_used_atomic_result_is_a_relaxed_atom(target: str, monkeypatch) -> None:
    ptx = _ptx(dk.make_atomic_old("add", wc.i32), {}, target, monkeypatch)
    assert "atom.relaxed.gpu.global.add.u32" in ptx and "red." not in ptx


@pytest.mark.parametrize(
    "kind, dtype",
    [("add", wc.f32), ("max", wc.i32), ("min", wc.f32), ("add", wc.f16), ("add", wc.bf16), ("min", wc.f16)]
    + [("max", wc.bf16)],
)
def test_atomics_compile_for_gfx942(kind: str, dtype) -> None:
    k = _compile(dk.make_atomic(kind, dtype, 64), {}, "gfx942")
    assert k.artifact.binary and k.artifact.format == "hsaco"
    op = {"add": "addf" if dtype.is_float else "addi", "max": "maximumf" if dtype.is_float else "maxs"}.get(
        kind, "minimumf"
    )
    assert f"memref.atomic_rmw {op}" in k.mlir and "llvm.inline_asm" not in k.mlir
    assert _compile(dk.make_atomic_old(kind, dtype, 64), {}, "gfx942").artifact.binary


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_bounds_checked_kernels_compile(target: str, monkeypatch) -> None:
    monkeypatch.setenv("WAVEC_CHECK_BOUNDS", "1")
    amd = target.startswith("gfx")
    mma = wc.MMAType.F32_16x16x16_F16 if amd else MMA[target]
    k = _compile(dk.make_gather_gemm(dk.gemm_constraints(mma, 64 if amd else 32)), dk.GEMM_SUBS, target)
    checks = k.artifact.metadata.bounds_checks
    assert {c[2:] for c in checks} == {("read", "x", "T"), ("atomic", "c", "T")}, checks
    assert re.search(r"hal.interface.binding.subspan layout\(#\w+\) binding\(5\) .*: memref<8xi64>", k.mlir)
    plain = _compile(dk.make_paged_read() if not amd else dk.make_scatter(wc.i64, 64), {}, target)
    assert plain.artifact.metadata.bounds_checks and "memref.atomic_rmw assign" in plain.mlir  # the record's flag


@pytest.mark.parametrize("target", ["sm_80", "gfx942"])
def test_scatter_and_paged_compile(target: str) -> None:
    tpw = 64 if target.startswith("gfx") else 32
    assert _compile(dk.make_scatter(wc.i64, tpw), {}, target).artifact.binary
    if tpw == 32:
        assert _compile(dk.make_paged_read(), {}, target).artifact.binary
        assert _compile(dk.make_relative_bias(), {}, target).artifact.binary
