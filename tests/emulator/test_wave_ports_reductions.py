"""Ports of Wave's ``tests/kernel/e2e/test_reductions.py`` and ``test_scan.py`` (docs/wave_ports.md):
row sums of products (one wave and a block of waves per row), an online softmax over loop tiles and
cumsums in 1-D, 2-D and across waves, against torch in float64, every output element checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import reduce_kernels as rk
from tests import wave_port_kernels as pk
from wavec import Memory, Register

M, N = rk.M, rk.N


def _row_sum_of_products(dtype, waves_n: int) -> wc.WaveKernel:
    @wc.wave(rk.row_constraints(32, waves_n, 256))
    def reduce_sum(a: Memory[M, N, dtype], b: Memory[M, N, dtype], c: Memory[M, dtype]):
        wc.write(wc.sum(wc.read(a) * wc.read(b), N), c)

    return reduce_sum


@pytest.mark.parametrize("dtype,waves_n", [(wc.f16, 1), (wc.f32, 4)])
def test_reduce_sum_and_block_reduce_sum(dtype, waves_n: int) -> None:
    """Wave's test_reduce_sum (f16, one wave per row) and test_block_reduce_sum (f32, waves split a row)."""
    g = torch.Generator().manual_seed(waves_n)
    td = dtype.torch()
    a, b = torch.randn(9, 256, generator=g).to(td), torch.randn(9, 256, generator=g).to(td)
    c = torch.full((9,), float("nan"), dtype=td)
    wc.compile(_row_sum_of_products(dtype, waves_n), {}, backend="emulator", cache=False)(a, b, c)
    want = (a * b).double().sum(-1)  # the products rounded to dtype, as Wave's and torch's kernels
    tol = 2e-2 if dtype == wc.f16 else 1e-5
    torch.testing.assert_close(c.double(), want, rtol=tol, atol=tol)


def test_toy_online_softmax() -> None:
    """Wave's kernel: ``c[m] = max_n(a * b)[m] / sum_n(a * b)[m]``, the max and the sum carried over loop
    tiles of N; one row per workgroup, so M is a batch dimension and the carried ``Register[M, f32]``
    values drop it (a regression test: they kept it, and the final write failed)."""
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(5, 320, generator=g), torch.randn(5, 320, generator=g)
    c = torch.full((5,), float("nan"))
    wc.compile(pk.make_toy_online_softmax(1), {pk.TILE_N: 64}, backend="emulator", cache=False)(a, b, c)
    torch.testing.assert_close(c.double(), pk.reference_toy_online_softmax(a, b), rtol=1e-4, atol=1e-6)


def test_online_softmax_rescaled() -> None:
    """Beyond Wave's toy: ``out[m] = sum_n softmax(a[m, :])[n] * b[m, n]`` with the running max, the
    rescaled denominator and numerator carried over loop tiles (flash attention's recurrence)."""

    @wc.wave(pk.loop_constraints(2))
    def online_softmax(a: Memory[M, N, wc.f32], b: Memory[M, N, wc.f32], out: Memory[M, wc.f32]):
        init = [Register[M, wc.f32](float("-inf")), Register[M, wc.f32](0.0), Register[M, wc.f32](0.0)]

        @wc.iterate(N, init_args=init)
        def loop(mx: Register[M, wc.f32], den: Register[M, wc.f32], num: Register[M, wc.f32]):
            x, y = wc.read(a), wc.read(b)
            new_mx = wc.maximum(mx, wc.max(x, N))
            scale = wc.exp(mx - new_mx)
            p = wc.exp(x - new_mx)
            return new_mx, den * scale + wc.sum(p, N), num * scale + wc.sum(p * y, N)

        _mx, den, num = loop
        wc.write(num / den, out)

    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(5, 320, generator=g) * 3, torch.randn(5, 320, generator=g)
    out = torch.full((5,), float("nan"))
    wc.compile(online_softmax, {pk.TILE_N: 64}, backend="emulator", cache=False)(a, b, out)
    want = (a.double().softmax(-1) * b.double()).sum(-1)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("waves", [1, 4])
def test_scan_cumsum(waves: int) -> None:
    """Wave's test_2d_scanop_cumsum (rows of [M, N], one wave each) and test_1d / test_block_scanop_cumsum
    (a 1-D tile split over waves, the carry crossing them)."""
    shape = (6, 256) if waves == 1 else (512,)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(waves))
    y = torch.full(shape, float("nan"))
    kernel = rk.make_scan("add", False, wc.f32, waves=waves)
    wc.compile(kernel, {}, backend="emulator", cache=False)(x, y)
    if waves == 1:
        want = x.double().cumsum(-1)
    else:  # each workgroup tile of 256 is its own scan
        want = torch.cat([t.double().cumsum(-1) for t in x.split(256)])
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)
