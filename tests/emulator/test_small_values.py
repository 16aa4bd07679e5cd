"""Emulator tier, issue #20 item 2 (values part): values with fewer elements than the lanes of a wave, and
wave tiles smaller than ``vector_shapes``, compile and compute correctly by replication.

A default layout spreads lanes over ``vector_shapes`` from the fastest dim; lanes past the value's
elements hold copies of them (their coordinates wrap), and ``codegen/replicas.py`` lets one replica store
(the emulator's race checker would report two lanes storing one address).  A wave tile smaller than
``vector_shapes`` takes the tile itself as its instruction tile.  Row-wise ops, a row sum and a row max are
compared with torch on fresh random inputs, outputs poisoned with NaN; NVIDIA (32 lanes) and gfx942 (64)."""

from __future__ import annotations

import pytest
import torch
from test_kernels_emulated import generator

import wavec as wc
from tests.small_kernels import CASES, N, rows_kernel


@pytest.mark.parametrize("target,threads", [("sm_80", 32), ("gfx942", 64)], ids=["nv", "amd"])
@pytest.mark.parametrize("wm,vm,vn,waves", CASES, ids=[f"wave{c[0]}-vs{c[1]}x{c[2]}-w{c[3]}" for c in CASES])
def test_small_values_replicate(wm: int, vm: int, vn: int, waves: int, target: str, threads: int) -> None:
    kernel = wc.compile(rows_kernel(wm, vm, vn, waves, threads), {N: vn}, backend="emulator", target=target)
    g, seed = generator()
    m = 3 * wm * waves + 1  # a ragged last workgroup
    x, v = torch.randn(m, vn, generator=g), torch.randn(vn, generator=g)
    o, s, mx = torch.full((m, vn), float("nan")), torch.full((m,), float("nan")), torch.full((m,), float("nan"))
    kernel(x, v, o, s, mx)
    y = x * v + 1.0
    what = f"{target} wave tile {wm}, vector_shapes {vm}x{vn}, {waves} waves (seed {seed})"
    assert torch.equal(o, y), what
    assert torch.allclose(s, y.double().sum(1).float(), rtol=1e-6, atol=1e-6), what
    assert torch.equal(mx, y.max(1).values), what
