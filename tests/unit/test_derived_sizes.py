"""Unit tier: derived sizes in ``subs`` (a dimension whose size is an expression of other symbols, such as
the keys ``N = P * PAGE`` a paged kernel walks) and batch-indexed scalar reads (``seq_lens[b]``)."""

from __future__ import annotations

import pytest
import sympy

import wavec as wc
from wavec.errors import ConstraintError
from wavec.frontend.constraints import ConstraintSet
from wavec.kernels.decode import BLOCK_M, BLOCK_N, KVH, QL, M, N
from wavec.kernels.paged_attention import P, make_paged_attention, paged_subs


def test_derived_size_resolves_against_integer_subs_and_stays_out_of_the_launch_constants() -> None:
    kernel = make_paged_attention(wc.f16, group=4, page=16)
    subs = paged_subs(64, 4, 16, 64, 1)
    cs = ConstraintSet(kernel.constraints, subs)
    assert cs.resolve(N) == 16 * P and cs.resolve(M) == 4 * QL
    assert cs.trip_count(N) == sympy.ceiling(16 * P / 64)
    assert cs.grid({})[0] == sympy.ceiling(4 * QL / 16)
    k = wc.compile(kernel, subs, target="sm_80", backend="emulator", cache=False)
    assert "M" not in k.metadata.constants and "N" not in k.metadata.constants
    assert dict(k.metadata.static_symbols)["BLOCK_N"] == 64 and "N" not in dict(k.metadata.static_symbols)


def test_derived_sizes_may_use_other_subs_but_not_each_other() -> None:
    kernel = make_paged_attention(wc.f16, group=2, page=32)
    g = wc.sym.G
    cs = ConstraintSet(kernel.constraints, {**paged_subs(64, 2, 32, 64, 1), g: 2, M: QL * g})
    assert cs.resolve(M) == 2 * QL
    with pytest.raises(ConstraintError, match=r"subs\[M\] = N\*QL: a derived size may not refer to another"):
        ConstraintSet(kernel.constraints, {**paged_subs(64, 2, 32, 64, 1), M: QL * N})
    with pytest.raises(ConstraintError, match="symbol values must be positive 32-bit integers"):
        ConstraintSet(kernel.constraints, {BLOCK_M: 16, BLOCK_N: 0, KVH: 2})
    with pytest.raises(ConstraintError, match=r"subs\[M\] = G/2 = 1/2: sizes must be positive 32-bit integers"):
        ConstraintSet(kernel.constraints, {**paged_subs(64, 2, 32, 64, 1), g: 1, M: g / 2})
