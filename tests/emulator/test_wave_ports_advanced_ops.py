"""Ports of Wave's ``tests/kernel/e2e/test_advanced_ops.py`` (docs/wave_ports.md): a scatter-add along
dim 0, a row top-k (with and without repeated values) and a fused row softmax, against torch in higher
precision, every output element checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import reduce_kernels as rk
from wavec import Memory
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints


def test_scatter_add() -> None:
    """``out.scatter_add_(0, index, a)``: ``out[index[m, n], n] += a[m, n]``."""

    @wc.wave(rowwise_constraints(32, 1))
    def scatter(a: Memory[M, N, wc.f32], index: Memory[M, N, wc.i32], out: Memory[M, N, wc.f32]):
        wc.scatter_add(wc.read(a), out, mapping={M: wc.read(index)})

    g = torch.Generator().manual_seed(1)
    a = torch.randint(-50, 50, (21, 70), generator=g).float()  # integers: the sum is exact in any order
    index = torch.randint(0, 21, (21, 70), generator=g).int()
    out = torch.zeros_like(a)
    wc.compile(scatter, {BLOCK_M: 4, BLOCK_N: 32}, backend="emulator", cache=False)(a, index, out)
    assert torch.equal(out, torch.zeros_like(a).scatter_add(0, index.long(), a))


@pytest.mark.parametrize("duplicates", [False, True])
def test_topk(duplicates: bool) -> None:
    gen = torch.Generator().manual_seed(int(duplicates))
    x = rk.random_values((6, 512), "f16", gen, ties=duplicates)
    values = torch.full((6, 8), float("nan"), dtype=torch.float16)
    indices = torch.full((6, 8), -1, dtype=torch.int32)
    wc.compile(rk.make_topk(wc.f16), {rk.K: 8}, backend="emulator", cache=False)(x, values, indices)
    rk.check_topk(x, 8, values, indices)


def test_fused_softmax() -> None:
    cons = [
        wc.WorkgroupConstraint(M, 2, 0),
        wc.WorkgroupConstraint(N, N, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 128}),
    ]

    @wc.wave(cons)
    def softmax(x: Memory[M, N, wc.f16], out: Memory[M, N, wc.f16]):
        v = wc.cast(wc.read(x), wc.f32)
        e = wc.exp(v - wc.max(v, N)[:, None])
        wc.write(wc.cast(e / wc.sum(e, N)[:, None], wc.f16), out)

    x = (torch.randn(7, 128, generator=torch.Generator().manual_seed(3)) * 3).half()
    out = torch.full_like(x, float("nan"))
    wc.compile(softmax, {N: 128}, backend="emulator", cache=False)(x, out)
    torch.testing.assert_close(out.double(), x.double().softmax(-1), rtol=1e-3, atol=1e-3)
