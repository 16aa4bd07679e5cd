"""fp8 values as their bits: conversion between f32 and the four fp8 formats in integer arithmetic.

Requires: fp8 values held as ``i8`` bit patterns (``DType.mlir`` of the fp8 types is ``i8``: memories,
registers and selects move bytes); f32 operands of ``encode`` already clamped to the format's finite range.
Guarantees: ``encode`` rounds to nearest even (NaN to the format's NaN, zero keeps its sign except in the
fnuz formats, which have no negative zero), ``decode`` is exact.  Why not ``arith.truncf``/``extf`` on
``f8E4M3FN`` and friends: IREE leaves them unlowered on CUDA ("missing LLVMTranslationDialectInterface ...
arith.truncf"), and sm_80 has no fp8 conversion instruction; the integer form is one lowering for sm_80,
sm_90a and gfx942, and the emulator runs it as it runs any integer code.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir
from iree.compiler.dialects import arith, math

from ..frontend import dtypes as dt
from .lowering import splat


@dataclass(frozen=True)
class Format:
    exp_bits: int
    man_bits: int
    bias: int
    fnuz: bool  # no infinities, no negative zero; 0x80 is the one NaN
    has_inf: bool  # e5m2: S.11111.00 is infinity, S.11111.xx NaN

    @property
    def nan(self) -> int:
        return 0x80 if self.fnuz else 0x7F


FORMATS = {
    "f8e4m3fn": Format(4, 3, 7, False, False),  # S.1111.111 is NaN
    "f8e5m2": Format(5, 2, 15, False, True),
    "f8e4m3fnuz": Format(4, 3, 8, True, False),
    "f8e5m2fnuz": Format(5, 2, 16, True, False),
}


def _c(like: ir.Value, value: int) -> ir.Value:
    return splat(like.type, dt.i32, value)


def encode(x: ir.Value, dtype: dt.DType) -> ir.Value:
    """The fp8 bits (a vector of i8) of the f32 vector ``x``, rounded to nearest even."""
    fmt = FORMATS[dtype.name]
    n = ir.VectorType(x.type).shape[0]
    i32 = ir.VectorType.get([n], ir.IntegerType.get_signless(32))
    bits = arith.bitcast(i32, x)
    sign = arith.andi(arith.shrui(bits, _c(bits, 24)), _c(bits, 0x80))
    mag = arith.andi(bits, _c(bits, 0x7FFFFFFF))
    shift = 23 - fmt.man_bits
    # normal range: round the f32 significand to man_bits (nearest even), then rebias the exponent
    odd = arith.andi(arith.shrui(mag, _c(mag, shift)), _c(mag, 1))
    rounded = arith.addi(arith.addi(mag, _c(mag, (1 << (shift - 1)) - 1)), odd)
    normal = arith.subi(arith.shrui(rounded, _c(mag, shift)), _c(mag, (127 - fmt.bias) << fmt.man_bits))
    # subnormal range (below 2**(1 - bias)): the count of quanta 2**(1 - bias - man_bits), nearest even;
    # scaling by a power of two is exact, and a count that rounds up to 2**man_bits is the least normal
    scale = splat(x.type, dt.f32, 2.0 ** (fmt.bias + fmt.man_bits - 1))
    top = splat(x.type, dt.f32, float(1 << fmt.man_bits))  # keeps fptoui defined where the normal path is taken
    quanta = arith.minimumf(math.roundeven(arith.mulf(math.absf(x), scale)), top)
    sub = arith.fptoui(i32, quanta)
    min_normal = (127 + 1 - fmt.bias) << 23
    code = arith.select(arith.cmpi(arith.CmpIPredicate.ult, mag, _c(mag, min_normal)), sub, normal)
    if fmt.fnuz:  # no negative zero: -0 and values rounding to it are +0
        sign = arith.select(arith.cmpi(arith.CmpIPredicate.eq, code, _c(code, 0)), _c(code, 0), sign)
    code = arith.ori(code, sign)
    is_nan = arith.cmpi(arith.CmpIPredicate.ugt, mag, _c(mag, 0x7F800000))
    code = arith.select(is_nan, _c(code, fmt.nan), code)
    return arith.trunci(ir.VectorType.get([n], ir.IntegerType.get_signless(8)), code)


def decode(b: ir.Value, dtype: dt.DType) -> ir.Value:
    """The f32 values (exact) of the fp8 bits ``b`` (a vector of i8)."""
    fmt = FORMATS[dtype.name]
    n = ir.VectorType(b.type).shape[0]
    i32 = ir.VectorType.get([n], ir.IntegerType.get_signless(32))
    f32 = ir.VectorType.get([n], ir.F32Type.get())
    c = arith.extui(i32, b)
    sign = arith.shli(arith.andi(c, _c(c, 0x80)), _c(c, 24))
    mag = arith.andi(c, _c(c, 0x7F))
    exp = arith.shrui(mag, _c(mag, fmt.man_bits))
    man = arith.andi(mag, _c(mag, (1 << fmt.man_bits) - 1))
    normal = arith.addi(arith.shli(mag, _c(mag, 23 - fmt.man_bits)), _c(mag, (127 - fmt.bias) << 23))
    quantum = splat(f32, dt.f32, 2.0 ** (1 - fmt.bias - fmt.man_bits))
    sub = arith.bitcast(i32, arith.mulf(arith.uitofp(f32, man), quantum))
    out = arith.select(arith.cmpi(arith.CmpIPredicate.eq, exp, _c(exp, 0)), sub, normal)
    top = (1 << fmt.exp_bits) - 1
    if fmt.has_inf:  # exponent all ones: infinity (mantissa 0) or NaN
        special = arith.cmpi(arith.CmpIPredicate.eq, exp, _c(exp, top))
        is_inf = arith.cmpi(arith.CmpIPredicate.eq, man, _c(man, 0))
        inf_or_nan = arith.select(is_inf, _c(man, 0x7F800000), _c(man, 0x7FC00000))
        out = arith.select(special, inf_or_nan, out)
    elif not fmt.fnuz:  # e4m3fn: only S.1111.111 is NaN
        out = arith.select(arith.cmpi(arith.CmpIPredicate.eq, mag, _c(mag, 0x7F)), _c(mag, 0x7FC00000), out)
    out = arith.ori(out, sign)
    if fmt.fnuz:  # 0x80 (the would-be negative zero) is the NaN
        out = arith.select(arith.cmpi(arith.CmpIPredicate.eq, c, _c(c, 0x80)), _c(c, 0x7FC00000), out)
    return arith.bitcast(f32, out)
