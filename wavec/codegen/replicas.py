"""Replicas: a value whose layout does not depend on some lane bits, or on the wave index of an axis with
several waves, is held identically by several threads (a rank-0 value by all of them, an ``[E]`` value by
every wave when waves split another dim).  A store or atomic of it happens once, from the replica whose
free lane bits and wave indices are 0: an atomic would otherwise count once per replica, and two threads
storing one shared address race.  A store of several runs (``piece``) spreads them over the replica
waves instead: run ``i`` from wave ``i mod W`` of the first replicated axis (one wave storing the 34
steps of 8 runs of the routing kernel's sentinel fill kept the other seven idle at the barrier after it).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import sympy
from iree.compiler import ir
from iree.compiler.dialects import arith

from ..indexing import LANE, THREAD, WAVE, Layout

if TYPE_CHECKING:
    from .lowering import FunctionBuilder


def coord_table(layout: Layout, lanes: int) -> list[tuple]:
    """Per lane, the start coordinates of every dim with the other hardware symbols at 0."""
    return list(_coord_table(tuple(s.start for s in layout.seqs), lanes))


@functools.lru_cache(maxsize=1024)
def _coord_table(starts: tuple, lanes: int) -> tuple[tuple, ...]:
    # memoised: a store guards each of its runs by one layout (the GEMM epilogue's 64 runs re-derived the
    # same table 64 times, 1 s of a 2 s compile)
    others = {x: 0 for e in starts for x in sympy.sympify(e).free_symbols if x != LANE}
    fns = [sympy.lambdify(LANE, sympy.sympify(e).subs(others), "math") for e in starts]
    return tuple(tuple(int(f(lane)) for f in fns) for lane in range(lanes))


def replica_guard(
    fb: FunctionBuilder, layout: Layout, lanes_only: bool = False, piece: int | None = None
) -> ir.Value | None:
    """True in the one thread of each group of threads holding the same elements (None: no replicas);
    ``lanes_only``: among the lanes of each wave; ``piece``: the run a store stores, whose replica wave
    is ``piece mod W`` along the first replicated wave axis (``W`` its waves)."""
    cs = fb.cs
    free = set().union(*(sympy.sympify(s.start).free_symbols for s in layout.seqs))
    if THREAD in free:  # a workgroup-distributed copy layout: every thread its own elements
        return None
    table = coord_table(layout, cs.lanes)
    mask = 0
    bit = 1
    while bit < cs.lanes:
        if all(table[lane] == table[lane ^ bit] for lane in range(cs.lanes)):
            mask |= bit
        bit *= 2
    waves = tuple(a for a in range(3) if cs.waves_per_axis[a] > 1 and WAVE[a] not in free and not lanes_only)
    if not mask and not waves:
        return None

    owner = [piece % cs.waves_per_axis[a] if piece is not None and i == 0 else 0 for i, a in enumerate(waves)]

    def build() -> ir.Value:
        conds = [arith.cmpi(arith.CmpIPredicate.eq, fb.symbols[WAVE[a]], fb.index(w)) for a, w in zip(waves, owner)]
        if mask:
            bits = arith.andi(fb.symbols[LANE], fb.index(mask))
            conds.append(arith.cmpi(arith.CmpIPredicate.eq, bits, fb.index(0)))
        out = conds[0]
        for c in conds[1:]:
            out = arith.andi(out, c)
        return out

    return fb.cached(("replica", mask, waves, tuple(owner)), 0, build)


def guarded(cond: ir.Value | None, guard: ir.Value | None) -> ir.Value | None:
    """The conjunction of two optional conditions."""
    if cond is None or guard is None:
        return cond if guard is None else guard
    return arith.andi(cond, guard)
