"""Reductions and scans (DESIGN §12): ``sum``, ``max``, ``min``, ``argmax``, ``argmin``, ``scan``, ``cumsum``.

- ``Reduce`` (``codegen/reductions.py``) reduces f32, i32 and i64 values; f16 and bf16 values are widened
  to f32 here and the result narrowed back (torch: ``x.sum()`` of f16 is f16, computed in f32).
- ``argmax`` / ``argmin`` are one ``Reduce`` of a packed i64 key per element (its value's order bits high,
  its index low), so the chained partials, butterfly and cross-wave pass of a max/min reduction carry
  value and index together; two ``ArgUnpack`` nodes decode the winning key into the value and the index.
- ``Scan`` (``codegen/scans.py``): inclusive or exclusive prefix combine (add, max, min) along a dim.
- ``TopK`` (``codegen/topk.py``): the argmax keys of the k largest elements along a dim, in order, as a new
  dim of size k; the same two ``ArgUnpack`` nodes decode values and indices.  ``TopKMerge`` merges a
  tile's winners with a loop's carried top-k (``wc.topk(..., carry=...)``).
"""

from __future__ import annotations

import sympy

from ..errors import DTypeError, ShapeError
from . import dtypes as dt
from .ops import PRIO_STRATEGY, Elementwise, Op, _need_register, cast
from .tracing import Value, active_tracer, current_loc
from .types import TensorType

# the dtypes a reduction or scan computes in; f16 and bf16 values are widened to f32 first
NATIVE = (dt.f32, dt.i32, dt.i64)
WIDENED = (dt.f16, dt.bf16)
SCAN_KINDS = ("add", "max", "min")


class Reduce(Op):
    """Reduction of ``x`` over one dimension (``kwargs``: ``dim``, ``kind`` = "sum" | "max" | "min" |
    "argmax" | "argmin"; an arg-reduction's result is the i64 key of the winner, see ``ArgUnpack``)."""

    name = "reduce"
    anchor, anchor_priority = "reduction_input", PRIO_STRATEGY
    index_flow = "reduce"
    expansion = "reduce_chain"  # partial reductions chained along the reduced dim; the last finalizes
    lowering = "wavec.codegen.reductions"
    emulated_ops = (
        "vector.reduction", "gpu.shuffle", "arith.maximumf", "arith.minimumf", "arith.addf", "arith.addi",
        "arith.maxsi", "arith.minsi", "arith.bitcast", "arith.cmpf", "arith.select", "arith.extsi",
        "arith.extui", "arith.shli", "arith.ori", "arith.xori", "arith.trunci", "arith.shrui",
        "memref.alloc", "vector.store", "vector.load", "gpu.barrier",
    )  # fmt: skip


class ArgUnpack(Elementwise):
    """The value (``kwargs["part"]`` = "value", f32 or i32) or the index (i32) of an arg-reduction's key."""

    name = "arg_unpack"
    lowering = "wavec.codegen.reductions"
    emulated_ops = ("arith.shrsi", "arith.trunci", "arith.xori", "arith.cmpi", "arith.select", "arith.bitcast")


def _operand(op: str, x: Value, dim, allowed: tuple = NATIVE + WIDENED) -> Value:
    x = _need_register(op, "x", x)
    if dim not in x.type.dims:
        raise ShapeError(current_loc(), op=op, message=f"dim {dim} is not a dimension of {list(x.shape)}")
    if x.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise DTypeError(current_loc(), op=op, message=f"x must be one of {names}, got {x.dtype}")
    return x


def _reduce(kind: str, x: Value, dim, dtype: dt.DType | None = None) -> Value:
    tr = active_tracer(kind)
    x = _operand(kind, x, dim)
    acc = dt.f32 if x.dtype in WIDENED else x.dtype
    out = x.dtype if dtype is None else dtype
    if out not in (x.dtype, acc):
        allowed = str(x.dtype) if acc == x.dtype else f"{x.dtype} or {acc}"
        raise DTypeError(current_loc(), op=kind, message=f"dtype must be {allowed}, got {out}")
    shape = tuple(d for d in x.shape if d != dim)
    r = tr.create(Reduce, (cast(x, acc) if acc != x.dtype else x,), TensorType(shape, acc), dim=dim, kind=kind)
    return cast(r, out) if out != acc else r


def sum(x: Value, dim, dtype: dt.DType | None = None) -> Value:  # noqa: A001 - the DSL's name
    """Sum of ``x`` over ``dim`` (the result drops ``dim``): f32, i32 (wrapping), i64, or f16/bf16 summed
    in f32; the result has ``x``'s dtype, or ``dtype=wc.f32`` keeps an f16/bf16 sum in f32."""
    return _reduce("sum", x, dim, dtype)


def max(x: Value, dim, dtype: dt.DType | None = None) -> Value:  # noqa: A001 - the DSL's name, like tkw.max
    """Maximum of ``x`` over ``dim`` (the result drops ``dim``); a NaN in the row gives NaN, as torch."""
    return _reduce("max", x, dim, dtype)


def min(x: Value, dim, dtype: dt.DType | None = None) -> Value:  # noqa: A001 - the DSL's name
    """Minimum of ``x`` over ``dim`` (the result drops ``dim``); a NaN in the row gives NaN, as torch."""
    return _reduce("min", x, dim, dtype)


def _arg(kind: str, x: Value, dim) -> tuple[Value, Value]:
    tr = active_tracer(kind)
    x = _operand(kind, x, dim, (dt.f32, dt.i32) + WIDENED)
    xv = cast(x, dt.f32) if x.dtype in WIDENED else x
    shape = tuple(d for d in x.shape if d != dim)
    key = tr.create(Reduce, (xv,), TensorType(shape, dt.i64), dim=dim, kind=kind)
    value = tr.create(ArgUnpack, (key,), TensorType(shape, xv.dtype), kind=kind, part="value")
    index = tr.create(ArgUnpack, (key,), TensorType(shape, dt.i32), kind=kind, part="index")
    return (cast(value, x.dtype) if xv.dtype != x.dtype else value), index


def argmax(x: Value, dim) -> tuple[Value, Value]:
    """``(values, indices)`` of the maximum of ``x`` over ``dim``, like ``torch.max(x, dim)``: indices are
    i32 coordinates along ``dim``, the first one on ties; NaN counts as larger than every number (the
    first NaN wins); -0.0 and +0.0 tie.  ``x`` is f32, i32, f16 or bf16 (compared exactly in f32)."""
    return _arg("argmax", x, dim)


def argmin(x: Value, dim) -> tuple[Value, Value]:
    """``(values, indices)`` of the minimum of ``x`` over ``dim``, like ``torch.min(x, dim)``: the first
    index on ties, and the first NaN wins (NaN propagates, as torch); see ``argmax``."""
    return _arg("argmin", x, dim)


class Scan(Op):
    """Prefix combine of ``x`` along ``kwargs["dim"]`` (``kind`` "add" | "max" | "min", ``exclusive``),
    same shape and dtype."""

    name = "scan"
    index_flow = "elementwise"  # the result has the input's layout
    lowering = "wavec.codegen.scans"
    emulated_ops = (
        "vector.extract", "vector.from_elements", "gpu.shuffle", "arith.select", "gpu.barrier", "memref.store",
        "memref.load", "memref.alloc", "arith.addi", "arith.addf", "arith.maxsi", "arith.minsi",
        "arith.maximumf", "arith.minimumf", "arith.cmpi",
    )  # fmt: skip


def scan(x: Value, dim, combine: str = "add", exclusive: bool = False) -> Value:
    """The prefix ``combine`` ("add", "max", "min") of ``x`` along ``dim`` (same shape and dtype):
    inclusive, element ``i`` combines ``x[0] .. x[i]`` (torch ``cumsum`` / ``cummax`` values); exclusive,
    ``x[0] .. x[i-1]`` with the identity (0, -inf / the dtype's minimum, +inf / its maximum) first.
    f32, i32, i64, or f16/bf16 scanned in f32.  Each thread scans its elements, the lanes of a wave combine
    with shuffles, and waves that split ``dim`` through shared memory; the wave's tile of ``dim`` must be
    one instruction tile (``vector_shapes[dim]`` = the wave's extent)."""
    tr = active_tracer("scan")
    x = _operand("scan", x, dim)
    if combine not in SCAN_KINDS:
        raise ShapeError(current_loc(), op="scan", message=f"combine must be one of {SCAN_KINDS}, got {combine!r}")
    if not isinstance(exclusive, bool):
        raise ShapeError(current_loc(), op="scan", message=f"exclusive must be a bool, got {exclusive!r}")
    if x.dtype in WIDENED:
        s = tr.create(Scan, (cast(x, dt.f32),), TensorType(x.shape, dt.f32), dim=dim, kind=combine, exclusive=exclusive)
        return cast(s, x.dtype)
    return tr.create(Scan, (x,), x.type, dim=dim, kind=combine, exclusive=exclusive)


def cumsum(x: Value, dim, exclusive: bool = False) -> Value:
    """The prefix sum of ``x`` along ``dim``, Wave's ``cumsum``: ``wc.scan(x, dim, "add", exclusive)``."""
    return scan(x, dim, "add", exclusive)


MAX_TOPK = 128  # k beyond this: one key per winner and thread stays in registers, so k is bounded


class TopK(Op):
    """The i64 argmax keys of the ``k`` largest elements of ``x`` along ``kwargs["dim"]``, largest first,
    along the new dim ``kwargs["k_dim"]`` (which replaces ``dim``; its size is k).  ``ArgUnpack`` decodes
    them."""

    name = "topk"
    anchor, anchor_priority = "reduction_input", PRIO_STRATEGY
    index_flow = "topk"  # the result: the input's layout without dim, each thread holding all k keys
    expansion = "gather_dim"  # one clone per output tile takes every input tile along dim
    lowering = "wavec.codegen.topk"
    emulated_ops = (
        "vector.shuffle", "vector.reduction", "vector.extract", "vector.broadcast", "vector.from_elements",
        "vector.store", "vector.load", "gpu.shuffle", "gpu.barrier", "memref.alloc", "memref.load",
        "arith.maxsi", "arith.cmpi", "arith.select", "arith.cmpf", "arith.bitcast", "arith.xori", "arith.extsi",
        "arith.extui", "arith.shli", "arith.ori", "arith.trunci", "arith.shrui", "arith.addi",
    )  # fmt: skip


class TopKMerge(Op):
    """The k largest of two sorted rows of k i64 argmax keys (``wc.topk``'s ``carry``): operands the
    tile's ``TopK`` keys and the carried values and indices (packed here), result keys like ``TopK``'s."""

    name = "topk_merge"
    index_flow = "elementwise"  # operands and result: one [.., K] layout, every thread holding its rows' k
    lowering = "wavec.codegen.topk"
    emulated_ops = (
        "vector.shuffle", "vector.extract", "vector.from_elements", "arith.maxsi", "arith.minsi", "arith.cmpf",
        "arith.cmpi", "arith.select", "arith.bitcast", "arith.xori", "arith.extsi", "arith.extui", "arith.shli",
        "arith.ori",
    )  # fmt: skip


def _carried(x: Value, shape: tuple, carry) -> tuple[Value, Value]:
    """The carried ``(values, indices)`` pair, checked against the result it merges into."""
    ok = isinstance(carry, tuple | list) and len(carry) == 2 and all(isinstance(c, Value) for c in carry)
    if not ok:
        raise ShapeError(current_loc(), op="topk", message="carry must be a (values, indices) pair of traced tensors")
    for name, c, want in (("values", carry[0], x.dtype), ("indices", carry[1], dt.i32)):
        c = _need_register("topk", f"carry {name}", c)
        if tuple(c.shape) != shape:
            raise ShapeError(
                current_loc(), op="topk", message=f"carry {name} must have shape {list(shape)}, got {list(c.shape)}"
            )
        if c.dtype != want:
            raise DTypeError(current_loc(), op="topk", message=f"carry {name} must be {want}, got {c.dtype}")
    return carry[0], carry[1]


def topk(x: Value, k_dim, dim, carry: tuple[Value, Value] | None = None) -> tuple[Value, Value]:
    """``(values, indices)`` of the ``k`` largest elements of ``x`` along ``dim``, like
    ``torch.topk(x, k, dim)`` (Wave's ``tkw.topk(src, K, N)``): sorted largest first, the lower index first
    among equal values, NaN larger than every number (torch's order); -0.0 and +0.0 tie.  ``k_dim`` is a
    new dimension symbol that replaces ``dim`` in the result (``[M, N]`` -> ``[M, K]``); its size is ``k``:
    bind it in ``subs`` and give it ``WorkgroupConstraint(K, K, None)``; ``k`` is at most 128 and, without
    ``carry``, at most the workgroup's (or loop's) tile of ``dim``.  ``values`` have ``x``'s dtype (f32,
    i32, f16 or bf16; halves compared exactly in f32), ``indices`` are i32 coordinates along ``dim`` (a
    loop tile's offset included).

    ``carry=(values, indices)``: the running top-k of a row walked in loop tiles (``wc.iterate`` over
    ``dim``): the result is the top-k of the carried pair and this tile together, so k may exceed the
    tile.  The carried pair is the previous iteration's result, or the loop's init: values the lowest
    (-inf, or the integer dtype's minimum) and indices -1, which lose every comparison (index -1 ranks
    after every index on ties).  Elements past the end of ``dim`` (a ragged last tile) never win."""
    tr = active_tracer("topk")
    x = _operand("topk", x, dim, (dt.f32, dt.i32) + WIDENED)
    if not isinstance(k_dim, sympy.Symbol) or k_dim in x.type.dims:
        raise ShapeError(
            current_loc(),
            op="topk",
            message=f"k_dim must be a new dimension symbol (not of {list(x.shape)}), got {k_dim!r}",
        )
    xv = cast(x, dt.f32) if x.dtype in WIDENED else x
    shape = tuple(k_dim if d == dim else d for d in x.shape)
    keys = tr.create(TopK, (xv,), TensorType(shape, dt.i64), dim=dim, k_dim=k_dim)
    if carry is not None:
        cv, ci = _carried(x, shape, carry)
        cv = cast(cv, dt.f32) if cv.dtype in WIDENED else cv
        keys = tr.create(TopKMerge, (keys, cv, ci), TensorType(shape, dt.i64), k_dim=k_dim)
    value = tr.create(ArgUnpack, (keys,), TensorType(shape, xv.dtype), kind="argmax", part="value")
    index = tr.create(ArgUnpack, (keys,), TensorType(shape, dt.i32), kind="argmax", part="index")
    return (cast(value, x.dtype) if xv.dtype != x.dtype else value), index
