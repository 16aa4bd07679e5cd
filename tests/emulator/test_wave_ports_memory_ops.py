"""Ports of Wave's ``tests/kernel/e2e/test_memory_ops.py`` (docs/wave_ports.md): an in-place update and
gathers / scatters whose coordinates are read from an offset tensor (per element, or one offset per run
of ``E`` elements), against torch's take_along_dim / scatter, every output element checked."""

from __future__ import annotations

import torch

import wavec as wc
from tests import wave_port_kernels as pk
from wavec import Memory
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

N1 = wc.sym.N1
E = pk.RUN  # elements that share one offset (Wave's ELEMS_PER_THREAD)
SUBS = {BLOCK_M: 4, BLOCK_N: 32}
SHAPE = (23, 70)


def _compile(kernel: wc.WaveKernel) -> wc.WaveKernel:
    return wc.compile(kernel, SUBS, backend="emulator", cache=False)


def _nan(shape: tuple) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=torch.float16)


def test_read_write_same() -> None:
    @wc.wave(rowwise_constraints(32, 1))
    def double(a: Memory[M, N, wc.f16]):
        v = wc.read(a)
        wc.write(v + v, a)

    a = torch.randn(SHAPE, generator=torch.Generator().manual_seed(1)).half()
    want = a + a
    _compile(double)(a)
    assert torch.equal(a, want)


def test_offset_read() -> None:
    """``b[m, n] = a[off[m, n], n]``."""

    @wc.wave(rowwise_constraints(32, 1))
    def offset_read(a: Memory[M, N, wc.f16], off: Memory[M, N, wc.i32], b: Memory[M, N, wc.f16]):
        wc.write(wc.read(a, mapping={M: wc.read(off)}), b)

    g = torch.Generator().manual_seed(2)
    a, off = torch.randn(SHAPE, generator=g).half(), torch.randint(0, SHAPE[0], SHAPE, generator=g).int()
    b = _nan(SHAPE)
    _compile(offset_read)(a, off, b)
    assert torch.equal(b, torch.take_along_dim(a, off.long(), dim=0))


def test_offset_read_one() -> None:
    """``b[m, n] = a[off[m, n // E], n]``: one offset per run of E elements."""

    @wc.wave(rowwise_constraints(32, 1))
    def offset_read_one(a: Memory[M, N, wc.f16], off: Memory[M, N1, wc.i32], b: Memory[M, N, wc.f16]):
        rows = wc.read(off, mapping={N1: wc.index(N) // E})
        wc.write(wc.read(a, mapping={M: rows}), b)

    g = torch.Generator().manual_seed(3)
    n1 = -(-SHAPE[1] // E)
    a, off = torch.randn(SHAPE, generator=g).half(), torch.randint(0, SHAPE[0], (SHAPE[0], n1), generator=g).int()
    b = _nan(SHAPE)
    _compile(offset_read_one)(a, off, b)
    idx = off.repeat_interleave(E, dim=1)[:, : SHAPE[1]].long()
    assert torch.equal(b, torch.take_along_dim(a, idx, dim=0))


def _row_permutations(g: torch.Generator, rows: int, n: int) -> torch.Tensor:
    return torch.stack([torch.randperm(n, generator=g) for _ in range(rows)]).int()


def test_offset_write() -> None:
    """``b[m, off[m, n]] = a[m, n]`` with each row of ``off`` a permutation (one writer per element)."""

    @wc.wave(rowwise_constraints(32, 1))
    def offset_write(a: Memory[M, N, wc.f16], off: Memory[M, N, wc.i32], b: Memory[M, N, wc.f16]):
        wc.write(wc.read(a), b, mapping={N: wc.read(off)})

    g = torch.Generator().manual_seed(4)
    a, off = torch.randn(SHAPE, generator=g).half(), _row_permutations(g, *SHAPE)
    b = _nan(SHAPE)
    _compile(offset_write)(a, off, b)
    assert torch.equal(b, torch.zeros_like(a).scatter(1, off.long(), a))


def test_offset_write_one() -> None:
    """``b[m, off[m, n // E] + n % E] = a[m, n]``: runs of E elements moved to offsets (a permutation of
    the row's runs, times E)."""
    a, off = pk.offset_write_one_inputs((23, 72), torch.Generator().manual_seed(5))
    b = _nan(a.shape)
    _compile(pk.make_offset_write_one())(a, off, b)
    assert torch.equal(b, pk.reference_offset_write_one(a, off))
