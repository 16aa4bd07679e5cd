"""Lowering of ``wc.sum`` / ``wc.max`` / ``wc.min`` / ``wc.argmax`` / ``wc.argmin`` (``frontend/ops_reduce.py``):
in-thread over the register tile, then across the lanes of a wave.

Requires: expanded ``Reduce`` nodes of f32, i32 or i64 values (f16/bf16 were widened by the frontend).
Guarantees: every lane holding an output element holds the reduction of its whole row.  Expansion chains
the partial reductions of one output tile; the clone marked ``finalize`` also combines across lanes (a
``gpu.shuffle xor`` butterfly over exactly the lane bits along which the reduced dim varies; 64-bit
values move as two 32-bit shuffles, which NVIDIA and AMD both have) and, when a WaveConstraint splits the
reduced dim, across waves through shared memory (partials stored at the wave index between barriers, so
a reduction in a loop never overwrites partials being read).

An arg-reduction reduces i64 keys, ``order_bits(value) << 32 | index bits``: a signed max (min) of keys
picks the largest (smallest) value and, on ties, the lowest index (argmax stores ``~index`` low, so the
lowest index is the largest key).  The order bits of a float are its bits with the magnitude flipped for
negatives (an integer order equal to the float order), -0.0 taken as +0.0 (torch ties them) and every
NaN mapped above +inf (argmax) or below -inf (argmin): torch's NaN wins either way.
"""

from __future__ import annotations

import numpy as np
import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, memref, vector

from ..errors import CodegenError
from ..frontend import dtypes as dt
from ..frontend.ops_reduce import ArgUnpack, Reduce
from ..frontend.tracing import arg_node
from ..indexing import LANE, WAVE, Layout
from ..passes.schema import Kwargs
from .lowering import FunctionBuilder, elem_type, rule, splat, vec_type
from .padding import fill_padding

CK = vector.CombiningKind
_FLOAT = {"max": (CK.MAXIMUMF, arith.maximumf), "sum": (CK.ADD, arith.addf), "min": (CK.MINIMUMF, arith.minimumf)}
_INT = {"max": (CK.MAXSI, arith.maxsi), "sum": (CK.ADD, arith.addi), "min": (CK.MINSI, arith.minsi)}
_INT.update(argmax=_INT["max"], argmin=_INT["min"])
NAN_KEY = {"argmax": 0x7FFFFFFF, "argmin": -0x80000000}  # above +inf's order bits / below -inf's


def identity(kind: str, dtype: dt.DType) -> float | int:
    """The value that leaves a reduction of ``kind`` unchanged (what padding holds when reduced; an
    arg-reduction reduces signed i64 keys)."""
    if dtype.is_float:
        return {"sum": 0.0, "max": float("-inf"), "min": float("inf")}[kind]
    bound = 2 ** (8 * dtype.bytes - 1)
    return 0 if kind == "sum" else -bound if kind in ("max", "argmax") else bound - 1


def _combiner(kind: str, dtype: dt.DType):
    return (_FLOAT if dtype.is_float else _INT)[kind]


def reduce_groups(lin: Layout, lout: Layout) -> list[list[int]]:
    """For each output position, the input positions that reduce into it."""
    ins = lin.level_coords()
    return [[q for q, ic in enumerate(ins) if all(ic[k] == v for k, v in oc.items())] for oc in lout.level_coords()]


def reduced_lane_bits(lin: Layout, dim, threads: int) -> list[int]:
    """Lane xor masks along which only the reduced dim's coordinate changes."""
    others = [s.start for d, s in zip(lin.dims, lin.seqs) if d != dim]
    start = lin.seq(dim).start
    hw = {s: 0 for e in others + [start] for s in e.free_symbols if s != LANE}
    hw.update({w: 0 for w in WAVE})  # waves along the reduced dim are combined through shared memory
    # each coordinate as a plain function of the lane, evaluated once per lane (sympy subs per lane and
    # bit cost seconds on attention's 32 reductions)
    coords = [
        [int(f(lane)) for lane in range(threads)]
        for f in (sympy.lambdify(LANE, e.subs(hw), "math") for e in [start, *others])
    ]
    bits = []
    b = 1
    while b < threads:
        moves_dim = any(coords[0][lane] != coords[0][lane ^ b] for lane in range(threads))
        moves_other = any(c[lane] != c[lane ^ b] for c in coords[1:] for lane in range(threads))
        if moves_dim and moves_other:
            raise CodegenError(message=f"lane bit {b} moves both {dim} and another dimension")
        if moves_dim:
            bits.append(b)
        b *= 2
    return bits


def shuffle(value: ir.Value, offset: int | ir.Value, width: ir.Value, mode) -> ir.Value:
    """``gpu.shuffle`` of a 32-bit scalar, or of an i64 as its two 32-bit halves."""
    i32 = ir.IntegerType.get_signless(32)
    off = arith.constant(i32, offset) if isinstance(offset, int) else offset
    if isinstance(value.type, ir.IntegerType) and value.type.width == 64:
        i64 = value.type
        lo = gpu.shuffle(arith.trunci(i32, value), off, width, mode)[0]
        hi = gpu.shuffle(arith.trunci(i32, arith.shrui(value, arith.constant(i64, 32))), off, width, mode)[0]
        high = arith.shli(arith.extui(i64, hi), arith.constant(i64, 32))
        return arith.ori(high, arith.extui(i64, lo))
    return gpu.shuffle(value, off, width, mode)[0]


def _butterfly(fb: FunctionBuilder, value: ir.Value, n: int, bits: list[int], kind: str, dtype: dt.DType) -> ir.Value:
    combine = _combiner(kind, dtype)[1]
    width = arith.constant(ir.IntegerType.get_signless(32), fb.cs.threads_per_wave)
    elems = [vector.extract(value, [], [i]) for i in range(n)]
    for b in bits:
        off = arith.constant(ir.IntegerType.get_signless(32), b)
        elems = [combine(e, shuffle(e, off, width, gpu.ShuffleMode.XOR)) for e in elems]
    return vector.from_elements(vec_type(n, dtype), elems)


def wave_axis(fb: FunctionBuilder, dim) -> int | None:
    cs = fb.cs
    if dim in cs.wave_tile and cs.waves_per_axis[cs.wg_axis[dim]] > 1:
        return cs.wg_axis[dim]
    return None


def _across_waves(fb: FunctionBuilder, value: ir.Value, n: int, axis: int, kind: str, dtype: dt.DType) -> ir.Value:
    cs = fb.cs
    w = cs.waves_per_axis
    strides = (1, w[0], w[0] * w[1])
    mtype = ir.MemRefType.parse(f"memref<{cs.waves}x{n}x{dtype.mlir}, #gpu.address_space<workgroup>>")
    buf = memref.alloc(mtype, [], [], alignment=16)
    gpu.barrier()
    mine = fb.index(sum(WAVE[a] * strides[a] for a in range(3)))
    vector.store(value, buf, [mine, fb.index(0)])
    gpu.barrier()
    acc = None
    for j in range(w[axis]):
        row = fb.index(sum((WAVE[a] if a != axis else j) * strides[a] for a in range(3)))
        part = vector.load(vec_type(n, dtype), buf, [row, fb.index(0)])
        acc = part if acc is None else _combiner(kind, dtype)[1](acc, part)
    return acc


def element_indices(fb: FunctionBuilder, lin: Layout, dim) -> ir.Value:
    """The i32 coordinate along ``dim`` of each of the thread's elements (loop and tile offsets included)."""
    vi32 = vec_type(lin.size, dt.i32)
    start = vector.broadcast(vi32, arith.index_cast(ir.IntegerType.get_signless(32), fb.index(lin.seq(dim).start)))
    offs = [off[dim] for off in lin.positions()]
    return arith.addi(start, arith.constant(vi32, ir.DenseElementsAttr.get(np.array(offs, dtype=np.int32), type=vi32)))


def pack_keys(v: ir.Value, index: ir.Value, n: int, kind: str, dtype: dt.DType) -> ir.Value:
    """The i64 key of each of ``n`` values ``v`` (f32 or i32) at i32 coordinates ``index`` (see the module
    docstring)."""
    vi32, vi64 = vec_type(n, dt.i32), vec_type(n, dt.i64)
    if dtype.is_float:
        zero = arith.cmpf(arith.CmpFPredicate.OEQ, v, splat(vec_type(n, dt.f32), dt.f32, 0.0))
        bits = arith.select(zero, splat(vi32, dt.i32, 0), arith.bitcast(vi32, v))
        negative = arith.cmpi(arith.CmpIPredicate.slt, bits, splat(vi32, dt.i32, 0))
        order = arith.select(negative, arith.xori(bits, splat(vi32, dt.i32, 0x7FFFFFFF)), bits)
        nan = arith.cmpf(arith.CmpFPredicate.UNO, v, v)
        order = arith.select(nan, splat(vi32, dt.i32, NAN_KEY[kind]), order)
    else:
        order = v
    if kind == "argmax":
        index = arith.xori(index, splat(vi32, dt.i32, -1))
    high = arith.shli(arith.extsi(vi64, order), splat(vi64, dt.i64, 32))
    return arith.ori(high, arith.extui(vi64, index))


def arg_keys(fb: FunctionBuilder, v: ir.Value, lin: Layout, dim, kind: str, dtype: dt.DType) -> ir.Value:
    """The i64 key of each of the thread's elements (see the module docstring)."""
    return pack_keys(v, element_indices(fb, lin, dim), lin.size, kind, dtype)


@rule(Reduce)
def lower_reduce(fb: FunctionBuilder, node: fx.Node) -> None:
    x_node = arg_node(node, 0)
    kind, dim = Kwargs(node).kind, Kwargs(node).dim
    dtype = node.meta["type"].dtype
    if dtype not in (dt.f32, dt.i32, dt.i64):
        raise CodegenError(node.meta.get("loc"), message=f"wc.{kind} of {dtype} values: the frontend widens them")
    lin, lout = x_node.meta["layout"], node.meta["layout"]
    v = fb.values[x_node]
    if kind in NAN_KEY:
        v = arg_keys(fb, v, lin, dim, kind, x_node.meta["type"].dtype)
    v = fill_padding(fb, x_node, dim, v, dtype, identity(kind, dtype))  # padding joins nothing
    combining, combine = _combiner(kind, dtype)
    parts = []
    for qs in reduce_groups(lin, lout):
        piece = v if qs == list(range(lin.size)) else vector.shuffle(v, v, qs)
        parts.append(vector.reduction(elem_type(dtype), combining, piece))
    res = vector.from_elements(vec_type(lout.size, dtype), parts)
    if len(node.args) > 1:
        res = combine(res, fb.values[arg_node(node, 1)])
    if node.meta.get("finalize"):
        bits = reduced_lane_bits(lin, dim, fb.cs.threads_per_wave)
        if bits:
            res = _butterfly(fb, res, lout.size, bits, kind, dtype)
        axis = wave_axis(fb, dim)
        if axis is not None:
            res = _across_waves(fb, res, lout.size, axis, kind, dtype)
    fb.values[node] = res


@rule(ArgUnpack)
def lower_arg_unpack(fb: FunctionBuilder, node: fx.Node) -> None:
    key = fb.values[arg_node(node, 0)]
    kw = Kwargs(node)
    n = node.meta["layout"].size
    vi32, vi64 = vec_type(n, dt.i32), vec_type(n, dt.i64)
    if kw.part == "index":
        low = arith.trunci(vi32, key)
        fb.values[node] = arith.xori(low, splat(vi32, dt.i32, -1)) if kw.kind == "argmax" else low
        return
    order = arith.trunci(vi32, arith.shrsi(key, splat(vi64, dt.i64, 32)))
    if node.meta["type"].dtype.is_float:
        negative = arith.cmpi(arith.CmpIPredicate.slt, order, splat(vi32, dt.i32, 0))
        bits = arith.select(negative, arith.xori(order, splat(vi32, dt.i32, 0x7FFFFFFF)), order)
        order = arith.bitcast(vec_type(n, dt.f32), bits)
    fb.values[node] = order
