"""Lowering of ``wc.cast``: conversions between every pair of element types.

Requires: the cast node's operand lowered (a vector of the source type in the node's layout).
Guarantees — the semantics the emulator checks (``emulated_ops`` of ``Cast``):

* float -> float: round to nearest even; to an fp8 type the value is first clamped to the type's finite
  range (saturating: ``+-inf`` and overflow give ``+-max``, NaN stays NaN), then rounded.  A conversion
  to or from fp8 goes through f32 (exact for every source) and the fp8 bits (``codegen/fp8.py``: integer
  arithmetic, the same on every target; a later change may use sm_89+'s ``cvt.rn.satfinite.e4m3x2``
  and gfx942's ``v_cvt_pk_fp8_f32``).
* float -> integer: truncation toward zero, saturating to the integer type's range; NaN gives 0 (what
  PTX ``cvt.rzi.sat`` does; torch's ``.to()`` leaves out-of-range values undefined).
* integer -> float: the nearest value (``u8`` and ``i1`` unsigned); to fp8 through f32, saturating.
* integer -> integer: sign- (or, from ``u8`` and ``i1``, zero-) extension; narrowing wraps (keeps the
  low bits), as torch and C do.
On NVIDIA, f32 -> bf16 is one ``cvt.rn.bf16x2.f32`` per pair (``lowering_ops.nv_truncf_bf16``), bf16 -> f32
one shift or mask per element of the pair's word (``lowering_ops.nv_extf_bf16``).
"""

from __future__ import annotations

import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith

from ..frontend import dtypes as dt
from ..frontend.ops import Cast
from ..frontend.tracing import arg_node
from ..passes.schema import Kwargs
from . import fp8
from .lowering import FunctionBuilder, rule, splat, vec_type


def _int_range(dst: dt.DType) -> tuple[int, int]:
    return (-(2 ** (dst.bits - 1)), 2 ** (dst.bits - 1) - 1) if dst.signed else (0, 2**dst.bits - 1)


def _f32_below(top: int) -> float:
    """The largest f32 that truncates to at most ``top`` (2**31 - 128 for i32's 2**31 - 1, which is not an
    f32 and would round up out of range)."""
    if top < 2**24:  # within f32's 24-bit significand: exact
        return float(top)
    return float((top + 1) - 2 ** ((top + 1).bit_length() - 1 - 24))  # top + 1 is a power of two


def _clamp(x: ir.Value, dtype: dt.DType, lo: float, hi: float) -> ir.Value:
    """``min(max(x, lo), hi)``, NaN propagated (``arith.maximumf``/``minimumf``)."""
    return arith.minimumf(arith.maximumf(x, splat(x.type, dtype, lo)), splat(x.type, dtype, hi))


def _to_f32(x: ir.Value, src: dt.DType, n: int) -> ir.Value:
    wide = vec_type(n, dt.f32)
    if src == dt.f32:
        return x
    if src.is_float:
        return arith.extf(wide, x)
    return arith.sitofp(wide, x) if src.signed and src != dt.i1 else arith.uitofp(wide, x)


def _float_to_int(x: ir.Value, src: dt.DType, dst: dt.DType, n: int) -> ir.Value:
    f = _to_f32(x, src, n)
    lo, top = _int_range(dst)
    hi = _f32_below(top)
    clamped = _clamp(f, dt.f32, float(lo), hi)
    ordered = arith.cmpf(arith.CmpFPredicate.ORD, f, f)
    clamped = arith.select(ordered, clamped, splat(f.type, dt.f32, 0.0))
    rt = vec_type(n, dst)
    out = arith.fptosi(rt, clamped) if dst.signed else arith.fptoui(rt, clamped)
    if hi == top:
        return out
    above = arith.cmpf(arith.CmpFPredicate.OGT, f, splat(f.type, dt.f32, hi))  # saturates to top, not hi
    return arith.select(above, splat(rt, dst, top), out)


@rule(Cast)
def lower_cast(fb: FunctionBuilder, node: fx.Node) -> None:
    src = arg_node(node, 0).meta["type"].dtype
    dst = Kwargs(node).dtype
    x = fb.values[arg_node(node, 0)]
    n = node.meta["layout"].size
    if src == dst:
        fb.values[node] = x
    elif dst.is_fp8:
        f = fp8.decode(x, src) if src.is_fp8 else _to_f32(x, src, n)
        fb.values[node] = fp8.encode(_clamp(f, dt.f32, -dst.max, dst.max), dst)
    elif src.is_fp8:
        fb.values[node] = _convert(fb, fp8.decode(x, src), dt.f32, dst, n)
    else:
        fb.values[node] = _convert(fb, x, src, dst, n)


def _convert(fb: FunctionBuilder, x: ir.Value, src: dt.DType, dst: dt.DType, n: int) -> ir.Value:
    """A conversion between two types, neither of them fp8."""
    rt = vec_type(n, dst)
    if src == dst:
        return x
    if src == dt.f32 and dst == dt.bf16 and fb.ctx.target.has_nvvm_math:
        from .lowering_ops import nv_truncf_bf16

        return nv_truncf_bf16(x)
    if src == dt.bf16 and dst == dt.f32 and fb.ctx.target.has_nvvm_math:
        from .lowering_ops import nv_extf_bf16

        return nv_extf_bf16(x)
    if src.is_float and dst.is_float:
        if src.bits == dst.bits:  # f16 <-> bf16: through f32 (exact), one rounding
            return _convert(fb, arith.extf(vec_type(n, dt.f32), x), dt.f32, dst, n)
        return arith.extf(rt, x) if dst.bits > src.bits else arith.truncf(rt, x)
    if src.is_float:
        return _float_to_int(x, src, dst, n)
    if dst.is_float:
        return arith.sitofp(rt, x) if src.signed and src != dt.i1 else arith.uitofp(rt, x)
    if src.bits < dst.bits:
        return arith.extsi(rt, x) if src.signed and src != dt.i1 else arith.extui(rt, x)
    return arith.trunci(rt, x) if src.bits > dst.bits else x
