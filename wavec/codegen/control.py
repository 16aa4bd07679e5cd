"""Lowering rules of ``wc.conditional`` and ``wc.cumsum`` (``frontend/ops_control.py``).

- A conditional is one ``scf.if`` on the thread's element of the condition (or a workgroup-uniform
  comparison of index expressions); its body lowers in a scope of its own, so index values it needs are
  computed before the branch and never used from inside it afterwards.
- ``cumsum``: each thread scans its elements along the dim, the lanes of a wave scan their totals with
  ``gpu.shuffle up`` (Hillis-Steele: log2(lanes) steps), and when waves split the dim each wave's total
  goes through shared memory (between barriers, like the cross-wave reductions).
"""

from __future__ import annotations

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, memref, scf, vector

from ..errors import CodegenError
from ..frontend import dtypes as dt
from ..frontend.ops_control import Conditional, Cumsum
from ..frontend.tracing import arg_node, arg_nodes
from ..indexing import LANE, WAVE, Layout
from ..passes.schema import Kwargs, loop_body
from .lowering import FunctionBuilder, elem_type, rule, vec_type
from .replicas import coord_table

_CMP = {sympy.StrictLessThan: "slt", sympy.LessThan: "sle", sympy.StrictGreaterThan: "sgt"}
_CMP.update({sympy.GreaterThan: "sge", sympy.Equality: "eq", sympy.Unequality: "ne"})


def _uniform_condition(fb: FunctionBuilder, rel: sympy.Rel) -> ir.Value:
    pred = _CMP.get(type(rel))
    if pred is None:
        raise CodegenError(message=f"wc.conditional: cannot lower the relation {rel}")
    lhs, rhs = (fb.index(fb.cs.resolve_tile_starts(side)) for side in (rel.lhs, rel.rhs))
    return arith.cmpi(getattr(arith.CmpIPredicate, pred), lhs, rhs)


@rule(Conditional)
def lower_conditional(fb: FunctionBuilder, node: fx.Node) -> None:
    if "when" in node.kwargs:
        cond = _uniform_condition(fb, Kwargs(node).when)
    else:
        cond = vector.extract(fb.values[arg_nodes(node, 0)[0]], [], [0])
    branch = scf.IfOp(cond)
    with ir.InsertionPoint(branch.then_block):
        fb.enter_loop(branch.operation, {})  # a scope: index values are emitted before the branch
        fb.lower_graph(loop_body(fb.trace, node))
        fb.exit_loop()
        scf.yield_([])


# ----- cumsum -----


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
            raise CodegenError(message=f"cumsum: the lanes of the layout along {dim} are not a contiguous scan order")
    return stride, n


def _thread_scan(v: ir.Value, layout: Layout, dim, dtype: dt.DType) -> tuple[list, list[tuple[int, list[int]]]]:
    """The thread's elements scanned along ``dim`` per coordinate of the other dims, and per such group
    (its last position: the thread's total of the group, its positions)."""
    add = arith.addf if dtype.is_float else arith.addi
    elems = [vector.extract(v, [], [p]) for p in range(layout.size)]
    groups: dict[tuple, list[tuple[int, int]]] = {}
    for p, off in enumerate(layout.positions()):
        groups.setdefault(tuple(off[d] for d in layout.dims if d != dim), []).append((off[dim], p))
    out = []
    for members in groups.values():
        members.sort()
        for (_o, prev), (_o2, p) in zip(members, members[1:]):
            elems[p] = add(elems[p], elems[prev])
        out.append((members[-1][1], [p for _o, p in members]))
    return elems, out


def _lane_carry(fb: FunctionBuilder, total: ir.Value, stride: int, n: int, dtype: dt.DType) -> ir.Value:
    """The exclusive scan of ``total`` over the lanes of rank 0 .. n-1 (``gpu.shuffle up``)."""
    add = arith.addf if dtype.is_float else arith.addi
    i32 = ir.IntegerType.get_signless(32)
    width = arith.constant(i32, fb.cs.threads_per_wave)
    rank = fb.index(sympy.Mod(sympy.floor(LANE / stride), n))
    zero = arith.constant(elem_type(dtype), 0.0 if dtype.is_float else 0)
    incl, k = total, 1
    while k < n:
        got = gpu.shuffle(incl, arith.constant(i32, k * stride), width, gpu.ShuffleMode.UP)[0]
        take = arith.cmpi(arith.CmpIPredicate.uge, rank, fb.index(k))
        incl = add(incl, arith.select(take, got, zero))
        k *= 2
    return arith.subf(incl, total) if dtype.is_float else arith.subi(incl, total)


def _wave_carry(fb: FunctionBuilder, total: ir.Value, stride: int, n: int, axis: int, dtype: dt.DType) -> ir.Value:
    """The sum of the totals of the waves before this one along ``axis`` (through shared memory)."""
    cs = fb.cs
    w = cs.waves_per_axis
    strides = (1, w[0], w[0] * w[1])
    i32 = ir.IntegerType.get_signless(32)
    last_lane = arith.constant(i32, (n - 1) * stride)
    wave_total = gpu.shuffle(total, last_lane, arith.constant(i32, cs.threads_per_wave), gpu.ShuffleMode.IDX)[0]
    mtype = ir.MemRefType.parse(f"memref<{cs.waves}x{dtype.mlir}, #gpu.address_space<workgroup>>")
    buf = memref.alloc(mtype, [], [], alignment=16)
    gpu.barrier()
    memref.store(wave_total, buf, [fb.index(sum(WAVE[a] * strides[a] for a in range(3)))])
    gpu.barrier()
    zero = arith.constant(elem_type(dtype), 0.0 if dtype.is_float else 0)
    add = arith.addf if dtype.is_float else arith.addi
    acc = zero
    for j in range(w[axis] - 1):
        row = fb.index(sum((WAVE[a] if a != axis else j) * strides[a] for a in range(3)))
        before = arith.cmpi(arith.CmpIPredicate.ult, fb.index(j), fb.symbols[WAVE[axis]])
        acc = add(acc, arith.select(before, memref.load(buf, [row]), zero))
    return acc


@rule(Cumsum)
def lower_cumsum(fb: FunctionBuilder, node: fx.Node) -> None:
    x = arg_node(node, 0)
    layout: Layout = node.meta["layout"]
    dim, dtype = Kwargs(node).dim, node.meta["type"].dtype
    cs = fb.cs
    extent = cs.wave_extent(dim)
    if extent != layout.tile_of(dim):
        raise CodegenError(
            node.meta.get("loc"),
            message=f"cumsum along {dim}: the wave's tile ({extent}) must be one instruction tile "
            f"(vector_shapes[{dim}] = {extent}), not {layout.tile_of(dim)}",
        )
    add = arith.addf if dtype.is_float else arith.addi
    elems, groups = _thread_scan(fb.values[x], layout, dim, dtype)
    stride, n = _lane_steps(layout, dim, cs.lanes)
    axis = cs.wg_axis.get(dim)
    across = axis is not None and dim in cs.wave_tile and cs.waves_per_axis[axis] > 1
    axis = axis if axis is not None else 0
    if across and len(layout.dims) != 1:
        raise CodegenError(node.meta.get("loc"), message=f"cumsum across waves needs a 1-D value, got {layout.dims}")
    for last, members in groups:
        total = elems[last]
        carry = _lane_carry(fb, total, stride, n, dtype) if n > 1 else None
        if across:
            incl = total if carry is None else add(carry, total)
            wave = _wave_carry(fb, incl, stride, n, axis, dtype)
            carry = wave if carry is None else add(carry, wave)
        if carry is not None:
            for p in members:
                elems[p] = add(elems[p], carry)
    fb.values[node] = vector.from_elements(vec_type(layout.size, dtype), elems)
