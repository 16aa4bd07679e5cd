"""The DSL's math functions: one stub per ``wc.unary`` kind (the records are ``Unary``/``Binary`` in
``ops.py``, the kinds in ``unary_kinds.py``), and the functions built from them at trace time
(``sigmoid``, ``silu``, ``gelu``, ``pow``).  The built ones add no record: they trace into the ops they
are made of, whose lowerings and emulated MLIR ops give their semantics.  On f16 and bf16 they compute in
f32 and round once at the end, as torch does (its "opmath" type), so a half-precision result is within
one rounding of torch's.
"""

from __future__ import annotations

import builtins

from . import dtypes as dt
from .ops import _dtype_error, _need_register, _shape_error, binary, cast, unary
from .tracing import Value


def exp(x: Value) -> Value:
    """``e ** x`` elementwise (floats): ``wc.exp(s - m)``."""
    return unary("exp", x)


def exp2(x: Value) -> Value:
    """``2 ** x`` elementwise (floats): ``wc.exp2(s * LOG2E)``."""
    return unary("exp2", x)


def log(x: Value) -> Value:
    """Natural logarithm elementwise (floats): ``wc.log(wc.sum(wc.exp(x), N))``."""
    return unary("log", x)


def log2(x: Value) -> Value:
    """Base-2 logarithm elementwise (floats): ``wc.log2(x)``."""
    return unary("log2", x)


def log1p(x: Value) -> Value:
    """``log(1 + x)`` elementwise (floats), accurate for small ``x``: ``wc.log1p(wc.exp(-wc.abs(x)))``."""
    return unary("log1p", x)


def sqrt(x: Value) -> Value:
    """Square root elementwise (floats): ``wc.sqrt(var + eps)``."""
    return unary("sqrt", x)


def rsqrt(x: Value) -> Value:
    """``1 / sqrt(x)`` elementwise (floats): ``x * wc.rsqrt(wc.sum(x * x, N) / N + eps)``."""
    return unary("rsqrt", x)


def tanh(x: Value) -> Value:
    """Hyperbolic tangent elementwise (floats): ``wc.tanh(x)``."""
    return unary("tanh", x)


def abs(x: Value) -> Value:  # noqa: A001 - the DSL's name, like torch.abs
    """Absolute value elementwise (floats and integers; Python's ``abs(x)`` is the same op):
    ``wc.abs(x)``.  On integers the most negative value stays itself, as torch wraps."""
    return unary("abs", x)


def sin(x: Value) -> Value:
    """Sine elementwise (floats, radians): ``wc.sin(pos * freq)``."""
    return unary("sin", x)


def cos(x: Value) -> Value:
    """Cosine elementwise (floats, radians): ``wc.cos(pos * freq)``."""
    return unary("cos", x)


def erf(x: Value) -> Value:
    """The error function elementwise (floats): ``2 / sqrt(pi) * integral of exp(-t**2) from 0 to x``;
    ``wc.erf(x * 0.7071067811865476)``."""
    return unary("erf", x)


def floor(x: Value) -> Value:
    """The largest integer value not above ``x``, elementwise (floats; the result stays a float, as
    ``torch.floor``): ``wc.floor(x)`` or ``math.floor(x)``."""
    return unary("floor", x)


def ceil(x: Value) -> Value:
    """The smallest integer value not below ``x``, elementwise (floats, result a float): ``wc.ceil(x)``
    or ``math.ceil(x)``."""
    return unary("ceil", x)


def round(x: Value) -> Value:  # noqa: A001 - the DSL's name, like torch.round
    """``x`` rounded to the nearest integer value, halves to even (``torch.round``: 2.5 -> 2.0, -0.5 ->
    -0.0), elementwise (floats, result a float): ``wc.round(x * 127.0)`` or ``round(x)``."""
    return unary("round", x)


def reciprocal(x: Value) -> Value:
    """``1 / x`` elementwise: ``wc.reciprocal(wc.sum(p, N))``."""
    return binary("div", 1.0, x)


def _float_operand(op: str, x) -> Value:
    x = _need_register(op, "x", x)
    if not x.dtype.is_float:
        raise _dtype_error(op, f"needs a float operand, got {x.dtype}")
    return x


def _in_f32(x: Value, fn) -> Value:
    """``fn`` of ``x`` computed in f32 and rounded once to x's type (torch's opmath for half types)."""
    if x.dtype == dt.f32:
        return fn(x)
    return cast(fn(cast(x, dt.f32)), x.dtype)


_LOG2E = 1.4426950408889634


def _exp_neg(h: Value) -> Value:
    """``exp(-h)`` as ``exp2(-h * log2 e)``: one ``ex2.approx`` on NVIDIA where ``math.exp`` is a polynomial
    of about 30 instructions (the MoE up-projection's SiLU epilogue cost as much as its main loop)."""
    return unary("exp2", h * -_LOG2E)


def sigmoid(x: Value) -> Value:
    """``1 / (1 + exp(-x))`` elementwise (floats; f16/bf16 computed in f32; a few ulp of f32, as a fast-math
    ``torch.sigmoid``): ``wc.sigmoid(gate)``."""
    return _in_f32(_float_operand("sigmoid", x), lambda h: binary("div_approx", 1.0, _exp_neg(h) + 1.0))


def silu(x: Value) -> Value:
    """``x * sigmoid(x)`` elementwise (SiLU / swish; floats, f16/bf16 computed in f32; a few ulp of f32), as
    ``torch.nn.functional.silu``: ``wc.silu(gate) * up``."""
    return _in_f32(_float_operand("silu", x), lambda h: binary("div_approx", h, _exp_neg(h) + 1.0))


_SQRT1_2 = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654


def gelu(x: Value, approximate: str = "none") -> Value:
    """GELU elementwise (floats; f16/bf16 computed in f32), as ``torch.nn.functional.gelu``:
    ``approximate="none"``: ``x / 2 * (1 + erf(x / sqrt(2)))``; ``"tanh"``:
    ``x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))``.  ``wc.gelu(h, approximate="tanh")``."""
    x = _float_operand("gelu", x)
    if approximate == "none":
        return _in_f32(x, lambda h: h * 0.5 * (unary("erf", h * _SQRT1_2) + 1.0))
    if approximate == "tanh":
        return _in_f32(x, lambda h: h * 0.5 * (unary("tanh", (h + h * h * h * 0.044715) * _SQRT_2_OVER_PI) + 1.0))
    raise _shape_error("gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")


def _ones_like(x: Value) -> Value:
    """1 in x's type and shape, NaN and inf included (``pow(x, 0) == 1`` as in torch)."""
    return cast(binary("or", binary("eq", x, x), binary("ne", x, x)), x.dtype)


def pow(x: Value, n: int) -> Value:  # noqa: A001 - the DSL's name, like torch.pow
    """``x ** n`` elementwise for a Python integer ``n`` (floats and integers; ``v ** n`` is the same op):
    ``wc.pow(x, 2)``, ``x ** 3``, ``x ** -1``.  Multiplies by repeated squaring (``x ** 2`` is one
    ``x * x``, exact as torch's; larger ``n`` round once per multiply, within ``2 * log2(n)`` ulp);
    a negative ``n`` is ``1 / x ** -n`` (floats only: torch refuses integers to negative powers);
    f16/bf16 compute in f32 and round once, as torch; integers wrap on overflow, as torch's do."""
    x = _need_register("pow", "x", x)
    if isinstance(n, bool) or not isinstance(n, int):
        why = "wc.exp2(y * wc.log2(x)) for a real power" if x.dtype.is_float else "an integer power"
        raise _shape_error("pow", f"the exponent must be a Python int, got {type(n).__name__} {n!r}; use {why}")
    if x.dtype == dt.i1:
        raise _dtype_error("pow", "needs a float or integer operand, got i1")
    if n < 0 and not x.dtype.is_float:
        raise _dtype_error("pow", f"integers to negative powers ({n}) are not allowed (as in torch)")
    if n == 0:
        return _ones_like(x)
    if x.dtype.is_float:
        return _in_f32(x, lambda h: _power(h, n))
    return _power(x, n)


def _power(x: Value, n: int) -> Value:
    result, base, m = None, x, builtins.abs(n)
    while m:
        if m & 1:
            result = base if result is None else binary("mul", result, base)
        m >>= 1
        if m:
            base = binary("mul", base, base)
    assert result is not None  # n != 0
    return binary("div", 1.0, result) if n < 0 else result
