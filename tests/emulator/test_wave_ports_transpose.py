"""Ports of Wave's ``tests/kernel/e2e/test_transpose.py`` (docs/wave_ports.md): transposes by an index
map on the read or on the write, at sizes no tile divides, every output element checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec import Memory
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints


def _run(kernel: wc.WaveKernel, vec: int, a: torch.Tensor, out_shape: tuple) -> torch.Tensor:
    out = torch.full(out_shape, float("nan"), dtype=a.dtype)
    wc.compile(kernel, {BLOCK_M: 4, BLOCK_N: 32 * vec}, backend="emulator", cache=False)(a, out)
    return out


@pytest.mark.parametrize("vec", [1, 8])
def test_transpose_read(vec: int) -> None:
    @wc.wave(rowwise_constraints(32, vec))
    def transpose_read(a: Memory[N, M, wc.f16], b: Memory[M, N, wc.f16]):
        wc.write(wc.read(a, mapping={N: wc.index(N), M: wc.index(M)}), b)

    a = torch.randn(45, 67, generator=torch.Generator().manual_seed(vec)).half()
    assert torch.equal(_run(transpose_read, vec, a, (67, 45)), a.t())


@pytest.mark.parametrize("vec", [1, 8])
def test_transpose_write(vec: int) -> None:
    @wc.wave(rowwise_constraints(32, vec))
    def transpose_write(a: Memory[M, N, wc.f16], b: Memory[N, M, wc.f16]):
        wc.write(wc.read(a), b, mapping={N: wc.index(N), M: wc.index(M)})

    a = torch.randn(45, 67, generator=torch.Generator().manual_seed(10 + vec)).half()
    assert torch.equal(_run(transpose_write, vec, a, (67, 45)), a.t())


def test_arbitrary_transpose() -> None:
    """Wave reads ``a[M, N]`` into ``b[N, M]`` through a read map; here the transposed operand is a
    strided torch view (no copy), read by a plain map."""

    @wc.wave(rowwise_constraints(32, 1))
    def transpose(a: Memory[N, M, wc.f16], b: Memory[M, N, wc.f16]):
        wc.write(wc.read(a, mapping={N: wc.index(N), M: wc.index(M)}), b)

    base = torch.randn(30, 77, generator=torch.Generator().manual_seed(5)).half()
    a = base.t()  # [77, 30] with strides (1, 77)
    assert torch.equal(_run(transpose, 1, a, (30, 77)), base)
