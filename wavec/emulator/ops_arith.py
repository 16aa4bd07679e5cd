"""``arith`` and ``math`` ops, elementwise over (lanes, *vector_shape) arrays.

Integers wrap like two's-complement machine integers of their width; unsigned ops reinterpret the bits.
Float ops compute in numpy in the element type (f16 ufuncs compute in f32 and round once per op, as
the GPU does) and bf16 results are rounded to bf16 (round to nearest even) after every op.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from iree.compiler import ir

from wavec.emulator.interp import Compiler, Instr, constant, elementwise, enum_name, register
from wavec.emulator.types import ElemType, as_signed, as_unsigned, round_bf16, value_type
from wavec.errors import EmulatorError

Fn = Callable[..., np.ndarray]


def _res(op: ir.Operation) -> ElemType:
    return value_type(op.results[0].type)[1]


def _arg(op: ir.Operation) -> ElemType:
    return value_type(op.operands[0].type)[1]


# ---------------------------------------------------------------- integers


def _wrap(et: ElemType) -> Callable[[np.ndarray], np.ndarray]:
    if et.kind == "bool":
        return lambda r: (np.asarray(r).astype(np.int64) & 1).astype(bool)
    return lambda r: np.asarray(r).astype(et.reg, copy=False)


def _divsi(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    b = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) ^ (b < 0), -q, q)


def _safe(fn: Fn) -> Fn:
    return lambda a, b: fn(a, np.where(b == 0, 1, b))


def _shift(fn: Fn, bits: int) -> Fn:
    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        big = (b < 0) | (b >= bits)
        r = fn(a, np.where(big, 0, b).astype(a.dtype))
        return np.where(big, 0, r)

    return run


_SIGNED_INT: dict[str, Fn] = {
    "arith.addi": np.add,
    "arith.subi": np.subtract,
    "arith.muli": np.multiply,
    "arith.divsi": _divsi,
    "arith.remsi": _safe(np.fmod),
    "arith.floordivsi": _safe(np.floor_divide),
    "arith.ceildivsi": _safe(lambda a, b: -np.floor_divide(-a, b)),
    "arith.minsi": np.minimum,
    "arith.maxsi": np.maximum,
    "arith.andi": np.bitwise_and,
    "arith.ori": np.bitwise_or,
    "arith.xori": np.bitwise_xor,
}
_UNSIGNED_INT: dict[str, Fn] = {
    "arith.divui": _safe(np.floor_divide),
    "arith.remui": _safe(np.remainder),
    "arith.minui": np.minimum,
    "arith.maxui": np.maximum,
}


_REDUCTIONS: dict[str, Fn] = {
    "add": np.add, "mul": np.multiply, "minnumf": np.fmin, "maxnumf": np.fmax, "minimumf": np.minimum,
    "maximumf": np.maximum, "minsi": np.minimum, "maxsi": np.maximum, "and": np.bitwise_and,
    "or": np.bitwise_or, "xor": np.bitwise_xor,
}  # fmt: skip


def reduction(c: Compiler, op: ir.Operation, attr: str) -> tuple[Fn, Callable[[np.ndarray], np.ndarray]]:
    """(combining op, rounding of its result) of a reduction whose kind is the enum attribute ``attr``."""
    k = enum_name(op.attributes[attr])
    if k not in _REDUCTIONS:
        raise EmulatorError(message=f"{c.loc(op)}: unsupported reduction kind {k}")
    return _REDUCTIONS[k], _res(op).fix


@register(*_SIGNED_INT, *_UNSIGNED_INT, "arith.shli", "arith.shrui", "arith.shrsi")
def _int_binary(c: Compiler, op: ir.Operation) -> Instr:
    et, name = _res(op), op.name
    wrap = _wrap(et)
    if et.kind == "bool" and name in ("arith.andi", "arith.ori", "arith.xori"):
        return elementwise(c, op, _SIGNED_INT[name])
    if name in _SIGNED_INT:
        f = _SIGNED_INT[name]
        return elementwise(c, op, lambda a, b: wrap(f(as_signed(a, et), as_signed(b, et))))
    if name == "arith.shli":
        f = _shift(np.left_shift, et.bits)
        return elementwise(c, op, lambda a, b: wrap(f(as_unsigned(a, et), as_unsigned(b, et))))
    if name == "arith.shrsi":
        f = _shift(np.right_shift, et.bits)
        return elementwise(c, op, lambda a, b: wrap(f(as_signed(a, et), as_unsigned(b, et))))
    f = _shift(np.right_shift, et.bits) if name == "arith.shrui" else _UNSIGNED_INT[name]
    return elementwise(c, op, lambda a, b: wrap(f(as_unsigned(a, et), as_unsigned(b, et))))


@register("math.absi")
def _absi(c: Compiler, op: ir.Operation) -> Instr:
    et = _res(op)
    wrap = _wrap(et)
    return elementwise(c, op, lambda a: wrap(np.abs(as_signed(a, et))))


_CMPI: list[tuple[Fn, bool]] = [
    (np.equal, True), (np.not_equal, True), (np.less, True), (np.less_equal, True),
    (np.greater, True), (np.greater_equal, True), (np.less, False), (np.less_equal, False),
    (np.greater, False), (np.greater_equal, False),
]  # fmt: skip


@register("arith.cmpi")
def _cmpi(c: Compiler, op: ir.Operation) -> Instr:
    et = _arg(op)
    fn, signed = _CMPI[op.attributes["predicate"].value]
    conv = (lambda x: as_signed(x, et)) if signed else (lambda x: as_unsigned(x, et))
    return elementwise(c, op, lambda a, b: fn(conv(a), conv(b)))


@register("arith.cmpf")
def _cmpf(c: Compiler, op: ir.Operation) -> Instr:
    pred = op.attributes["predicate"].value
    base = {1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal, 6: np.not_equal}
    if pred in (0, 15):
        return elementwise(c, op, lambda a, b: np.full(np.broadcast_shapes(np.shape(a), np.shape(b)), pred == 15))
    if pred == 7:
        return elementwise(c, op, lambda a, b: ~(np.isnan(a) | np.isnan(b)))
    if pred == 14:
        return elementwise(c, op, lambda a, b: np.isnan(a) | np.isnan(b))
    if pred < 7:
        f = base[pred]
        return elementwise(c, op, lambda a, b: f(a, b) & ~(np.isnan(a) | np.isnan(b)))
    f = base[pred - 7]
    return elementwise(c, op, lambda a, b: f(a, b) | np.isnan(a) | np.isnan(b))


@register("arith.select")
def _select(c: Compiler, op: ir.Operation) -> Instr:
    rank = len(value_type(op.results[0].type)[0])
    cond_rank = len(value_type(op.operands[0].type)[0])

    def sel(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if cond_rank < rank:
            cond = cond.reshape(cond.shape + (1,) * (rank - cond_rank))
        return np.where(cond, a, b)

    return elementwise(c, op, sel)


# ---------------------------------------------------------------- floats


def _fp(fn: Fn, et: ElemType) -> Fn:
    if et.name != "bf16":
        return fn
    return lambda *xs: et.fix(fn(*xs))


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Fused multiply-add with one rounding (f64 holds f32 products exactly)."""
    return (a.astype(np.float64) * b + c).astype(a.dtype)


_ERF = np.vectorize(math.erf, otypes=[np.float64])  # numpy has no erf (and scipy is not a dependency)
_FLOAT: dict[str, Fn] = {
    "arith.addf": np.add,
    "arith.subf": np.subtract,
    "arith.mulf": np.multiply,
    "arith.divf": np.divide,
    "arith.remf": np.fmod,
    "arith.negf": np.negative,
    "arith.maximumf": np.maximum,
    "arith.minimumf": np.minimum,
    "arith.maxnumf": np.fmax,
    "arith.minnumf": np.fmin,
    "math.exp2": np.exp2,
    "math.exp": np.exp,
    "math.log": np.log,
    "math.log2": np.log2,
    "math.sqrt": np.sqrt,
    "math.rsqrt": lambda x: (1.0 / np.sqrt(x.astype(np.float32))).astype(x.dtype),
    "math.fma": _fma,
    "vector.fma": _fma,
    "math.absf": np.abs,
    "math.tanh": np.tanh,
    "math.powf": np.power,
    "math.log1p": np.log1p,
    "math.floor": np.floor,
    "math.roundeven": np.rint,  # numpy rounds halves to even
    "math.ceil": np.ceil,
    "math.copysign": np.copysign,
    "math.sin": np.sin,
    "math.cos": np.cos,
    "math.erf": lambda x: _ERF(x.astype(np.float64)).astype(x.dtype),
}


@register(*_FLOAT)
def _float_op(c: Compiler, op: ir.Operation) -> Instr:
    return elementwise(c, op, _fp(_FLOAT[op.name], _res(op)))


_INTRINSICS: dict[str, Fn] = {
    # ex2.approx.ftz.f32: within 2 ulp of exp2; subnormal inputs and results flush to zero
    "llvm.nvvm.ex2.approx.ftz.f": lambda x: _ftz(np.exp2(_ftz(x)))
}


def _ftz(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.zeros((), x.dtype), x)


@register("llvm.call_intrinsic")
def _call_intrinsic(c: Compiler, op: ir.Operation) -> Instr:
    name = ir.StringAttr(op.attributes["intrin"]).value
    if name not in _INTRINSICS:
        raise EmulatorError(message=f"{c.loc(op)}: intrinsic {name} is not emulated")
    return elementwise(c, op, _INTRINSICS[name])


# ---------------------------------------------------------------- casts


@register("arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui")
@register("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci")
def _cast(c: Compiler, op: ir.Operation) -> Instr:
    src, dst, name = _arg(op), _res(op), op.name
    wrap = _wrap(dst)
    if name in ("arith.extf", "arith.truncf", "arith.sitofp"):
        pre = (lambda x: as_signed(x, src)) if name == "arith.sitofp" else (lambda x: x)
        return elementwise(c, op, lambda x: dst.cast(pre(x)))
    if name == "arith.uitofp":
        return elementwise(c, op, lambda x: dst.cast(as_unsigned(x, src)))
    if name == "arith.fptosi":
        return elementwise(c, op, lambda x: wrap(np.trunc(x).astype(np.int64)))
    if name == "arith.fptoui":
        return elementwise(c, op, lambda x: wrap(np.trunc(x).astype(np.uint64)))
    if name in ("arith.index_castui", "arith.extui"):
        return elementwise(c, op, lambda x: wrap(as_unsigned(x, src)))
    if name == "arith.trunci":
        return elementwise(c, op, wrap)
    return elementwise(c, op, lambda x: wrap(as_signed(x, src)))


@register("nvvm.convert.f32x2.to.bf16x2")
def _f32x2_to_bf16x2(c: Compiler, op: ir.Operation) -> Instr:
    """``cvt.rn.bf16x2.f32 d, hi, lo``: two f32 scalars rounded to bf16 (nearest even) into a
    ``vector<2xbf16>`` whose element 0 (the low half of the 32-bit register) is ``src_lo``."""
    attrs = {k: str(op.attributes[k]) for k in op.attributes}
    if (
        attrs.get("rnd") != "#nvvm.fp_rnd_mode<rn>"
        or attrs.get("relu", "false") != "false"
        or attrs.get("sat", "#nvvm.sat_mode<none>") != "#nvvm.sat_mode<none>"
        or len(op.operands) != 2
    ):
        raise EmulatorError(
            message=f"{c.loc(op)}: only round-to-nearest {op.name} (no relu, sat or random "
            f"bits) is emulated, got {attrs}"
        )

    def fn(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        hi, lo = np.broadcast_arrays(np.asarray(hi, np.float32), np.asarray(lo, np.float32))
        return round_bf16(np.stack([lo, hi], axis=-1))

    return elementwise(c, op, fn)


@register("nvvm.convert.float.to.tf32")
def _f32_to_tf32(c: Compiler, op: ir.Operation) -> Instr:
    """``cvt.rna.tf32.f32``: the f32's bits rounded to 10 mantissa bits, to nearest with ties away from
    zero (adding half an ulp of tf32 to the magnitude carries into the exponent as it should, up to
    infinity); the low 13 bits of the i32 result are zero.  Infinities pass, a NaN becomes 0x7fffffff."""
    attrs = {k: str(op.attributes[k]) for k in op.attributes}
    if attrs.get("rnd") != "#nvvm.fp_rnd_mode<rna>" or attrs.get("relu", "false") != "false":
        raise EmulatorError(message=f"{c.loc(op)}: only cvt.rna.tf32.f32 (no relu) is emulated, got {attrs}")
    if attrs.get("sat", "#nvvm.sat_mode<none>") != "#nvvm.sat_mode<none>":
        raise EmulatorError(message=f"{c.loc(op)}: only cvt.rna.tf32.f32 without saturation is emulated")

    def fn(x: np.ndarray) -> np.ndarray:
        bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
        special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
        rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
        nan = special & ((bits & np.uint32(0x7FFFFF)) != 0)
        out = np.where(special, bits, rounded)
        return np.where(nan, np.uint32(0x7FFFFFFF), out).view(np.int32)

    return elementwise(c, op, fn)


@register("arith.bitcast", "vector.bitcast")
def _bitcast(c: Compiler, op: ir.Operation) -> Instr:
    src, (shape, dst) = _arg(op), value_type(op.results[0].type)

    def fn(x: np.ndarray) -> np.ndarray:
        bits = np.ascontiguousarray(src.to_mem(x)).view(dst.mem)
        return dst.from_mem(bits.reshape(bits.shape[:1] + shape))

    return elementwise(c, op, fn)


# ---------------------------------------------------------------- constants


def constant_array(attr: ir.Attribute, t: ir.Type) -> np.ndarray:
    """The value of a constant attribute as a uniform (1, *shape) register array."""
    shape, et = value_type(t)
    if isinstance(attr, (ir.IntegerAttr, ir.BoolAttr)):
        v = np.array([attr.value])
    elif isinstance(attr, ir.FloatAttr):
        v = np.array([attr.value], np.float64)
    elif isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
        s = attr.get_splat_value()
        v = np.full((1,) + shape, s.value, np.float64 if isinstance(s, ir.FloatAttr) else np.int64)
    elif isinstance(attr, ir.DenseElementsAttr):
        try:
            v = np.array(attr).reshape((1,) + shape)
        except (TypeError, ValueError, RuntimeError) as e:
            raise EmulatorError(message=f"cannot read dense constant {attr}") from e
    else:
        raise EmulatorError(message=f"unsupported constant {attr}")
    if et.kind == "bool":
        return (v.astype(np.int64) & 1).astype(bool)
    return et.cast(v) if et.is_float else v.astype(et.reg)


@register("arith.constant")
def _constant(c: Compiler, op: ir.Operation) -> Instr:
    (o,) = c.outs(op)
    val = constant_array(op.attributes["value"], op.results[0].type)
    val.setflags(write=False)
    return constant(o, val)
