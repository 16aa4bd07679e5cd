"""Emulator tier, issue #20 item 1: every size works.  Sizes the 16-byte vector width does not divide (a
GEMM of 33x47x29, 1x5x16, 7x9x13; copies and transposes of odd f32 rows; ``matmul``) run correctly,
bound at compile time (runs capped at the size's largest power-of-two divisor) or dynamic (the launch
runs a narrow variant, compiled once per set of caps), while aligned sizes keep the wide kernel.  The
emulator rejects a vector access off its alignment, so a wide access of a misaligned row cannot pass.
Inputs are fresh random numbers (seed in every message), outputs poisoned with NaN and written in full,
references from torch in float64."""

from __future__ import annotations

import pytest
import torch
from test_kernels_emulated import GEMM_TOL, TORCH_DTYPE, _subs, check, generator, poisoned, randn

import wavec as wc
from wavec import Memory, f32
from wavec.errors import EmulatorError
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm
from wavec.kernels.fastpath import Decisions
from wavec.runtime import binding

ODD_GEMM = [(33, 47, 29), (1, 5, 16), (7, 9, 13)]
NV_MMA = {wc.f16: wc.MMAType.NV_F32_16x8x16_F16, wc.bf16: wc.MMAType.NV_F32_16x8x16_BF16}
AMD_MMA = {wc.f16: wc.MMAType.F32_16x16x16_F16}  # (no bf16 MFMA type yet)
M, N = wc.sym.M, wc.sym.N


def _gemm(dtype, target: str, stages: int, subs: dict | None = None):
    amd = target == "gfx942"
    mma = (AMD_MMA if amd else NV_MMA)[dtype]
    kernel = gm.make_gemm(dtype, 64 if amd else 32, mma, (2, 2))
    return wc.compile(kernel, {**_subs(64, 64, 32, stages, 1), **(subs or {})}, backend="emulator", target=target)


def _run_gemm(kernel, dtype, m: int, n: int, k: int, what: str) -> None:
    g, seed = generator()
    tdt = TORCH_DTYPE[dtype]
    a, b = randn(g, m, k, dtype=tdt), randn(g, n, k, dtype=tdt)
    c = poisoned(m, n)
    kernel(a, b, c)
    check(c, a.double() @ b.double().T, GEMM_TOL, f"{what} {dtype.name} M={m} N={n} K={k} (seed {seed})")


DYN_PARAMS = [
    pytest.param(dtype, stages, target, id=f"{dtype.name}-stages{stages}-{target}")
    for target in ("sm_80", "sm_90", "gfx942")
    for dtype in (wc.f16, wc.bf16)
    for stages in (1, 2)
    if dtype in (AMD_MMA if target == "gfx942" else NV_MMA)
]


@pytest.mark.parametrize("dtype,stages,target", DYN_PARAMS)
def test_gemm_odd_dynamic_sizes(dtype, stages: int, target: str) -> None:
    """One compiled kernel: aligned sizes run it, odd ones the narrow variant of their caps."""
    kernel = _gemm(dtype, target, stages)
    div = dict(kernel.metadata.divisibility)
    assert div["K"] == 8 and div.get("N", 1) == (1 if target == "gfx942" else 2)  # mfma's C: one column a lane
    _run_gemm(kernel, dtype, 64, 64, 64, f"gemm {target} stages{stages} aligned")
    assert not kernel._variants, "an aligned launch compiled a variant"
    for m, n, k in ODD_GEMM:
        _run_gemm(kernel, dtype, m, n, k, f"gemm {target} stages{stages}")
    want = {frozenset({("K", 1), ("N", 1)} if "N" in div else {("K", 1)})} | (
        {frozenset({("N", 1)})} if "N" in div else set()
    )
    assert {frozenset(c) for c in kernel._variants} == want
    for caps, variant in kernel._variants.items():
        assert all(dict(variant.metadata.divisibility).get(s, 1) <= cap for s, cap in caps)
    _run_gemm(kernel, dtype, 9, 20, 30, f"gemm {target} stages{stages} K even")  # K=30: pairs, cp.async of 4 bytes
    assert (("K", 2),) in kernel._variants


@pytest.mark.parametrize("stages", [1, 2], ids=lambda s: f"stages{s}")
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_gemm_odd_static_sizes(dtype, stages: int) -> None:
    """Sizes bound at compile time: runs capped at compile time, nothing left for the launcher to check."""
    for m, n, k in ODD_GEMM:
        kernel = _gemm(dtype, "sm_80", stages, {gm.M: m, gm.N: n, gm.K: k})
        assert kernel.metadata.divisibility == ()
        _run_gemm(kernel, dtype, m, n, k, f"gemm static stages{stages}")


def test_emulator_rejects_a_misaligned_wide_access(monkeypatch) -> None:
    """Without the variant (the launcher's check skipped), the wide kernel reads rows of K=29 with 16-byte
    vectors at odd addresses: the emulator must say so (the GPU would fault or read garbage)."""
    monkeypatch.setattr(binding.BindingPlan, "_alignment_miss", lambda *args: None)
    kernel = _gemm(wc.f16, "sm_80", 2)
    with pytest.raises(EmulatorError, match="not a multiple of the access's alignment 16"):
        _run_gemm(kernel, wc.f16, 33, 48, 29, "wide gemm on misaligned rows")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_matmul_odd_shapes(dtype) -> None:
    g, seed = generator()
    for m, n, k in [*ODD_GEMM, (3, 50, 95)]:
        a, b = randn(g, m, k, dtype=dtype), randn(g, n, k, dtype=dtype)
        c = gm.matmul(a, b, backend="emulator", out_dtype=torch.float32)
        check(c, a.double() @ b.double().T, GEMM_TOL, f"matmul {dtype} M={m} N={n} K={k} (seed {seed})")
        c16 = gm.matmul(a, b, backend="emulator", out_dtype=dtype)
        check(c16, a.double() @ b.double().T, 1e-2, f"matmul -> {dtype} M={m} N={n} K={k} (seed {seed})")


@pytest.mark.parametrize("dtype", [wc.f16, wc.f32], ids=lambda d: d.name)
def test_copy_odd_rows(dtype) -> None:
    kernel = wc.compile(ew.make_copy(dtype), ew.DEFAULT_SUBS, backend="emulator", target="sm_80")
    g, seed = generator()
    for m, n in [(33, 47), (5, 1), (3, 1001), (2, 514)]:
        src = randn(g, m, n, dtype=TORCH_DTYPE[dtype])
        dst = poisoned(m, n, dtype=TORCH_DTYPE[dtype])
        kernel(src, dst)
        assert torch.equal(src, dst), f"copy {dtype.name} [{m}, {n}] (seed {seed}): output differs"


def _transpose(vec: int) -> wc.WaveKernel:
    """y = x.T in f32; each lane reads ``vec`` contiguous elements of a row of x."""
    cons = [
        wc.WorkgroupConstraint(M, 4, 0),
        wc.WorkgroupConstraint(N, 32 * vec, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 32 * vec}),
    ]

    @wc.wave(cons)
    def transpose(x: Memory[M, N, f32], y: Memory[N, M, f32]):
        wc.write(wc.permute(wc.read(x), (N, M)), y)

    return transpose


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_transpose_f32_odd_shapes(static: bool) -> None:
    g, seed = generator()
    dyn = wc.compile(_transpose(4), {}, backend="emulator", target="sm_80")
    assert dict(dyn.metadata.divisibility) == {"N": 4}
    for m, n in [(33, 47), (1, 5), (7, 130), (8, 128)]:
        kernel = wc.compile(_transpose(4), {M: m, N: n}, backend="emulator", target="sm_80") if static else dyn
        x = randn(g, m, n)
        y = poisoned(n, m)
        kernel(x, y)
        assert torch.equal(y, x.T), f"transpose [{m}, {n}] (seed {seed}): output differs"


def test_matmul_pads_odd_k_of_large_products(monkeypatch) -> None:
    """Where M and N reach ``PAD_K_MIN_MN``, an odd K is zero-padded: the wide kernel runs, no variant."""
    monkeypatch.setattr(gm, "PAD_K_MIN_MN", 32)
    assert gm.pads_k(40, 48, 29) and not gm.pads_k(40, 16, 29) and not gm.pads_k(40, 48, 32)
    monkeypatch.setattr(gm, "_COMPILED", {})  # fresh kernels: their variants are this test's
    monkeypatch.setattr(gm, "_DISPATCH", Decisions("matmul"))
    g, seed = generator()
    a, b = randn(g, 40, 29, dtype=torch.float16), randn(g, 48, 29, dtype=torch.float16)
    c = gm.matmul(a, b, backend="emulator", out_dtype=torch.float32)
    check(c, a.double() @ b.double().T, GEMM_TOL, f"padded matmul 40x48x29 (seed {seed})")
    (kernel,) = gm._COMPILED.values()
    assert not kernel._variants, list(kernel._variants)


def test_matmul_wgmma_odd_k() -> None:
    """wgmma's plan takes neither the TMA producer nor the persistent grid for an odd K (TMA rows are
    16-byte multiples): the narrow variant compiles with cp.async or synchronous copies."""
    g, seed = generator()
    for m, n, k in [(33, 47, 29), (130, 136, 29), (200, 136, 4094)]:
        a, b = randn(g, m, k, dtype=torch.float16), randn(g, n, k, dtype=torch.float16)
        c = gm.matmul(a, b, backend="emulator", mma="wgmma", out_dtype=torch.float32)
        check(c, a.double() @ b.double().T, GEMM_TOL, f"matmul wgmma M={m} N={n} K={k} (seed {seed})")
