"""Emulator tier for the general warpgroup-MMA features attention needs: B stored [K, N] (MN-major shared
tiles, ``imm-trans-b = 1``), A from registers (wgmma's ``{a0..a3}`` form) and two chained wgmmas whose
results ordinary register ops read (fences and waits placed by ``insert_wgmma_fences``), against torch in
float64 on fresh random inputs (NaN-poisoned outputs), f16 and bf16, every swizzle."""

from __future__ import annotations

import pytest
import torch
from test_kernels_emulated import GEMM_TOL, TORCH_DTYPE, check, generator, poisoned, randn

import wavec as wc
from wavec.emulator.interp import EmulatorError
from wavec.indexing.shared_layout import SharedLayout, SharedLayoutKind
from wavec.passes.hopper import insert_wgmma_fences as fences_pass

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BM, BN, BK, STAGES = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K, wc.sym.NUM_STAGES
WGMMA = {wc.f16: wc.MMAType.NV_WGMMA_F32_64xNx16_F16, wc.bf16: wc.MMAType.NV_WGMMA_F32_64xNx16_BF16}


def _constraints(dtype, waves_m: int, swizzle: str = "auto") -> list:
    return [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, BM / waves_m),
        wc.WaveConstraint(N, BN),
        wc.TilingConstraint(K, BK),
        wc.HardwareConstraint(threads_per_wave=32, mma_type=WGMMA[dtype]),
        wc.SchedulingConstraint(num_stages=STAGES, operand_swizzle=swizzle),
    ]


def gemm_kn(dtype, waves_m: int = 1, swizzle: str = "auto"):
    """``C = A @ B`` with B stored [K, N] (contiguous along N): the B tile is MN-major."""

    @wc.wave(_constraints(dtype, waves_m, swizzle))
    def gemm(a: wc.Memory[M, K, dtype], b: wc.Memory[K, N, dtype], c: wc.Memory[M, N, wc.f32]):
        @wc.iterate(K, init_args=[wc.Register[M, N, wc.f32](0.0)])
        def body(acc: wc.Register[M, N, wc.f32]) -> wc.Register[M, N, wc.f32]:
            return wc.mma(wc.read(a), wc.permute(wc.read(b), (N, K)), acc)

        wc.write(body, c)

    return gemm


def gemm_scaled_a(dtype, swizzle: str = "auto"):
    """``C = (2 A) @ B.T``: A is computed in registers (a register-A wgmma) and B read from shared memory."""

    @wc.wave(_constraints(dtype, 1, swizzle))
    def gemm(a: wc.Memory[M, K, dtype], b: wc.Memory[N, K, dtype], c: wc.Memory[M, N, wc.f32]):
        @wc.iterate(K, init_args=[wc.Register[M, N, wc.f32](0.0)])
        def body(acc: wc.Register[M, N, wc.f32]) -> wc.Register[M, N, wc.f32]:
            a2 = wc.cast(wc.cast(wc.read(a), wc.f32) * 2.0, dtype)
            return wc.mma(a2, wc.read(b), acc)

        wc.write(body, c)

    return gemm


def chain(dtype, swizzle: str = "auto"):
    """``O = relu(A @ B.T) @ V`` per K tile summed over K: S from a descriptor wgmma, read by ordinary ops,
    cast to the input type and fed as register A to a second wgmma whose B (V [K, N]) is MN-major."""
    J = wc.sym.J

    @wc.wave(
        [
            wc.WorkgroupConstraint(M, BM, 0),
            wc.WorkgroupConstraint(N, BN, 1),
            wc.WorkgroupConstraint(J, J, None),
            wc.WaveConstraint(M, 64),
            wc.WaveConstraint(N, BN),
            wc.TilingConstraint(K, BK),
            wc.HardwareConstraint(threads_per_wave=32, mma_type=WGMMA[dtype]),
            wc.SchedulingConstraint(num_stages=STAGES, operand_swizzle=swizzle),
        ]
    )
    def kernel(
        a: wc.Memory[M, J, dtype], b: wc.Memory[K, J, dtype], v: wc.Memory[K, N, dtype], o: wc.Memory[M, N, wc.f32]
    ):
        ar = wc.read(a)

        @wc.iterate(K, init_args=[wc.Register[M, N, wc.f32](0.0)])
        def body(acc: wc.Register[M, N, wc.f32]) -> wc.Register[M, N, wc.f32]:
            s = wc.mma(ar, wc.read(b), wc.Register[M, K, wc.f32](0.0))
            p = wc.cast(wc.maximum(s, 0.0), dtype)
            return wc.mma(p, wc.permute(wc.read(v), (N, K)), acc * 0.5)

        wc.write(body, o)

    return kernel


def _compile(kernel, subs, **kw):
    return wc.compile(kernel, subs, backend="emulator", target="sm_90a", cache=False, **kw)


KN_CASES = [
    ("64x64x32-s2", {BM: 64, BN: 64, BK: 32, STAGES: 2}, 1, [(64, 64, 64), (100, 72, 40)]),
    ("128x128x64-s3-2wg", {BM: 128, BN: 128, BK: 64, STAGES: 3}, 2, [(130, 136, 136)]),
    ("64x256x32-s1", {BM: 64, BN: 256, BK: 32, STAGES: 1}, 1, [(64, 256, 96)]),
]


@pytest.mark.parametrize("swizzle", ["auto", "none", "64B", "32B"])
@pytest.mark.parametrize("case", KN_CASES, ids=[c[0] for c in KN_CASES])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_gemm_b_stored_k_by_n(dtype, case, swizzle) -> None:
    _name, subs, waves_m, shapes = case
    kernel = _compile(gemm_kn(dtype, waves_m, swizzle), subs)
    assert f"B[<{dtype.name}>, <one>, <row>]" in kernel.artifact.mlir  # imm-trans-b = 1
    g, seed = generator()
    for m, n, k in shapes:
        a, b = randn(g, m, k, dtype=TORCH_DTYPE[dtype]), randn(g, k, n, dtype=TORCH_DTYPE[dtype])
        c = poisoned(m, n)
        kernel(a, b, c)
        check(
            c,
            a.double() @ b.double(),
            GEMM_TOL,
            f"B [K, N] {dtype.name} {case[0]} {swizzle} M={m} N={n} K={k} (seed {seed})",
        )


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_gemm_a_from_registers(dtype) -> None:
    kernel = _compile(gemm_scaled_a(dtype), {BM: 64, BN: 64, BK: 32, STAGES: 2})
    mlir = kernel.artifact.mlir
    assert "llvm.inline_asm" in mlir and f"m64n64k16.f32.{dtype.name}.{dtype.name}" in mlir
    g, seed = generator()
    for m, n, k in [(64, 64, 64), (70, 100, 40)]:
        a, b = randn(g, m, k, dtype=TORCH_DTYPE[dtype]), randn(g, n, k, dtype=TORCH_DTYPE[dtype])
        c = poisoned(m, n)
        kernel(a, b, c)
        check(c, 2 * a.double() @ b.double().T, GEMM_TOL, f"register A {dtype.name} M={m} N={n} K={k} (seed {seed})")


def _chain_ref(a, b, v):
    acc = torch.zeros(a.shape[0], v.shape[1], dtype=torch.float64)
    for k0 in range(0, b.shape[0], 64):
        s = a.double() @ b[k0 : k0 + 64].double().T
        p = s.clamp(min=0).to(a.dtype).double()
        acc = acc * 0.5 + p @ v[k0 : k0 + 64].double()
    return acc


@pytest.mark.parametrize("swizzle", ["auto", "none"])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_two_wgmmas_with_register_ops_between(dtype, swizzle) -> None:
    kernel = _compile(chain(dtype, swizzle), {BM: 128, BN: 64, BK: 64, STAGES: 2, wc.sym.J: 64})
    mlir = kernel.artifact.mlir
    assert mlir.count("nvvm.wgmma.wait.group.sync.aligned 0") >= 2  # S is waited for before relu reads it
    g, seed = generator()
    m, n, k = 128, 64, 192
    a, b, v = (randn(g, *s, dtype=TORCH_DTYPE[dtype]) for s in ((m, 64), (k, 64), (k, n)))
    o = poisoned(m, n)
    kernel(a, b, v, o)
    tol = 2e-2 if dtype == wc.bf16 else 2e-3  # P is rounded to the input type (ties may round differently)
    check(o, _chain_ref(a, b, v), tol, f"chained wgmmas {dtype.name} {swizzle} (seed {seed})")


def test_early_read_of_s_is_caught(monkeypatch) -> None:
    """With the wait before relu reads S weakened to ``pending=1`` (S's group may still run), the emulator
    refuses the read: S leaves the wgmma register form while still in flight."""
    real = fences_pass._node

    def weak_middle_wait(g, op, where, before, **kw):
        if op is fences_pass.WgmmaWait and where.op != "output":
            kw = {**kw, "pending": 1}
        return real(g, op, where, before, **kw)

    monkeypatch.setattr(fences_pass, "_node", weak_middle_wait)
    kernel = _compile(chain(wc.f16), {BM: 64, BN: 64, BK: 64, STAGES: 1, wc.sym.J: 64})
    a, b, v = torch.randn(64, 64).half(), torch.randn(64, 64).half(), torch.randn(64, 64).half()
    with pytest.raises(EmulatorError, match="before the wgmma.wait_group that retires it"):
        kernel(a, b, v, poisoned(64, 64))


def test_missing_wait_before_a_register_reader_is_refused(monkeypatch) -> None:
    """Without that wait at all, the lowering refuses: relu would read registers a wgmma still writes."""
    real = fences_pass._node
    monkeypatch.setattr(
        fences_pass,
        "_node",
        lambda g, op, where, before, **kw: (
            where if op is fences_pass.WgmmaWait and where.op != "output" else real(g, op, where, before, **kw)
        ),
    )
    with pytest.raises(wc.WavecError, match="no wgmma_wait retiring it"):
        _compile(chain(wc.f16), {BM: 64, BN: 64, BK: 64, STAGES: 1, wc.sym.J: 64})


def test_missing_fence_before_register_a_is_caught(monkeypatch) -> None:
    real = fences_pass._node

    def no_fence(g, op, where, before, **kw):
        if op is fences_pass.WgmmaFence and where.meta.get("a_in_registers"):
            return real(g, fences_pass.ProxyFence, where, before)  # harmless stand-in
        return real(g, op, where, before, **kw)

    monkeypatch.setattr(fences_pass, "_node", no_fence)
    kernel = _compile(chain(wc.f16), {BM: 64, BN: 64, BK: 64, STAGES: 1, wc.sym.J: 64})
    a, b, v = torch.randn(64, 64).half(), torch.randn(64, 64).half(), torch.randn(64, 64).half()
    with pytest.raises(EmulatorError, match="wgmma.fence"):
        kernel(a, b, v, poisoned(64, 64))


@pytest.mark.parametrize(
    "kind,lbo,sbo",
    [
        (SharedLayoutKind.SWIZZLE_128B, 64 * 128, 1024),
        (SharedLayoutKind.SWIZZLE_64B, 64 * 64, 512),
        (SharedLayoutKind.CORE_K_MAJOR, 16 * 128, 128),
    ],
)
def test_mn_major_descriptor_strides(kind, lbo, sbo) -> None:
    """A 64 (K rows) x 128 (N, contiguous) f16 tile: LBO/SBO of the PTX ISA canonical MN-major layouts."""
    lay = SharedLayout(kind, 2, mn_major=True)
    assert (lay.lbo((64, 128)), lay.sbo((64, 128))) == (lbo, sbo)
    # the instruction tile at K rows 16.. starts 2 x 8 rows further (same storage as K-major)
    assert lay.byte_offset(16, 0, (64, 128)) == SharedLayout(kind, 2).byte_offset(16, 0, (64, 128))
