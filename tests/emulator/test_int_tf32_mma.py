"""Emulator tier, issue #20 item 6: i8 x i8 -> i32 and tf32 matrix products.

int8 GEMMs (mma.sync m16n8k32 on sm_80 / sm_90, MFMA 16x16x32 i8 on gfx942) are compared exactly with
``a.long() @ b.long().T`` for random inputs in [-127, 127], aligned and odd sizes (the launch's narrow
variant), C prefilled with a sentinel so an unwritten element fails.  tf32 GEMMs are compared with an
f64 reference (about 1e-3 relative) and with the f64 product of the inputs rounded to tf32 the way
``cvt.rna.tf32.f32`` rounds (f32 accumulation only: about 1e-6), which truncated operands would miss by
two orders of magnitude.  Seeds are in every message."""

from __future__ import annotations

import pytest
import torch
from test_kernels_emulated import check, generator, poisoned, randn

import wavec as wc
from wavec import Memory, Register
from wavec.errors import WavecError
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_WAVES, schedule

SENTINEL = -(2**31) + 12345
ODD = [(33, 47, 29), (1, 5, 16), (7, 9, 13), (70, 24, 100)]
I8_TARGETS = [("sm_80", wc.MMAType.NV_I32_16x8x32_I8), ("gfx942", wc.MMAType.I32_16x16x32_I8)]


def _subs(block_k: int, stages: int) -> dict:
    return {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: block_k, gm.NUM_STAGES: stages, gm.GROUP_M: 1}


def randint8(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(-127, 128, shape, generator=g, dtype=torch.int8)


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """f32 -> tf32 as ``cvt.rna.tf32.f32`` (nearest, ties away from zero), for finite x."""
    bits = x.contiguous().view(torch.int32).long() & 0xFFFFFFFF
    bits = (bits + 0x1000) & 0xFFFFE000
    return torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)


def truncate_tf32(x: torch.Tensor) -> torch.Tensor:
    return (x.contiguous().view(torch.int32) & -0x2000).view(torch.float32)


def run_i8(kernel, m: int, n: int, k: int, what: str) -> None:
    g, seed = generator()
    a, b = randint8(g, m, k), randint8(g, n, k)
    c = torch.full((m, n), SENTINEL, dtype=torch.int32)
    kernel(a, b, c)
    ref = a.long() @ b.long().T
    bad = (c.long() != ref).nonzero()
    assert not len(bad), f"{what} M={m} N={n} K={k} (seed {seed}): {len(bad)} wrong, first at {bad[0].tolist()}"


@pytest.mark.parametrize("stages", [1, 2], ids=lambda s: f"stages{s}")
@pytest.mark.parametrize("target,mma", I8_TARGETS, ids=[t for t, _ in I8_TARGETS])
def test_int8_gemm_exact(target: str, mma, stages: int) -> None:
    threads = 64 if target == "gfx942" else 32
    kernel = wc.compile(gm.make_gemm(wc.i8, threads, mma, (2, 2)), _subs(64, stages), backend="emulator", target=target)
    assert dict(kernel.metadata.divisibility)["K"] == 16  # 16-byte runs of i8
    run_i8(kernel, 64, 128, 192, f"int8 gemm {target} stages{stages}")
    assert not kernel._variants, "an aligned launch compiled a narrow variant"
    for m, n, k in ODD:
        run_i8(kernel, m, n, k, f"int8 gemm {target} stages{stages}")


def test_int8_gemm_extremes() -> None:
    """-128 and 127 everywhere (the largest products): still exact in i32."""
    kernel = wc.compile(gm.make_gemm(wc.i8, 32, wc.MMAType.NV_I32_16x8x32_I8), _subs(64, 2), backend="emulator")
    a = torch.full((16, 256), -128, dtype=torch.int8)
    b = torch.tensor([127, -128], dtype=torch.int8).repeat(8, 128)
    c = torch.full((16, 8), SENTINEL, dtype=torch.int32)
    kernel(a, b, c)
    assert torch.equal(c.long(), a.long() @ b.long().T)


def test_mma_sync_int8_saturates() -> None:
    """``mma.sync ... .satfinite.s32.s8.s8.s32`` (what nvgpu lowers every 8-bit mma.sync to) clamps a sum past
    the i32 range instead of wrapping: an accumulator 100 below the maximum plus 32 * 127 * 127 stays at
    2**31 - 1, and one 100 above the minimum minus as much stays at -2**31."""
    M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
    cons = [
        wc.WorkgroupConstraint(M, 16, 0),
        wc.WorkgroupConstraint(N, 8, 1),
        wc.WorkgroupConstraint(K, 32, None),
        wc.WaveConstraint(M, 16),
        wc.WaveConstraint(N, 8),
        wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_I32_16x8x32_I8),
        wc.SchedulingConstraint(promote_operands=False),
    ]

    def make(init: int):
        @wc.wave(cons)
        def sat(a: Memory[M, K, wc.i8], b: Memory[N, K, wc.i8], c: Memory[M, N, wc.i32]):
            wc.write(wc.mma(wc.read(a), wc.read(b), Register[M, N, wc.i32](init)), c)

        return wc.compile(sat, {M: 16, N: 8, K: 32}, backend="emulator", target="sm_80")

    for init, sign in ((2**31 - 101, 1), (-(2**31) + 100, -1)):
        a = torch.full((16, 32), 127, dtype=torch.int8)
        b = torch.full((8, 32), 127 * sign, dtype=torch.int8)
        c = torch.zeros(16, 8, dtype=torch.int32)
        make(init)(a, b, c)
        assert torch.equal(c, torch.full_like(c, 2**31 - 1 if sign > 0 else -(2**31))), c


def run_tf32(kernel, m: int, n: int, k: int, what: str) -> None:
    g, seed = generator()
    a, b = randn(g, m, k), randn(g, n, k)
    c = poisoned(m, n)
    kernel(a, b, c)
    what = f"{what} M={m} N={n} K={k} (seed {seed})"
    check(c, a.double() @ b.double().T, 2e-3, what)  # tf32: 10 mantissa bits, unit roundoff 2**-11
    rounded = round_tf32(a).double() @ round_tf32(b).double().T
    truncated = truncate_tf32(a).double() @ truncate_tf32(b).double().T
    err_rna, err_trunc = ((c.double() - r).norm() / r.norm() for r in (rounded, truncated))
    assert err_rna < 2e-6, f"{what}: {err_rna:.2e} from the product of tf32-rounded inputs"
    assert err_trunc > 20 * err_rna, f"{what}: as close to truncated inputs ({err_trunc:.2e}) as to rounded ones"


@pytest.mark.parametrize("stages", [1, 2], ids=lambda s: f"stages{s}")
def test_tf32_gemm(stages: int) -> None:
    kernel = wc.compile(
        gm.make_gemm(wc.f32, 32, wc.MMAType.NV_F32_16x8x8_TF32, (2, 2)), _subs(16, stages), backend="emulator"
    )
    assert dict(kernel.metadata.divisibility)["K"] == 4
    run_tf32(kernel, 64, 128, 96, f"tf32 gemm stages{stages}")
    for m, n, k in ODD:
        run_tf32(kernel, m, n, k, f"tf32 gemm stages{stages}")


WGMMA = {
    "i8": (wc.i8, wc.MMAType.NV_WGMMA_I32_64xNx32_I8, 128),
    "tf32": (wc.f32, wc.MMAType.NV_WGMMA_F32_64xNx8_TF32, 32),
}


def _wgmma_subs(block_k: int) -> dict:
    return {gm.BLOCK_M: 128, gm.BLOCK_N: 64, gm.BLOCK_K: block_k, gm.NUM_STAGES: 2, gm.GROUP_M: 1}


@pytest.mark.parametrize("copies", ["auto", "cp.async"], ids=["tma", "cp.async"])
@pytest.mark.parametrize("kind", list(WGMMA))
def test_wgmma_gemm(kind: str, copies: str) -> None:
    """sm_90a: ``wgmma.mma_async`` .s32.s8.s8 (exact, wrapping) and .f32.tf32.tf32 from descriptors of
    K-major tiles (TMA or cp.async copies).  The tensor core reads a tf32 operand in shared memory by its
    leading 19 bits: the result is the product of the truncated inputs (f32 accumulation)."""
    dtype, mma, block_k = WGMMA[kind]
    kernel = gm.make_gemm(dtype, 32, mma, WGMMA_WAVES, sched=schedule(async_copy=copies))
    subs = _wgmma_subs(block_k // (2 if copies == "cp.async" else 1))  # cp.async: 64-byte rows of K too
    kernel = wc.compile(kernel, subs, backend="emulator", target="sm_90a")
    for m, n, k in [(128, 64, 256), (33, 47, 29), (130, 70, 300)]:
        if kind == "i8":
            run_i8(kernel, m, n, k, f"wgmma int8 {copies}")
            continue
        g, seed = generator()
        a, b = randn(g, m, k), randn(g, n, k)
        c = poisoned(m, n)
        kernel(a, b, c)
        what = f"wgmma tf32 {copies} M={m} N={n} K={k} (seed {seed})"
        check(c, a.double() @ b.double().T, 3e-3, what)
        check(c, truncate_tf32(a).double() @ truncate_tf32(b).double().T, 2e-6, what + " vs truncated inputs")


@pytest.mark.parametrize("kind", list(WGMMA))
def test_wgmma_register_a(kind: str) -> None:
    """A computed in registers (not a shared tile): wgmma's register-A form, inline PTX (s8: no immediates
    after scale-d; tf32: A rounded by cvt.rna, B truncated by the tensor core)."""
    dtype, mma, block_k = WGMMA[kind]
    M, N, K = gm.M, gm.N, gm.K
    acc_dt = wc.i32 if kind == "i8" else wc.f32

    @wc.wave(gm.gemm_constraints(32, mma, WGMMA_WAVES, schedule()))
    def gemm_rega(a: Memory[M, K, dtype], b: Memory[N, K, dtype], c: Memory[M, N, acc_dt]):
        @wc.iterate(K, init_args=[Register[M, N, acc_dt](0)])
        def body(acc: Register[M, N, acc_dt]) -> Register[M, N, acc_dt]:
            x = wc.read(a)
            return wc.mma(x - wc.read(a) + x, wc.read(b), acc)  # not a shared read: A in registers

        wc.write(body, c)

    kernel = wc.compile(gemm_rega, _wgmma_subs(block_k), backend="emulator", target="sm_90a")
    assert "llvm.inline_asm" in kernel.mlir and ("k32.s32.s8.s8" if kind == "i8" else "k8.f32.tf32.tf32") in kernel.mlir
    m, n, k = 130, 70, 300
    if kind == "i8":
        run_i8(kernel, m, n, k, "wgmma int8 register A")
        return
    g, seed = generator()
    a, b = randn(g, m, k), randn(g, n, k)
    c = poisoned(m, n)
    kernel(a, b, c)
    ref = round_tf32(a).double() @ truncate_tf32(b).double().T
    check(c, ref, 2e-6, f"wgmma tf32 register A {m}x{n}x{k} (seed {seed})")


def test_wgmma_tf32_rejects_mn_major() -> None:
    """tf32 / s8 wgmma has no transposed operands: a B stored [K, N] is a ConstraintError saying so."""
    M, N, K = gm.M, gm.N, gm.K
    mma = wc.MMAType.NV_WGMMA_F32_64xNx8_TF32

    @wc.wave(gm.gemm_constraints(32, mma, WGMMA_WAVES, schedule()))
    def gemm_kn(a: Memory[M, K, wc.f32], b: Memory[K, N, wc.f32], c: Memory[M, N, wc.f32]):
        @wc.iterate(K, init_args=[Register[M, N, wc.f32](0)])
        def body(acc: Register[M, N, wc.f32]) -> Register[M, N, wc.f32]:
            return wc.mma(wc.read(a), wc.permute(wc.read(b), (N, K)), acc)

        wc.write(body, c)

    with pytest.raises(WavecError, match="read both operands K-major"):
        wc.compile(gemm_kn, _wgmma_subs(32), backend="emulator", target="sm_90a")


def test_matmul_int8_and_tf32() -> None:
    g, seed = generator()
    for m, n, k in [(64, 64, 128), (33, 47, 29)]:
        a, b = randint8(g, m, k), randint8(g, n, k)
        c = gm.matmul(a, b, backend="emulator")
        assert c.dtype == torch.int32 and torch.equal(c.long(), a.long() @ b.long().T), f"seed {seed}"
        x, y = randn(g, m, k), randn(g, n, k)
        z = gm.matmul(x, y, backend="emulator", allow_tf32=True)
        assert z.dtype == torch.float32
        check(z, x.double() @ y.double().T, 2e-3, f"matmul tf32 {m}x{n}x{k} (seed {seed})")
        c = gm.matmul(a, b, backend="emulator", mma="wgmma")
        assert torch.equal(c.long(), a.long() @ b.long().T), f"wgmma, seed {seed}"
        z = gm.matmul(x, y, backend="emulator", allow_tf32=True, mma="wgmma")
        check(z, x.double() @ y.double().T, 3e-3, f"matmul wgmma tf32 {m}x{n}x{k} (seed {seed})")


def test_matmul_rejects() -> None:
    a = torch.zeros(16, 32)
    with pytest.raises(WavecError, match="allow_tf32=True"):
        gm.matmul(a, a, backend="emulator")
    q = torch.zeros(16, 32, dtype=torch.int8)
    with pytest.raises(WavecError, match="int32 C"):
        gm.matmul(q, q, backend="emulator", out_dtype=torch.float32)
    with pytest.raises(WavecError, match="b must have a's dtype"):
        gm.matmul(q, a, backend="emulator")
    with pytest.raises(WavecError, match="split-K takes float16 or bfloat16"):
        gm.matmul(q, q, backend="emulator", split=2)


def test_mma_dtype_mismatch_names_the_constraint() -> None:
    """An f16 operand on the i8 type: the error names the HardwareConstraint's type and the dtypes."""
    kernel = gm.make_gemm(wc.f16, 32, wc.MMAType.NV_I32_16x8x32_I8)
    with pytest.raises(WavecError, match=r"NV_I32_16x8x32_I8.* takes i8 operands and a i32 accumulator"):
        wc.compile(kernel, _subs(64, 2), backend="emulator")
