"""Lowering of ``wc.topk`` (``frontend/ops_reduce.py``): the argmax keys of the k largest elements of a row.

Requires: an expanded ``TopK`` whose operands are all of the thread's instruction tiles along ``dim``
(f32 or i32 values; f16/bf16 were widened by the frontend), its result laid out by
``infer_indices.topk_layout`` (every thread of a row holds its k keys, largest first).
Guarantees: key ``j`` of a row is the ``j``-th largest of the row's argmax keys (``reductions.arg_keys``:
order bits high, ``~index`` low), so the winners are sorted by value, the lower index first on ties, and
NaN above every number; keys are distinct, so each is taken once.

Selection by knock-out: k rounds of a max over the thread's keys and a ``gpu.shuffle xor`` butterfly over
the lane bits along ``dim``; each round's winner is replaced by the minimum key in the thread that held it
(O(k * n) per thread; the row's keys never leave registers).  When waves split ``dim``, each wave's k
winners go to shared memory (between two barriers, like the cross-wave reductions), the row's lanes take
them round-robin (lanes past the end take the minimum key) and select again: two barriers in
all, whatever k.
"""

from __future__ import annotations

import math

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, memref, vector

from ..frontend import dtypes as dt
from ..frontend.ops_reduce import TopK
from ..frontend.tracing import arg_nodes
from ..indexing import LANE, WAVE, Layout
from ..passes.schema import Kwargs
from .lowering import FunctionBuilder, rule, splat, vec_type
from .reductions import arg_keys, reduce_groups, reduced_lane_bits, shuffle, wave_axis

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


@rule(TopK)
def lower_topk(fb: FunctionBuilder, node: fx.Node) -> None:
    kw = Kwargs(node)
    dim, k_dim = kw.dim, kw.k_dim
    lout: Layout = node.meta["layout"]
    k = lout.tile_of(k_dim)
    tiles = arg_nodes(node)
    lin: Layout = tiles[0].meta["layout"]
    keys = [arg_keys(fb, fb.values[t], t.meta["layout"], dim, "argmax", t.meta["type"].dtype) for t in tiles]
    bits = reduced_lane_bits(lin, dim, fb.cs.threads_per_wave)
    winners = []
    for qs in reduce_groups(lin, lout.restrict([d for d in lout.dims if d != k_dim])):
        pieces = [v if qs == list(range(lin.size)) else vector.shuffle(v, v, qs) for v in keys]
        winners.append(_select(fb, pieces, k, bits))
    axis = wave_axis(fb, dim)
    if axis is not None:
        winners = _across_waves(fb, winners, k, bits, axis)
    fb.values[node] = vector.from_elements(vec_type(lout.size, dt.i64), [m for ws in winners for m in ws])
