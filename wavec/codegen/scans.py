"""Lowering of ``wc.scan`` / ``wc.cumsum`` (``frontend/ops_reduce.py``): prefix add, max or min along a dim.

Requires: an expanded ``Scan`` of f32, i32 or i64 values whose wave tile of the dim is one instruction
tile, the dim's lanes in scan order (lane rank ``(lane // stride) % n`` holds a contiguous run).
Guarantees: each element holds the combine of the elements before it (exclusive) or up to it (inclusive)
along the dim within the workgroup's tile.  Each thread scans its elements along the dim, the lanes of
a wave scan their totals with ``gpu.shuffle up`` (Hillis-Steele: log2(lanes) steps), and when waves split
the dim each wave's total goes through shared memory (between barriers, like the cross-wave reductions).
The lanes' exclusive prefix is ``inclusive - total`` for integer sums (exact) and one more ``shuffle up``
of the inclusive prefix otherwise (max and min have no inverse; float sums would round twice).
"""

from __future__ import annotations

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, memref, vector

from ..errors import CodegenError
from ..frontend import dtypes as dt
from ..frontend.ops_reduce import Scan
from ..frontend.tracing import arg_node
from ..indexing import LANE, WAVE, Layout
from ..passes.schema import Kwargs
from .lowering import FunctionBuilder, elem_type, rule, vec_type
from .reductions import shuffle
from .replicas import coord_table

_FLOAT = {"add": arith.addf, "max": arith.maximumf, "min": arith.minimumf}
_INT = {"add": arith.addi, "max": arith.maxsi, "min": arith.minsi}


class _Combine:
    """The scan's combine and identity for one dtype."""

    def __init__(self, kind: str, dtype: dt.DType) -> None:
        self.kind, self.dtype = kind, dtype
        self.fn = (_FLOAT if dtype.is_float else _INT)[kind]

    def __call__(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.fn(a, b)

    def identity(self) -> ir.Value:
        et = elem_type(self.dtype)
        if self.kind == "add":
            return arith.constant(et, 0.0 if self.dtype.is_float else 0)
        sign = -1 if self.kind == "max" else 1
        if self.dtype.is_float:
            return arith.constant(et, sign * float("inf"))
        bits = self.dtype.bits
        return arith.constant(et, -(1 << (bits - 1)) if sign < 0 else (1 << (bits - 1)) - 1)


def _lane_steps(layout: Layout, dim, lanes: int) -> tuple[int, int]:
    """(lane stride, lanes) along ``dim``: lane ``l`` holds rank ``(l // stride) % n`` of the dim's lane
    groups, each a contiguous run of the thread's elements; else a ``CodegenError``."""
    i = layout.dims.index(dim)
    table = coord_table(layout, lanes)
    coords = sorted({t[i] for t in table})
    if len(coords) == 1:
        return 1, 1
    stride = next(lane for lane in range(lanes) if table[lane][i] == coords[1])
    n, span = len(coords), layout.seqs[i].count
    for lane, t in enumerate(table):
        rank = (lane // stride) % n
        others = tuple(c for j, c in enumerate(t) if j != i)
        base = tuple(c for j, c in enumerate(table[lane - rank * stride]) if j != i)
        if t[i] != coords[0] + rank * span or others != base:
            raise CodegenError(message=f"scan: the lanes of the layout along {dim} are not a contiguous scan order")
    return stride, n


def _thread_scan(v: ir.Value, layout: Layout, dim, comb: _Combine) -> tuple[list, list[list[int]]]:
    """(the thread's elements scanned inclusively along ``dim`` per coordinate of the other dims, each
    such group's positions in scan order)."""
    elems = [vector.extract(v, [], [p]) for p in range(layout.size)]
    groups: dict[tuple, list[tuple[int, int]]] = {}
    for p, off in enumerate(layout.positions()):
        groups.setdefault(tuple(off[d] for d in layout.dims if d != dim), []).append((off[dim], p))
    out = []
    for members in groups.values():
        members.sort()
        for (_o, prev), (_o2, p) in zip(members, members[1:]):
            elems[p] = comb(elems[p], elems[prev])
        out.append([p for _o, p in members])
    return elems, out


def _lane_scan(fb: FunctionBuilder, total: ir.Value, stride: int, n: int, comb: _Combine) -> tuple[ir.Value, ir.Value]:
    """(exclusive, inclusive) scan of ``total`` over the lanes of rank 0 .. n-1 (``gpu.shuffle up``)."""
    i32 = ir.IntegerType.get_signless(32)
    width = arith.constant(i32, fb.cs.threads_per_wave)
    rank = fb.index(sympy.Mod(sympy.floor(LANE / stride), n))
    ident = comb.identity()
    incl, k = total, 1
    while k < n:
        got = shuffle(incl, k * stride, width, gpu.ShuffleMode.UP)
        take = arith.cmpi(arith.CmpIPredicate.uge, rank, fb.index(k))
        incl = comb(incl, arith.select(take, got, ident))
        k *= 2
    if comb.kind == "add" and not comb.dtype.is_float:
        return arith.subi(incl, total), incl
    got = shuffle(incl, stride, width, gpu.ShuffleMode.UP)
    first = arith.cmpi(arith.CmpIPredicate.uge, rank, fb.index(1))
    return arith.select(first, got, ident), incl


def _wave_carry(fb: FunctionBuilder, incl: ir.Value, stride: int, n: int, axis: int, comb: _Combine) -> ir.Value:
    """The combine of the totals of the waves before this one along ``axis`` (through shared memory)."""
    cs = fb.cs
    w = cs.waves_per_axis
    strides = (1, w[0], w[0] * w[1])
    i32 = ir.IntegerType.get_signless(32)
    last_lane = arith.constant(i32, (n - 1) * stride)
    wave_total = shuffle(incl, last_lane, arith.constant(i32, cs.threads_per_wave), gpu.ShuffleMode.IDX)
    mtype = ir.MemRefType.parse(f"memref<{cs.waves}x{comb.dtype.mlir}, #gpu.address_space<workgroup>>")
    buf = memref.alloc(mtype, [], [], alignment=16)
    gpu.barrier()
    memref.store(wave_total, buf, [fb.index(sum(WAVE[a] * strides[a] for a in range(3)))])
    gpu.barrier()
    ident = comb.identity()
    acc = ident
    for j in range(w[axis] - 1):
        row = fb.index(sum((WAVE[a] if a != axis else j) * strides[a] for a in range(3)))
        before = arith.cmpi(arith.CmpIPredicate.ult, fb.index(j), fb.symbols[WAVE[axis]])
        acc = comb(acc, arith.select(before, memref.load(buf, [row]), ident))
    return acc


def _check(fb: FunctionBuilder, node: fx.Node, layout: Layout, dim) -> bool:
    """Whether waves split ``dim`` (the scan crosses them); a ``CodegenError`` for tiles it cannot scan."""
    cs = fb.cs
    extent = cs.wave_extent(dim)
    if extent != layout.tile_of(dim):
        raise CodegenError(
            node.meta.get("loc"),
            message=f"scan along {dim}: the wave's tile ({extent}) must be one instruction tile "
            f"(vector_shapes[{dim}] = {extent}), not {layout.tile_of(dim)}",
        )
    axis = cs.wg_axis.get(dim)
    across = axis is not None and dim in cs.wave_tile and cs.waves_per_axis[axis] > 1
    if across and len(layout.dims) != 1:
        raise CodegenError(node.meta.get("loc"), message=f"scan across waves needs a 1-D value, got {layout.dims}")
    return across


@rule(Scan)
def lower_scan(fb: FunctionBuilder, node: fx.Node) -> None:
    layout: Layout = node.meta["layout"]
    kw = Kwargs(node)
    dim, dtype = kw.dim, node.meta["type"].dtype
    comb = _Combine(kw.kind, dtype)
    across = _check(fb, node, layout, dim)
    elems, groups = _thread_scan(fb.values[arg_node(node, 0)], layout, dim, comb)
    stride, n = _lane_steps(layout, dim, fb.cs.lanes)
    out = list(elems)
    for members in groups:
        total = elems[members[-1]]
        carry, incl = _lane_scan(fb, total, stride, n, comb) if n > 1 else (None, total)
        if across:
            wave = _wave_carry(fb, incl, stride, n, fb.cs.wg_axis[dim], comb)
            carry = wave if carry is None else comb(carry, wave)
        if kw.exclusive:
            # element i: the carry, then the thread's elements before i
            before = [None] + [elems[p] for p in members[:-1]]
            for p, prev in zip(members, before):
                base = carry if carry is not None else comb.identity()
                out[p] = base if prev is None else comb(base, prev)
        elif carry is not None:
            for p in members:
                out[p] = comb(elems[p], carry)
    fb.values[node] = vector.from_elements(vec_type(layout.size, dtype), out)
