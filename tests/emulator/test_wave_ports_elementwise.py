"""Ports of Wave's ``tests/kernel/e2e/test_elementwise.py`` (docs/wave_ports.md): a cast, an add and a
broadcast add at sizes no tile divides, against torch, every output element checked."""

from __future__ import annotations

import torch

import wavec as wc
from wavec import Memory
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

SUBS = {BLOCK_M: 4, BLOCK_N: 32}


def _nan(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype)


def test_cast() -> None:
    @wc.wave(rowwise_constraints(32, 1))
    def cast(a: Memory[M, N, wc.f32], b: Memory[M, N, wc.f16]):
        wc.write(wc.cast(wc.read(a), wc.f16), b)

    a = torch.randn(37, 91, generator=torch.Generator().manual_seed(1)) * 100
    b = _nan(a.shape, torch.float16)
    wc.compile(cast, SUBS, backend="emulator", cache=False)(a, b)
    assert torch.equal(b, a.half())


def test_vector_add() -> None:
    @wc.wave(rowwise_constraints(32, 1))
    def add(a: Memory[M, N, wc.f16], b: Memory[M, N, wc.f16], c: Memory[M, N, wc.f16]):
        wc.write(wc.read(a) + wc.read(b), c)

    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(37, 91, generator=g).half(), torch.randn(37, 91, generator=g).half()
    c = _nan(a.shape, torch.float16)
    wc.compile(add, SUBS, backend="emulator", cache=False)(a, b, c)
    assert torch.equal(c, (a.float() + b.float()).half())


def test_broadcast_scaled_add() -> None:
    """``c = a + b[:, None]``: a per-row vector broadcast along N."""

    @wc.wave(rowwise_constraints(32, 1))
    def badd(a: Memory[M, N, wc.f16], b: Memory[M, wc.f16], c: Memory[M, N, wc.f16]):
        wc.write(wc.read(a) + wc.broadcast(wc.read(b), (M, N)), c)

    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(37, 91, generator=g).half(), torch.randn(37, generator=g).half()
    c = _nan(a.shape, torch.float16)
    wc.compile(badd, SUBS, backend="emulator", cache=False)(a, b, c)
    assert torch.equal(c, (a.float() + b.float()[:, None]).half())
