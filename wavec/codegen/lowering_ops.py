"""Lowering rules of the index-level DSL ops (``wc.arange``, ``wc.permute``) and NVIDIA ``exp2``.

Kept beside ``lowering.py`` (the registry and the core rules) so that module stays small; registered
when ``emitter.py`` imports this module.
"""

from __future__ import annotations

import numpy as np
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, llvm, nvvm, vector

from ..frontend import dtypes as dt
from ..frontend.ops import Arange, Permute
from ..frontend.tracing import arg_node
from ..indexing import Layout
from .lowering import FunctionBuilder, rule, vec_type


def nv_exp2(x: ir.Value) -> ir.Value:
    """exp2 of an f32 vector as one ``ex2.approx.ftz.f32`` per element.  IREE expands ``math.exp2`` into a
    ~20-instruction polynomial on CUDA and rejects ``llvm.intr.exp2`` on vectors; the NVVM intrinsic is
    what flash attention uses (2 ulp; exp2(-inf) is still 0)."""
    f32 = ir.F32Type.get()
    n = ir.VectorType(x.type).shape[0]
    elems = [
        llvm.call_intrinsic(f32, "llvm.nvvm.ex2.approx.ftz.f", [vector.extract(x, [], [i])], [], []) for i in range(n)
    ]
    return vector.from_elements(x.type, elems)


def nv_truncf_bf16(x: ir.Value) -> ir.Value:
    """f32 -> bf16 of a vector as one ``cvt.rn.bf16x2.f32`` per pair of adjacent elements
    (``nvvm.convert.f32x2.to.bf16x2``, round to nearest even; sm_80+).  ``arith.truncf`` to bf16 is expanded
    by IREE's lowering into integer rounding (shift, add, NaN test, select: ~8 instructions per element
    plus a ``prmt`` per pair) that LLVM cannot turn back into the instruction.  The pairs are assembled as
    i32 words, which is how every bf16 consumer (mma operands, stores) reads them."""
    f32, bf16, i32 = ir.F32Type.get(), ir.BF16Type.get(), ir.IntegerType.get_signless(32)
    n = ir.VectorType(x.type).shape[0]
    elems = [vector.extract(x, [], [i]) for i in range(n)]
    if n % 2:
        elems.append(arith.constant(f32, 0.0))
    pair, word = ir.VectorType.get([2], bf16), ir.VectorType.get([1], i32)
    rn = ir.Attribute.parse("#nvvm.fp_rnd_mode<rn>")
    words = [
        vector.extract(vector.bitcast(word, nvvm.convert_f32x2_to_bf16x2(pair, hi, lo, rnd=rn)), [], [0])
        for lo, hi in zip(elems[0::2], elems[1::2], strict=True)
    ]
    out = vector.bitcast(
        ir.VectorType.get([len(elems)], bf16), vector.from_elements(ir.VectorType.get([len(words)], i32), words)
    )
    return vector.extract_strided_slice(ir.VectorType.get([n], bf16), out, [0], [n], [1]) if n % 2 else out


def nv_extf_bf16(x: ir.Value) -> ir.Value:
    """bf16 -> f32 of a vector (exact: the bf16 bits are the f32's upper half) as one integer instruction per
    element on the i32 words that hold adjacent pairs: the low element ``word << 16``, the high one ``word &
    0xffff0000``.  ``arith.extf`` from bf16 became, per element, a 16-bit move out of the pair, a
    ``cvt.u32.u16`` and a ``shl``, against f16's single ``cvt.f32.f16`` (64 more instructions a lane in
    the bf16 softmax of 16384, docs/reductions.md)."""
    f32, i32 = ir.F32Type.get(), ir.IntegerType.get_signless(32)
    n = ir.VectorType(x.type).shape[0]
    if n % 2:  # the last element alone (a padded pair's bitcast went through the stack: 8 bytes of local)
        last = arith.bitcast(ir.IntegerType.get_signless(16), vector.extract(x, [], [n - 1]))
        last = arith.bitcast(f32, arith.shli(arith.extui(i32, last), arith.constant(i32, 16)))
        if n == 1:
            return vector.from_elements(ir.VectorType.get([1], f32), [last])
        pairs = vector.extract_strided_slice(ir.VectorType.get([n - 1], ir.BF16Type.get()), x, [0], [n - 1], [1])
        head = nv_extf_bf16(pairs)
        return vector.from_elements(
            ir.VectorType.get([n], f32), [*(vector.extract(head, [], [i]) for i in range(n - 1)), last]
        )
    wt = ir.VectorType.get([n // 2], i32)
    words = vector.bitcast(wt, x)
    splat16 = arith.constant(wt, ir.DenseElementsAttr.get_splat(wt, ir.IntegerAttr.get(i32, 16)))
    mask = arith.constant(wt, ir.DenseElementsAttr.get_splat(wt, ir.IntegerAttr.get(i32, -65536)))
    lo, hi = arith.shli(words, splat16), arith.andi(words, mask)
    both = vector.shuffle(lo, hi, [j for i in range(n // 2) for j in (i, n // 2 + i)])
    return vector.bitcast(ir.VectorType.get([n], f32), both)


@rule(Arange)
def lower_arange(fb: FunctionBuilder, node: fx.Node) -> None:
    layout: Layout = node.meta["layout"]
    dim = node.kwargs["dim"]
    i32 = ir.IntegerType.get_signless(32)
    vt = vec_type(layout.size, dt.i32)
    start = vector.broadcast(vt, arith.index_cast(i32, fb.index(layout.seq(dim).start)))
    offs = [off[dim] for off in layout.positions()]
    if not any(offs):
        fb.values[node] = start
        return
    step = arith.constant(vt, ir.DenseElementsAttr.get(np.array(offs, dtype=np.int32), type=vt))
    fb.values[node] = arith.addi(start, step)


@rule(Permute)
def lower_permute(fb: FunctionBuilder, node: fx.Node) -> None:
    fb.values[node] = fb.values[arg_node(node, 0)]  # layouts order registers by dimension name: nothing moves
