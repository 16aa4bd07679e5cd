"""Ports of Wave's ``tests/kernel/e2e/test_copy.py`` (docs/wave_ports.md): a row-major f16 copy, one
compiled kernel launched at several sizes no tile divides (Wave's static and dynamic-dims variants).
Outputs are NaN-filled first, so every element is checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec import Memory
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints


def _copy(vec: int) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(32, vec))
    def copy(a: Memory[M, N, wc.f16], b: Memory[M, N, wc.f16]):
        wc.write(wc.read(a), b)

    return copy


@pytest.mark.parametrize("vec", [1, 8])
def test_copy(vec: int) -> None:
    """Wave's test_copy and test_dynamic_copy: sizes are launch values in wavec, so one binary serves all."""
    k = wc.compile(_copy(vec), {BLOCK_M: 1, BLOCK_N: 32 * vec}, backend="emulator", cache=False)
    g = torch.Generator().manual_seed(vec)
    for shape in ((1, 27), (111, 813), (17, 256)):
        a = torch.randn(shape, generator=g).half()
        b = torch.full(shape, float("nan"), dtype=torch.float16)
        k(a, b)
        assert torch.equal(a, b)
