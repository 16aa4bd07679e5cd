"""Ports of Wave's ``tests/kernel/e2e/test_misc_ops.py`` (docs/wave_ports.md): row gathers through a
read offset (Wave's set_symbol / apply_expr), a self-index select after a cumsum, per-element
conditional stores and a scalar-conditioned result, against torch, every output element checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import wave_port_kernels as pk
from wavec import Memory
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

S = wc.sym.S
SUBS = {BLOCK_M: 4, BLOCK_N: 32}


def _compile(kernel: wc.WaveKernel, subs: dict = SUBS) -> wc.WaveKernel:
    return wc.compile(kernel, subs, backend="emulator", cache=False)


def _nan(shape: tuple) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=torch.float16)


@pytest.mark.parametrize("reverse", [False, True])
def test_set_symbol_and_apply_expr(reverse: bool) -> None:
    """``b[m, n] = a[off[m, n], n]`` (set_symbol) and ``a[M - 1 - off[m, n], n]`` (apply_expr)."""

    @wc.wave(rowwise_constraints(32, 1))
    def gather(a: Memory[S, N, wc.f16], off: Memory[M, N, wc.i32], b: Memory[M, N, wc.f16]):
        o = wc.read(off)
        wc.write(wc.read(a, mapping={S: M - o - 1 if reverse else o}), b)

    g = torch.Generator().manual_seed(int(reverse))
    a, off = torch.randn(19, 70, generator=g).half(), torch.randint(0, 19, (19, 70), generator=g).int()
    b = _nan((19, 70))
    _compile(gather)(a, off, b)
    rows = 19 - off - 1 if reverse else off
    assert torch.equal(b, torch.take_along_dim(a, rows.long(), dim=0))


def test_self_index() -> None:
    """``out = where(sum(a) >= cumsum(a), index(N), sum(a))`` along N of [M, K, N] (Wave: all-ones input
    gives ``arange(N)``); here random non-negative integers.  M and K are batch dimensions that
    ``wc.broadcast`` targets: a regression test (they were kept, and the write failed)."""
    a = torch.randint(0, 3, (3, 4, 128), generator=torch.Generator().manual_seed(7)).int()
    out = torch.full_like(a, -77)
    _compile(pk.make_self_index(), {N: 128})(a, out)
    assert torch.equal(out, pk.reference_self_index(a))


def test_conditional() -> None:
    """``b[m, n] = a[m, n]`` only where ``mask[m, n] > 0`` (a branch per element); the rest untouched."""

    @wc.wave(rowwise_constraints(32, 1))
    def cond_store(a: Memory[M, N, wc.f16], mask: Memory[M, N, wc.i32], b: Memory[M, N, wc.f16]):
        v = wc.read(a)

        @wc.conditional(wc.read(mask) > 0)
        def _() -> None:
            wc.write(v, b)

    g = torch.Generator().manual_seed(8)
    a, mask = torch.randn(21, 70, generator=g).half(), torch.randint(-2, 3, (21, 70), generator=g).int()
    b = torch.full_like(a, 1234.0)
    _compile(cond_store)(a, mask, b)
    assert torch.equal(b, torch.where(mask > 0, a, torch.full_like(a, 1234.0)))


@pytest.mark.parametrize("threshold", [5, 15])
def test_conditional_return(threshold: int) -> None:
    """``b = a * 2.5`` when the scalar argument ``threshold > 10``, else ``b = a``."""

    @wc.wave(rowwise_constraints(32, 1))
    def cond_scale(a: Memory[M, N, wc.f16], b: Memory[M, N, wc.f16], threshold: wc.Scalar[wc.i32]):
        v = wc.read(a)
        wc.write(wc.where(wc.broadcast(threshold, (M, N)) > 10, v * 2.5, v), b)

    a = torch.randn(21, 70, generator=torch.Generator().manual_seed(9)).half()
    b = _nan(a.shape)
    _compile(cond_scale)(a, b, threshold)
    assert torch.equal(b, (a.float() * 2.5).half() if threshold > 10 else a)
