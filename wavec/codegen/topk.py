"""Lowering of ``wc.topk`` (``frontend/ops_reduce.py``): the argmax keys of the k largest elements of a row.

Requires: an expanded ``TopK`` whose operands are all of the thread's instruction tiles along ``dim``
(f32 or i32 values; f16/bf16 were widened by the frontend), its result laid out by
``infer_indices.topk_layout`` (every thread of a row holds its k keys, largest first).
Guarantees: key ``j`` of a row is the ``j``-th largest of the row's argmax keys (``reductions.arg_keys``:
order bits high, ``~index`` low), so the winners are sorted by value, the lower index first on ties, and
NaN above every number; keys are distinct, so each is taken once.  A ``TopKMerge`` (operands: a
``TopK``'s keys and a carried values/indices pair in the same layout, the pair sorted) gives the k
largest of both, sorted the same way.

Selection by knock-out: k rounds of a max over the thread's keys and a ``gpu.shuffle xor`` butterfly over
the lane bits along ``dim``; each round's winner is replaced by the minimum key in the thread that held it
(O(k * n) per thread; the row's keys never leave registers).  When waves split ``dim``, each wave's k
winners go to shared memory (between two barriers, like the cross-wave reductions), the row's lanes take
them round-robin (lanes past the end take the minimum key) and select again: two barriers in
all, whatever k.  Elements past the end of ``dim`` (a ragged last tile) take the minimum key.

``TopKMerge`` (``wc.topk(..., carry=...)``, a row walked in loop tiles): every thread holds its rows' k
tile winners and k carried keys, both sorted, so the merge is thread-local: a bitonic merge (the halves'
pairwise max, then ``log2(k)`` compare-exchange stages) instead of k more knock-out rounds.
"""

from __future__ import annotations

import math

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, memref, vector

from ..frontend import dtypes as dt
from ..frontend.ops_reduce import TopK, TopKMerge
from ..frontend.tracing import arg_nodes
from ..indexing import LANE, WAVE, Layout
from ..passes.schema import Kwargs
from .lowering import FunctionBuilder, rule, splat, vec_type
from .reductions import element_indices, pack_keys, reduce_groups, reduced_lane_bits, shuffle, wave_axis

CK = vector.CombiningKind
KNOCKED_OUT = -(1 << 63)  # below every key: order bits >= 0x807fffff (-inf) or an i32's minimum, index bits


def _select(fb: FunctionBuilder, pieces: list[ir.Value], k: int, bits: list[int]) -> list[ir.Value]:
    """The k largest keys of ``pieces`` (vectors of i64 keys) over the lanes along ``bits``, largest first."""
    i64 = ir.IntegerType.get_signless(64)
    width = arith.constant(ir.IntegerType.get_signless(32), fb.cs.threads_per_wave)
    winners = []
    for j in range(k):
        m = None
        for p in pieces:
            r = vector.reduction(i64, CK.MAXSI, p)
            m = r if m is None else arith.maxsi(m, r)
        assert m is not None
        for b in bits:
            m = arith.maxsi(m, shuffle(m, b, width, gpu.ShuffleMode.XOR))
        winners.append(m)
        if j + 1 < k:
            out = []
            for p in pieces:
                vt = ir.VectorType(p.type)
                hit = arith.cmpi(arith.CmpIPredicate.eq, p, vector.broadcast(vt, m))
                out.append(arith.select(hit, splat(vt, dt.i64, KNOCKED_OUT), p))
            pieces = out
    return winners


def _across_waves(fb: FunctionBuilder, winners: list[list[ir.Value]], k: int, bits: list[int], axis: int) -> list:
    """The k largest of every wave's k winners along ``axis`` (see the module docstring)."""
    cs = fb.cs
    w = cs.waves_per_axis
    others = [a for a in range(3) if a != axis]
    other = WAVE[others[0]] + WAVE[others[1]] * w[others[0]]
    lanes, row = 1 << len(bits), w[axis] * k  # the row's candidates: every wave's k winners
    mtype = ir.MemRefType.parse(
        f"memref<{cs.waves // w[axis]}x{len(winners) * row}xi64, #gpu.address_space<workgroup>>"
    )
    buf = memref.alloc(mtype, [], [], alignment=16)
    gpu.barrier()
    for g, ws in enumerate(winners):
        mine = fb.index(g * row + WAVE[axis] * k)
        vector.store(vector.from_elements(vec_type(k, dt.i64), ws), buf, [fb.index(other), mine])
    gpu.barrier()
    rank = sum(sympy.Mod(sympy.floor(LANE / b), 2) * (1 << t) for t, b in enumerate(bits))
    out = []
    for g in range(len(winners)):
        cands = []
        for i in range(math.ceil(row / lanes)):
            c = rank + lanes * i
            got = memref.load(buf, [fb.index(other), fb.index(g * row + sympy.Min(c, row - 1))])
            if lanes * (i + 1) > row:  # the last candidates: lanes past the row's end take the minimum key
                past = arith.cmpi(arith.CmpIPredicate.uge, fb.index(c), fb.index(row))
                got = arith.select(past, arith.constant(ir.IntegerType.get_signless(64), KNOCKED_OUT), got)
            cands.append(got)
        out.append(_select(fb, [vector.from_elements(vec_type(len(cands), dt.i64), cands)], k, bits))
    return out


def _tile_keys(fb: FunctionBuilder, t: fx.Node, dim) -> ir.Value:
    """The keys of one input tile; where the tile may run past the end of ``dim`` (a ragged last tile of
    a loop or of the workgroups), the elements past it take the minimum key: they never win."""
    lin: Layout = t.meta["layout"]
    index = element_indices(fb, lin, dim)
    keys = pack_keys(fb.values[t], index, lin.size, "argmax", t.meta["type"].dtype)
    size, extent = fb.cs.resolve(dim), fb.cs.workgroup_extent(dim)
    if size.is_Integer and extent is not None and int(size) % extent == 0:
        return keys
    vi32 = vec_type(lin.size, dt.i32)
    bound = vector.broadcast(vi32, arith.index_cast(ir.IntegerType.get_signless(32), fb.index(size)))
    inside = arith.cmpi(arith.CmpIPredicate.ult, index, bound)
    return arith.select(inside, keys, splat(vec_type(lin.size, dt.i64), dt.i64, KNOCKED_OUT))


@rule(TopK)
def lower_topk(fb: FunctionBuilder, node: fx.Node) -> None:
    kw = Kwargs(node)
    dim, k_dim = kw.dim, kw.k_dim
    lout: Layout = node.meta["layout"]
    k = lout.tile_of(k_dim)
    tiles = arg_nodes(node)
    lin: Layout = tiles[0].meta["layout"]
    keys = [_tile_keys(fb, t, dim) for t in tiles]
    bits = reduced_lane_bits(lin, dim, fb.cs.threads_per_wave)
    # a wave's part of the row shorter than k (a loop tile merged with a carry): the rounds past its
    # length would only find the minimum key
    rounds = min(k, fb.cs.wave_extent(dim) or k)
    rest = [arith.constant(ir.IntegerType.get_signless(64), KNOCKED_OUT)] * (k - rounds)
    winners = []
    for qs in reduce_groups(lin, lout.restrict([d for d in lout.dims if d != k_dim])):
        pieces = [v if qs == list(range(lin.size)) else vector.shuffle(v, v, qs) for v in keys]
        winners.append(_select(fb, pieces, rounds, bits) + rest)
    axis = wave_axis(fb, dim)
    if axis is not None:
        winners = _across_waves(fb, winners, k, bits, axis)
    fb.values[node] = vector.from_elements(vec_type(lout.size, dt.i64), [m for ws in winners for m in ws])


def _rows(lout: Layout, k_dim) -> list[list[int]]:
    """The thread's flat positions of each of its rows, in the order of the k coordinate."""
    rows: dict[tuple, list[tuple[int, int]]] = {}
    for p, off in enumerate(lout.positions()):
        rows.setdefault(tuple(v for d, v in off.items() if d != k_dim), []).append((off[k_dim], p))
    return [[p for _, p in sorted(r)] for r in rows.values()]


def _compare_exchange(v: ir.Value, size: int, stride: int) -> ir.Value:
    """One stage of a bitonic sorting network over the ``size`` keys of ``v``: each pair ``(i, i + stride)``
    within blocks of ``2 * stride`` gets the larger key first."""
    lo = [i for i in range(size) if not i & stride]
    a, b = vector.shuffle(v, v, lo), vector.shuffle(v, v, [i + stride for i in lo])
    big, small = arith.maxsi(a, b), arith.minsi(a, b)
    back = {i: j for j, i in enumerate(lo)} | {i + stride: len(lo) + j for j, i in enumerate(lo)}
    return vector.shuffle(big, small, [back[i] for i in range(size)])


def _merge_sorted(a: ir.Value, b: ir.Value, k: int) -> ir.Value:
    """The k largest of two vectors of k keys sorted largest first, largest first: padded to a power of two
    ``p`` with the minimum key, ``a`` then ``b`` reversed is bitonic; the pairwise max of its halves holds
    the ``p`` largest as a bitonic sequence, which ``log2(p)`` compare-exchange stages sort."""
    p = 1 << (k - 1).bit_length()
    pad = splat(vec_type(p, dt.i64), dt.i64, KNOCKED_OUT) if p > k else None
    if pad is not None:  # the k keys, then p - k of pad's (a shuffle numbers the second operand's from k)
        a = vector.shuffle(a, pad, list(range(p)))
        b = vector.shuffle(b, pad, list(range(p)))
    v = arith.maxsi(a, vector.shuffle(b, b, list(reversed(range(p)))))
    stride = p // 2
    while stride:
        v = _compare_exchange(v, p, stride)
        stride //= 2
    return vector.shuffle(v, v, list(range(k))) if p > k else v


@rule(TopKMerge)
def lower_topk_merge(fb: FunctionBuilder, node: fx.Node) -> None:
    """Each row's k winners merged with its k carried keys (both sorted: ``TopK``'s order, and the carry
    is a previous result or a constant init)."""
    keys, values, indices = arg_nodes(node)
    lout: Layout = node.meta["layout"]
    k_dim = Kwargs(node).k_dim
    carried = pack_keys(fb.values[values], fb.values[indices], lout.size, "argmax", values.meta["type"].dtype)
    merged = []
    for row in _rows(lout, k_dim):
        mine = vector.shuffle(fb.values[keys], fb.values[keys], row)
        theirs = vector.shuffle(carried, carried, row)
        merged.append((row, _merge_sorted(mine, theirs, len(row))))
    out = [None] * lout.size
    for row, v in merged:
        for j, p in enumerate(row):
            out[p] = vector.extract(v, [], [j])
    fb.values[node] = vector.from_elements(vec_type(lout.size, dt.i64), out)
