"""Lowering of ``wc.max`` / ``wc.sum``: in-thread over the register tile, then across the lanes of a wave.

Expansion chains the partial reductions of one output tile; the clone marked ``finalize`` also combines
across lanes (a ``gpu.shuffle xor`` butterfly over exactly the lane bits along which the reduced dim
varies) and, when a WaveConstraint splits the reduced dim, across waves through shared memory (partials
stored at the wave index between barriers, so a reduction in a loop never overwrites partials being read).
"""

from __future__ import annotations

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, memref, vector

from ..errors import CodegenError
from ..frontend import dtypes as dt
from ..frontend.ops import Reduce
from ..frontend.tracing import arg_node
from ..indexing import LANE, WAVE, Layout
from ..passes.schema import Kwargs
from .lowering import FunctionBuilder, rule, vec_type

_KIND = {"max": vector.CombiningKind.MAXIMUMF, "sum": vector.CombiningKind.ADD}
_COMBINE = {"max": arith.maximumf, "sum": arith.addf}


def _groups(lin: Layout, lout: Layout) -> list[list[int]]:
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


def _butterfly(fb: FunctionBuilder, value: ir.Value, n: int, bits: list[int], kind: str) -> ir.Value:
    f32 = ir.F32Type.get()
    i32 = ir.IntegerType.get_signless(32)
    width = arith.constant(i32, fb.cs.threads_per_wave)
    elems = [vector.extract(value, [], [i]) for i in range(n)]
    for b in bits:
        off = arith.constant(i32, b)
        elems = [_COMBINE[kind](e, gpu.shuffle(e, off, width, gpu.ShuffleMode.XOR)[0]) for e in elems]
    return vector.from_elements(ir.VectorType.get([n], f32), elems)


def _wave_axis(fb: FunctionBuilder, dim) -> int | None:
    cs = fb.cs
    if dim in cs.wave_tile and cs.waves_per_axis[cs.wg_axis[dim]] > 1:
        return cs.wg_axis[dim]
    return None


def _across_waves(fb: FunctionBuilder, value: ir.Value, n: int, axis: int, kind: str) -> ir.Value:
    cs = fb.cs
    w = cs.waves_per_axis
    strides = (1, w[0], w[0] * w[1])
    f32 = ir.F32Type.get()
    mtype = ir.MemRefType.parse(f"memref<{cs.waves}x{n}xf32, #gpu.address_space<workgroup>>")
    buf = memref.alloc(mtype, [], [], alignment=16)
    gpu.barrier()
    mine = fb.index(sum(WAVE[a] * strides[a] for a in range(3)))
    vector.store(value, buf, [mine, fb.index(0)])
    gpu.barrier()
    acc = None
    for j in range(w[axis]):
        row = fb.index(sum((WAVE[a] if a != axis else j) * strides[a] for a in range(3)))
        part = vector.load(ir.VectorType.get([n], f32), buf, [row, fb.index(0)])
        acc = part if acc is None else _COMBINE[kind](acc, part)
    return acc


@rule(Reduce)
def lower_reduce(fb: FunctionBuilder, node: fx.Node) -> None:
    x_node = arg_node(node, 0)
    kind, dim = Kwargs(node).kind, Kwargs(node).dim
    if node.meta["type"].dtype != dt.f32:
        raise CodegenError(node.meta.get("loc"), message=f"wc.{kind} needs f32 values: wc.cast(x, wc.f32) first")
    lin, lout = x_node.meta["layout"], node.meta["layout"]
    v = fb.values[x_node]
    parts = []
    for qs in _groups(lin, lout):
        piece = v if qs == list(range(lin.size)) else vector.shuffle(v, v, qs)
        parts.append(vector.reduction(ir.F32Type.get(), _KIND[kind], piece))
    res = vector.from_elements(vec_type(lout.size, dt.f32), parts)
    if len(node.args) > 1:
        res = _COMBINE[kind](res, fb.values[arg_node(node, 1)])
    if node.meta.get("finalize"):
        bits = reduced_lane_bits(lin, dim, fb.cs.threads_per_wave)
        if bits:
            res = _butterfly(fb, res, lout.size, bits, kind)
        axis = _wave_axis(fb, dim)
        if axis is not None:
            res = _across_waves(fb, res, lout.size, axis, kind)
    fb.values[node] = res
