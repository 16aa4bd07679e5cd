"""Emulator tier: ``wc.cast(f32 -> bf16)`` rounds to nearest even, bit for bit like torch, on both lowerings:
NVIDIA targets emit one ``nvvm.convert.f32x2.to.bf16x2`` (``cvt.rn.bf16x2.f32``) per pair of elements
(an odd element is paired with 0 and dropped), AMD keeps ``arith.truncf``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import wavec as wc
from wavec import Memory
from wavec.kernels.elementwise import DEFAULT_SUBS, rowwise_constraints

pytest.importorskip("iree.compiler")

M, N = wc.sym.M, wc.sym.N


def make_cast(threads: int, elems: int) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(threads, elems))
    def cast_bf16(x: Memory[M, N, wc.f32], out: Memory[M, N, wc.bf16]):
        wc.write(wc.cast(wc.read(x), wc.bf16), out)

    return cast_bf16


def _inputs(n: int) -> torch.Tensor:
    """Ties (low 16 bits 0x8000, even and odd bf16 mantissas), just above and below them, values that round
    up to the next binade or to inf, infinities, signed zeros, subnormals, and random values."""
    hi = np.random.default_rng(0).integers(0, 1 << 16, n, dtype=np.uint32)
    low = np.array([0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF, 0x4000, 0xC000], np.uint32)
    bits = (hi << 16) | low[np.arange(n) % low.size]
    special = np.array(
        [
            0x7F7FFFFF,
            0xFF7FFFFF,
            0x7F7F8000,
            0x7F800000,
            0xFF800000,
            0x00000000,
            0x80000000,
            0x00000001,
            0x80008000,
            0x007FFFFF,
            0x3F808000,
            0x3F818000,
            0x3FFFFFFF,
        ],
        np.uint32,
    )
    bits[: special.size] = special
    bits = np.where((bits & 0x7F800000) == 0x7F800000, bits & 0xFF800000, bits)  # inf, not NaN
    return torch.from_numpy(bits.view(np.float32).copy())


@pytest.mark.parametrize(
    "target,threads,elems", [("sm_90", 32, 8), ("sm_90", 32, 1), ("sm_80", 32, 4), ("gfx942", 64, 8)]
)
def test_cast_to_bf16_rounds_to_nearest_even(target: str, threads: int, elems: int) -> None:
    kernel = wc.compile(make_cast(threads, elems), DEFAULT_SUBS, backend="emulator", target=target, cache=False)
    mlir = kernel.artifact.mlir
    if target.startswith("sm_"):
        assert "nvvm.convert.f32x2.to.bf16x2" in mlir and "rnd = <rn>" in mlir
        assert "to vector<" not in "".join(ln for ln in mlir.splitlines() if "arith.truncf" in ln)
    else:
        assert "arith.truncf" in mlir and "nvvm.convert" not in mlir
    m, n = 5, 1000  # N not a multiple of the tile: masked tail
    x = _inputs(m * n).reshape(m, n)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    kernel(x, out)
    assert torch.equal(out.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))
