"""``wc.permute`` and ``wc.where`` with numbers: shape rules, layout propagation, emulator numerics."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec import Memory, Register, f16, f32
from wavec.errors import OutsideKernelError, ShapeError
from wavec.indexing import IndexSeq, Layout

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K


def gemm_nn(target: str, promote: bool, block_n: int = 32) -> wc.WaveKernel:
    """``C = A @ B`` with B stored [K, N]: the B operand is the read of B permuted to [N, K]."""
    tpw, mma = (32, wc.MMAType.NV_F32_16x8x16_F16) if target.startswith("sm") else (64, wc.MMAType.F32_16x16x16_F16)
    cons = [
        wc.WorkgroupConstraint(M, 32, 0),
        wc.WorkgroupConstraint(N, block_n, 1),
        wc.WaveConstraint(M, 16),
        wc.WaveConstraint(N, block_n),
        wc.TilingConstraint(K, 32),
        wc.HardwareConstraint(threads_per_wave=tpw, mma_type=mma),
        wc.SchedulingConstraint(num_stages=2, promote_operands=promote),
    ]

    @wc.wave(cons)
    def gemm_nn(a: Memory[M, K, f16], b: Memory[K, N, f16], c: Memory[M, N, f32]):
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.permute(wc.read(b), (N, K)), acc)

        wc.write(body, c)

    return gemm_nn


@pytest.mark.parametrize("target", ["sm_90", "gfx942"])
@pytest.mark.parametrize("promote", [False, True])
def test_gemm_with_permuted_operand(target: str, promote: bool) -> None:
    k = wc.compile(gemm_nn(target, promote), {}, target=target, backend="emulator", cache=False)
    a, b = torch.randn(40, 64).half(), torch.randn(64, 56).half()
    c = torch.full((40, 56), float("nan"))
    k(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("block_n,tiles", [(32, 4), (8, 2)])
def test_transposed_b_uses_ldmatrix_trans(block_n: int, tiles: int) -> None:
    """B stored [K, N] and staged in shared memory: ldmatrix.trans (x4 for paired N tiles, else x2),
    chosen from the tile's layout; the emulator decodes it like the GPU."""
    kernel = gemm_nn("sm_90", True, block_n)
    mlir = wc.compile(kernel, {}, target="sm_90", backend="cuda", cache=False).mlir
    assert f"numTiles = {tiles} transpose = true" in mlir and "numTiles = 4 transpose = false" in mlir
    k = wc.compile(kernel, {}, target="sm_90", backend="emulator", cache=False)
    a, b = torch.randn(33, 96).half(), torch.randn(96, 3 * block_n).half()
    c = torch.full((33, 3 * block_n), float("nan"))
    k(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def test_layout_permute_keeps_register_order() -> None:
    lay = Layout.make((M, N), (IndexSeq(0, ((2, 8),)), IndexSeq(0, ((2, 1),))), (16, 8))
    p = lay.permute((N, M))
    assert p.dims == (N, M) and p.tile == (8, 16) and p.order == lay.order
    assert p.positions() == lay.positions()


def test_permute_shape_errors() -> None:
    cons = [
        wc.WorkgroupConstraint(M, 16, 0),
        wc.WorkgroupConstraint(N, 32, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 32}),
    ]

    @wc.wave(cons)
    def bad(x: Memory[M, N, f32], y: Memory[N, M, f32]):
        wc.write(wc.permute(wc.read(x), (N, K)), y)

    with pytest.raises(ShapeError, match="not a permutation"):
        wc.compile(bad, {}, backend="emulator", cache=False)
    with pytest.raises(OutsideKernelError, match=r"wc\.permute\(\)"):
        wc.permute(None, (M, N))


def test_where_with_number_and_transposed_write() -> None:
    cons = [
        wc.WorkgroupConstraint(M, 4, 0),
        wc.WorkgroupConstraint(N, 64, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 64}),
    ]

    @wc.wave(cons)
    def relu_t(x: Memory[M, N, f32], y: Memory[N, M, f32]):
        v = wc.read(x)
        wc.write(wc.permute(wc.where(v > 0.0, v, float("-inf")), (N, M)), y)

    k = wc.compile(relu_t, {}, backend="emulator", cache=False)
    x = torch.randn(6, 64)
    y = torch.full((64, 6), float("nan"))
    k(x, y)
    torch.testing.assert_close(y, torch.where(x > 0, x, float("-inf")).T)
