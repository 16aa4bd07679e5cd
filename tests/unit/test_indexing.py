"""Unit tier: the index algebra (``IndexSeq``), layouts and the MMA operand layouts (DESIGN §3).

Every expectation here is computed independently of wavec: from the PTX ISA fragment tables in
``docs/toolchain.md`` and from the CDNA3 ISA's MFMA register layouts, written as plain integer formulas.
"""

from __future__ import annotations

import itertools
import math

import pytest
import sympy

from wavec.indexing import LANE, IndexSeq, Layout, MMAType, broadcast_positions, mma_layout
from wavec.indexing.symbols import WAVE, WORKGROUP, induction_symbol, shape_symbol

M, N, K = shape_symbol("M"), shape_symbol("N"), shape_symbol("K")
floor, Mod = sympy.floor, sympy.Mod
lane = LANE


# ----- IndexSeq ---------------------------------------------------------------------------------------


def test_levels_drop_count_one_and_keep_order() -> None:
    s = IndexSeq(0, ((1, 5), (2, 1), (1, 3), (2, 8)))
    assert s.levels == ((2, 1), (2, 8))
    assert IndexSeq(lane, ((1, 4),)).levels == ()
    # equal sets of levels compare equal once count-1 levels are dropped
    assert s.equals(IndexSeq(0, ((2, 1), (2, 8))))
    assert IndexSeq(lane, ((1, 7),)).equals(IndexSeq(lane))


@pytest.mark.parametrize("levels", [((0, 1),), ((2, 0),), ((-1, 1),), ((2, -8),)])
def test_levels_reject_non_positive(levels) -> None:
    with pytest.raises(ValueError):
        IndexSeq(0, levels)


def test_levels_accept_integral_sympy_numbers() -> None:
    s = IndexSeq(0, ((sympy.Integer(4), sympy.Integer(2)),))
    assert s.levels == ((4, 2),) and all(type(x) is int for x in s.levels[0])


@pytest.mark.parametrize(
    "levels,count,span",
    [
        ((), 1, 1),
        (((4, 1),), 4, 4),
        (((2, 1), (2, 8)), 4, 10),
        (((4, 1), (4, 8)), 16, 28),
        (((3, 5), (2, 100)), 6, 111),
    ],
)
def test_count_and_span(levels, count, span) -> None:
    s = IndexSeq(lane, levels)
    assert s.count == count
    assert s.span == span
    assert len(s.offsets()) == count


def test_offsets_innermost_fastest() -> None:
    assert IndexSeq(0, ((2, 1), (2, 8))).offsets() == [0, 1, 8, 9]
    assert IndexSeq(0, ((3, 1), (2, 10))).offsets() == [0, 1, 2, 10, 11, 12]
    assert IndexSeq(0, ((2, 100), (3, 1))).offsets() == [0, 100, 1, 101, 2, 102]


def test_elements_for_concrete_lanes() -> None:
    s = IndexSeq(4 * floor(lane / 16) + 3 * WAVE[0], ((4, 1),))
    for l_, w in itertools.product(range(64), range(3)):
        base = 4 * (l_ // 16) + 3 * w
        assert s.elements({lane: l_, WAVE[0]: w}) == [base, base + 1, base + 2, base + 3]


def test_nvidia_m16n8k16_a_k_coordinates() -> None:
    """DESIGN §3: lane l holds the K coordinates 2*(l%4) + {0, 1, 8, 9}."""
    s = IndexSeq(2 * Mod(lane, 4), ((2, 1), (2, 8)))
    assert s.count == 4
    for l_ in range(32):
        assert s.elements({lane: l_}) == [2 * (l_ % 4) + d for d in (0, 1, 8, 9)]
    # together the 4 lanes of a group cover K = 0..15 exactly once
    covered = sorted(x for l_ in range(4) for x in s.elements({lane: l_}))
    assert covered == list(range(16))


@pytest.mark.parametrize(
    "a,b",
    [
        (2 * floor(lane / 4) * 3, 6 * floor(lane / 4)),
        (lane + 8 - 8, lane),
        (2 * (Mod(lane, 4) + 4), 2 * Mod(lane, 4) + 8),
        (32 * WAVE[0] + 64 * WORKGROUP[0] + floor(lane / 4), floor(lane / 4) + 64 * WORKGROUP[0] + 32 * WAVE[0]),
    ],
)
def test_equal_starts_are_proved(a, b) -> None:
    assert IndexSeq(a, ((2, 8),)).equals(IndexSeq(b, ((2, 8),)))
    assert IndexSeq(b, ((2, 8),)).equals(IndexSeq(a, ((2, 8),)))


@pytest.mark.parametrize(
    "a,b",
    [
        (2 * floor(lane / 4), floor(lane / 2)),  # differ at lane 2
        (floor(lane / 4), floor(lane / 4) + 1),
        (Mod(lane, 32), lane),  # agree on every lane of a 32-wide wave, but are not provably equal
        (Mod(lane, 4), Mod(lane, 8)),
        (WAVE[0], WAVE[1]),
    ],
)
def test_unequal_starts(a, b) -> None:
    assert not IndexSeq(a).equals(IndexSeq(b))
    assert not IndexSeq(b).equals(IndexSeq(a))


def test_equality_is_not_sampling() -> None:
    """Mod(l, 32) and l agree for every lane of a 32-wide wave; a proof must still not call them equal."""
    a, b = IndexSeq(Mod(lane, 32)), IndexSeq(lane)
    assert all(a.elements({lane: x}) == b.elements({lane: x}) for x in range(32))
    assert not a.equals(b)


def test_equal_starts_different_levels_are_unequal() -> None:
    assert not IndexSeq(lane, ((2, 1), (2, 8))).equals(IndexSeq(lane, ((2, 8), (2, 1))))
    assert not IndexSeq(lane, ((4, 1),)).equals(IndexSeq(lane, ((4, 2),)))
    assert not IndexSeq(lane, ((4, 1),)).equals(IndexSeq(lane))


def test_equality_proves_division_identity() -> None:
    assert IndexSeq(4 * floor(lane / 4) + Mod(lane, 4)).equals(IndexSeq(lane))


def test_equality_proves_nested_floor() -> None:
    assert IndexSeq(floor(floor(lane / 4) / 2)).equals(IndexSeq(floor(lane / 8)))


def test_offset_and_subs() -> None:
    s = IndexSeq(2 * Mod(lane, 4), ((2, 1), (2, 8)))
    t = s.offset(16 * induction_symbol(K) + 8)
    assert t.levels == s.levels
    assert sympy.simplify(t.start - (2 * Mod(lane, 4) + 16 * induction_symbol(K) + 8)) == 0
    for l_, i in itertools.product(range(32), range(3)):
        assert t.elements({lane: l_, induction_symbol(K): i}) == [x + 16 * i + 8 for x in s.elements({lane: l_})]
    u = t.subs({induction_symbol(K): 2})
    assert u.equals(s.offset(40))
    assert not u.equals(s.offset(41))


# ----- MMA layouts ------------------------------------------------------------------------------------


def _nv_a(l_: int, p: int) -> tuple[int, int]:
    g, t, r, e = l_ // 4, l_ % 4, p // 2, p % 2
    return g + 8 * (r % 2), 2 * t + 8 * (r // 2) + e


def _nv_b(l_: int, p: int) -> tuple[int, int]:  # (n, k)
    g, t, r, e = l_ // 4, l_ % 4, p // 2, p % 2
    return g, 2 * t + 8 * r + e


def _nv_c(l_: int, p: int) -> tuple[int, int]:
    g, t, r, e = l_ // 4, l_ % 4, p // 2, p % 2
    return g + 8 * r, 2 * t + e


def _amd16_ab(l_: int, j: int) -> tuple[int, int]:  # A (m, k); B (n, k)
    return l_ % 16, 4 * (l_ // 16) + j


def _amd16_c(l_: int, j: int) -> tuple[int, int]:
    return 4 * (l_ // 16) + j, l_ % 16


def _amd32_ab(l_: int, j: int) -> tuple[int, int]:
    return l_ % 32, 4 * (l_ // 32) + j


def _amd32_c(l_: int, j: int) -> tuple[int, int]:
    return 8 * (j // 4) + 4 * (l_ // 32) + j % 4, l_ % 32


def _nv_i8_a(l_: int, p: int) -> tuple[int, int]:  # PTX ISA m16n8k32 .s8: a_i, row g (+8 for a4..7, a12..15)
    g, t, i = l_ // 4, l_ % 4, p
    return g + 8 * ((i // 4) % 2), 4 * t + (i % 4) + 16 * (i // 8)


def _nv_i8_b(l_: int, p: int) -> tuple[int, int]:  # b_i: k = 4t + (i % 4) (+16 for b4..7), n = g
    g, t, i = l_ // 4, l_ % 4, p
    return g, 4 * t + (i % 4) + 16 * (i // 4)


def _nv_tf32_a(l_: int, p: int) -> tuple[int, int]:  # PTX ISA m16n8k8 .tf32: a0 (g, t), a1 (g+8, t), a2 (g, t+4)
    g, t = l_ // 4, l_ % 4
    return g + 8 * (p % 2), t + 4 * (p // 2)


def _nv_tf32_b(l_: int, p: int) -> tuple[int, int]:  # b0 (k = t), b1 (k = t + 4), n = g
    return l_ // 4, l_ % 4 + 4 * p


def _amd16x32_ab(l_: int, j: int) -> tuple[int, int]:  # v_mfma_i32_16x16x32_i8: 8 K elements per lane
    return l_ % 16, 8 * (l_ // 16) + j


EXPECTED = {
    MMAType.NV_F32_16x8x16_F16: {"a": _nv_a, "b": _nv_b, "c": _nv_c},
    MMAType.NV_F32_16x8x16_BF16: {"a": _nv_a, "b": _nv_b, "c": _nv_c},
    MMAType.NV_I32_16x8x32_I8: {"a": _nv_i8_a, "b": _nv_i8_b, "c": _nv_c},
    MMAType.NV_F32_16x8x8_TF32: {"a": _nv_tf32_a, "b": _nv_tf32_b, "c": _nv_c},
    MMAType.F32_16x16x16_F16: {"a": _amd16_ab, "b": _amd16_ab, "c": _amd16_c},
    MMAType.F32_32x32x8_F16: {"a": _amd32_ab, "b": _amd32_ab, "c": _amd32_c},
    MMAType.I32_16x16x32_I8: {"a": _amd16x32_ab, "b": _amd16x32_ab, "c": _amd16_c},
}


def test_every_mma_type_has_expectations() -> None:
    # warpgroup types (wgmma: N from the wave tile, A/B as descriptors) are checked in test_wgmma_layouts.py
    assert set(EXPECTED) == {t for t in MMAType if t.spec.group_waves == 1}


def _extent(t: MMAType, role: str) -> tuple[int, int]:
    s = t.spec
    return {"a": (s.m, s.k), "b": (s.n, s.k), "c": (s.m, s.n)}[role]


def _dims(role: str) -> tuple:
    return {"a": (M, K), "b": (N, K), "c": (M, N)}[role]


def _lane_coords(layout: Layout, d0, d1, l_: int) -> list[tuple[int, int]]:
    s0 = int(layout.seq(d0).start.subs(lane, l_))
    s1 = int(layout.seq(d1).start.subs(lane, l_))
    return [(s0 + off[d0], s1 + off[d1]) for off in layout.positions()]


CASES = [(t, r) for t in EXPECTED for r in ("a", "b", "c")]


@pytest.mark.parametrize("mma,role", CASES, ids=[f"{t.name}-{r}" for t, r in CASES])
def test_mma_layout_covers_tile_exactly_once(mma: MMAType, role: str) -> None:
    d0, d1 = _dims(role)
    layout = mma_layout(mma, role, d0, d1)
    rows, cols = _extent(mma, role)
    seen = [c for l_ in range(mma.spec.threads) for c in _lane_coords(layout, d0, d1, l_)]
    assert len(seen) == rows * cols
    assert sorted(seen) == sorted(itertools.product(range(rows), range(cols)))
    assert layout.tile == (rows, cols)


@pytest.mark.parametrize("mma,role", CASES, ids=[f"{t.name}-{r}" for t, r in CASES])
def test_mma_layout_flat_order_matches_isa(mma: MMAType, role: str) -> None:
    d0, d1 = _dims(role)
    layout = mma_layout(mma, role, d0, d1)
    shape = {"a": mma.spec.a_shape, "b": mma.spec.b_shape, "c": mma.spec.c_shape}[role]
    assert layout.size == math.prod(shape)
    want = EXPECTED[mma][role]
    for l_ in range(mma.spec.threads):
        got = _lane_coords(layout, d0, d1, l_)
        assert got == [want(l_, p) for p in range(layout.size)], f"lane {l_}"


def test_mma_layout_dims_follow_arguments() -> None:
    lay = mma_layout(MMAType.NV_F32_16x8x16_F16, "b", N, K)
    assert lay.dims == (N, K)
    x, y = sympy.symbols("X Y", integer=True, positive=True)
    assert mma_layout(MMAType.NV_F32_16x8x16_F16, "b", x, y).dims == (x, y)


def test_mma_layout_rejects_unknown_role() -> None:
    with pytest.raises(ValueError):
        mma_layout(MMAType.NV_F32_16x8x16_F16, "d", M, N)


def test_nv_a_k_seq_is_the_design_example() -> None:
    lay = mma_layout(MMAType.NV_F32_16x8x16_F16, "a", M, K)
    assert lay.seq(K).equals(IndexSeq(2 * Mod(lane, 4), ((2, 1), (2, 8))))
    assert lay.seq(M).equals(IndexSeq(floor(lane / 4), ((2, 8),)))


# ----- Layout -----------------------------------------------------------------------------------------


def _grid_layout() -> Layout:
    """A default-ordered layout: M holds 2 rows 4 apart, N holds 4 contiguous columns."""
    return Layout.make((M, N), (IndexSeq(floor(lane / 8), ((2, 4),)), IndexSeq(4 * Mod(lane, 8), ((4, 1),))), (8, 32))


def test_layout_rejects_bad_order() -> None:
    seqs = (IndexSeq(0, ((2, 8),)), IndexSeq(0, ((2, 1),)))
    with pytest.raises(ValueError):
        Layout.make((M, N), seqs, (16, 8), order=((M, 0),))
    with pytest.raises(ValueError):
        Layout.make((M, N), seqs, (16, 8), order=((M, 0), (N, 0), (N, 0)))
    with pytest.raises(ValueError):
        Layout.make((M, N), seqs, (16,))


def test_default_order_is_row_major_outer_levels_first() -> None:
    lay = Layout.make((M, N), (IndexSeq(0, ((2, 1), (3, 10))), IndexSeq(0, ((4, 1),))), (32, 4))
    assert lay.order == ((M, 1), (M, 0), (N, 0))
    got = [(p[M], p[N]) for p in lay.positions()]
    want = [(10 * i1 + i0, j) for i1 in range(3) for i0 in range(2) for j in range(4)]
    assert got == want


def test_layout_restrict() -> None:
    lay = _grid_layout()
    n_only = lay.restrict((N,))
    assert n_only.dims == (N,) and n_only.tile == (32,) and n_only.order == ((N, 0),)
    assert n_only.seq(N).equals(lay.seq(N))
    assert n_only.size == 4
    # dims keep the layout's order whatever order they are asked in
    assert lay.restrict((N, M)).dims == (M, N)
    c = mma_layout(MMAType.F32_32x32x8_F16, "c", M, N).restrict((M,))
    assert c.order == ((M, 1), (M, 0)) and c.size == 16
    with pytest.raises(KeyError):
        lay.restrict((K,))


def _expected_broadcast(result: Layout, operand: Layout) -> list[int]:
    """Independently: operand position whose offsets agree with the result's on the operand's dims."""
    ops = operand.positions()
    out = []
    for pos in result.positions():
        matches = [q for q, o in enumerate(ops) if all(o[d] == pos[d] for d in operand.dims)]
        assert len(matches) == 1
        out.append(matches[0])
    return out


@pytest.mark.parametrize("layout_name", ["grid", "nv_c", "nv_a", "amd32_c"])
@pytest.mark.parametrize("keep", ["first", "second"])
def test_broadcast_positions(layout_name: str, keep: str) -> None:
    result = {
        "grid": _grid_layout(),
        "nv_c": mma_layout(MMAType.NV_F32_16x8x16_F16, "c", M, N),
        "nv_a": mma_layout(MMAType.NV_F32_16x8x16_F16, "a", M, N),
        "amd32_c": mma_layout(MMAType.F32_32x32x8_F16, "c", M, N),
    }[layout_name]
    dim = result.dims[0] if keep == "first" else result.dims[1]
    operand = result.restrict((dim,))
    got = broadcast_positions(result, operand)
    assert len(got) == result.size
    assert got == _expected_broadcast(result, operand)


def test_broadcast_positions_known_values() -> None:
    lay = _grid_layout()  # flat p = 4*i + j over M (2) x N (4)
    assert broadcast_positions(lay, lay.restrict((N,))) == [p % 4 for p in range(8)]
    assert broadcast_positions(lay, lay.restrict((M,))) == [p // 4 for p in range(8)]
    nv_a = mma_layout(MMAType.NV_F32_16x8x16_F16, "a", M, K)  # order K.1 M.0 K.0
    assert broadcast_positions(nv_a, nv_a.restrict((M,))) == [(p // 2) % 2 for p in range(8)]
    assert broadcast_positions(nv_a, nv_a.restrict((K,))) == [2 * (p // 4) + p % 2 for p in range(8)]


def test_layout_offset_and_equals() -> None:
    lay = mma_layout(MMAType.NV_F32_16x8x16_F16, "c", M, N)
    moved = lay.offset({M: 16 * WORKGROUP[0], N: 8})
    assert sympy.simplify(moved.seq(M).start - (floor(lane / 4) + 16 * WORKGROUP[0])) == 0
    assert sympy.simplify(moved.seq(N).start - (2 * Mod(lane, 4) + 8)) == 0
    assert moved.seq(M).levels == lay.seq(M).levels and moved.order == lay.order
    assert not moved.equals(lay)
    assert moved.equals(lay.offset({N: 4}).offset({M: 16 * WORKGROUP[0], N: 4}))
    assert lay.offset({K: 5}).equals(lay)  # dims the layout does not have are ignored
    other_order = Layout(lay.dims, lay.seqs, lay.tile, ((N, 0), (M, 0)))
    assert not other_order.equals(lay)
