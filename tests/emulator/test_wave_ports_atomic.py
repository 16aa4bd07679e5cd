"""Ports of Wave's ``tests/kernel/e2e/test_atomic.py`` (docs/wave_ports.md): an atomic min of every row
into one shared row, an atomic add returning the old values, and a shared histogram of indices (torch's
bincount), every output element checked."""

from __future__ import annotations

import torch

import wavec as wc
from wavec import Memory, Register

M, N, X, E = wc.sym.M, wc.sym.N, wc.sym.X, wc.sym.E


def test_atomic_min() -> None:
    """Two waves atomically take the min of their rows into shared row 0; both write it: ``c[m] = a.min(0)``."""
    cons = [
        wc.WorkgroupConstraint(M, 2, 0),
        wc.WorkgroupConstraint(N, 64, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 64}),
    ]

    @wc.wave(cons)
    def atomic_min(a: Memory[M, N, wc.i32], c: Memory[M, N, wc.i32]):
        buf = wc.allocate((M, N), wc.i32, distributed_shape=(2, 64))
        wc.write(Register[M, N, wc.i32](1 << 20), buf)
        wc.atomic_min(wc.read(a), buf, mapping={M: wc.index(M) * 0})
        wc.barrier()
        wc.write(wc.read(buf, mapping={M: wc.index(M) * 0}), c)

    a = torch.randint(0, 1000, (2, 64), generator=torch.Generator().manual_seed(1)).int()
    c = torch.full_like(a, -77)
    wc.compile(atomic_min, {}, backend="emulator", cache=False)(a, c)
    assert torch.equal(c, a.min(0).values.expand(2, 64))


def test_no_map_atomic_add() -> None:
    """``c = a; a += 1`` through atomic_add's returned old values."""
    cons = [
        wc.WorkgroupConstraint(X, 64, 0),
        wc.WaveConstraint(X, 32),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={X: 32}),
    ]

    @wc.wave(cons)
    def atomic_add_one(a: Memory[X, wc.i32], c: Memory[X, wc.i32]):
        wc.write(wc.atomic_add(Register[X, wc.i32](1), a), c)

    a = torch.randint(0, 10, (128,), generator=torch.Generator().manual_seed(2)).int()
    before, c = a.clone(), torch.full_like(a, -77)
    wc.compile(atomic_add_one, {}, backend="emulator", cache=False)(a, c)
    assert torch.equal(c, before) and torch.equal(a, before + 1)


def test_dyn_atomic_add() -> None:
    """A histogram: ``counts[e] = #{n : ids[n] == e}`` by atomic adds into shared memory at indices read
    from memory, one workgroup over all ids."""
    cons = [
        wc.WorkgroupConstraint(N, 256, 0),
        wc.WaveConstraint(N, 64),
        wc.WorkgroupConstraint(E, E, None),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={N: 32, E: 32}),
    ]

    @wc.wave(cons)
    def histogram(ids: Memory[N, wc.i32], counts: Memory[E, wc.i32]):
        hist = wc.allocate((E,), wc.i32)
        wc.write(Register[E, wc.i32](0), hist)
        wc.atomic_add(Register[N, wc.i32](1), hist, mapping={E: wc.read(ids)})
        wc.barrier()
        wc.write(wc.read(hist), counts)

    ids = torch.randint(0, 32, (256,), generator=torch.Generator().manual_seed(3)).int()
    counts = torch.full((32,), -77, dtype=torch.int32)
    wc.compile(histogram, {E: 32}, backend="emulator", cache=False)(ids, counts)
    assert torch.equal(counts, torch.bincount(ids, minlength=32).int())
