"""Ports of Wave's ``tests/kernel/e2e/test_scalar.py`` and ``test_bounds_check.py``
(docs/wave_ports.md): scalar launch arguments broadcast into a register expression, a copy masked by a
scalar threshold on the element's coordinate, copies at sizes no tile divides, and an out-of-bounds
gathered index reported by the emulator; every output element checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec import Memory, Register
from wavec.errors import OutOfBoundsError
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

SUBS = {BLOCK_M: 4, BLOCK_N: 32}


@pytest.mark.parametrize("dtype", [wc.f32, wc.i32, wc.f16, wc.bf16])  # Wave takes f16 scalars too
def test_scalar_codegen(dtype) -> None:
    """``b = a + 3 * c + d`` with ``c``, ``d`` scalar arguments."""

    @wc.wave(rowwise_constraints(32, 1))
    def scalars(a: Memory[M, N, dtype], c: wc.Scalar[dtype], d: wc.Scalar[dtype], b: Memory[M, N, dtype]):
        e = Register[M, N, dtype](3) * wc.broadcast(c, (M, N))
        wc.write(wc.read(a) + e + wc.broadcast(d, (M, N)), b)

    td = dtype.torch()
    g = torch.Generator().manual_seed(1)
    a = torch.randint(-50, 50, (13, 70), generator=g).to(td)
    b = torch.full_like(a, 77)
    wc.compile(scalars, SUBS, backend="emulator", cache=False)(a, 2, 5, b)
    assert torch.equal(b, a + 11)


def test_scalar_cond_copy() -> None:
    """``b = a`` where the column is below a threshold of 12, else 0."""

    @wc.wave(rowwise_constraints(32, 1))
    def cond_copy(a: Memory[M, N, wc.f16], b: Memory[M, N, wc.f16]):
        v = wc.read(a)
        wc.write(wc.where(wc.index(N)[None, :] < 12, v, v * 0.0), b)

    a = torch.randn(13, 70, generator=torch.Generator().manual_seed(2)).half()
    b = torch.full_like(a, float("nan"))
    wc.compile(cond_copy, SUBS, backend="emulator", cache=False)(a, b)
    want = a.clone()
    want[:, 12:] = 0
    assert torch.equal(b, want)


def test_bound_check() -> None:
    """Wave's bounds-checked copy: tiles of 4 x 32 over 111 x 813, the partial tiles masked."""

    @wc.wave(rowwise_constraints(32, 1))
    def copy(a: Memory[M, N, wc.f16], b: Memory[M, N, wc.f16]):
        wc.write(wc.read(a), b)

    a = torch.randn(111, 813, generator=torch.Generator().manual_seed(3)).half()
    b = torch.full_like(a, float("nan"))
    wc.compile(copy, SUBS, backend="emulator", cache=False)(a, b)
    assert torch.equal(a, b)


def test_bound_check_failure() -> None:
    """A read past the end (row ``m + 1`` of the last row) is an error naming the op and the bound, not a
    silent read (Wave traps on the device and skips its test)."""

    @wc.wave(rowwise_constraints(32, 1))
    def shifted(a: Memory[M, N, wc.f16], b: Memory[M, N, wc.f16]):
        wc.write(wc.read(a, mapping={M: wc.index(M) + 1 + wc.index(N) * 0}), b)

    a = torch.randn(5, 40, generator=torch.Generator().manual_seed(4)).half()
    with pytest.raises(OutOfBoundsError, match=r"index 5 in dim 0 \(size 5\)"):
        wc.compile(shifted, SUBS, backend="emulator", cache=False)(a, torch.empty_like(a))
