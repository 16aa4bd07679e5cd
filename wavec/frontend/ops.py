"""The DSL ops.  Each op is one record (a class): its user stub (error outside a kernel) with its
docstring and shape/dtype rule, its role in index inference and expansion, the module that registers
its MLIR lowering and the emulated MLIR ops that give its semantics.  Passes dispatch on the record's
roles (``infer_indices``: ``anchor``/``index_flow``; ``expand``: ``expansion``), never on the class;
``tests/unit/test_op_records.py`` checks every record (see "The op record" in ``docs/design.md``).
"""

from __future__ import annotations

import builtins
import numbers
from typing import ClassVar

import sympy

from ..errors import DTypeError, ShapeError
from . import dtypes as dt
from .mapping import access_kwargs, check_injective, split_mapping
from .tracing import Value, active_tracer, current_loc
from .types import TensorType
from .unary_kinds import BIT_KINDS, UNARY_KINDS

# Anchor priorities (DESIGN §3): hardware layouts, then the copy distribution / reduction strategy, then
# the layout a write asks for; whatever is left gets the default layout from ``vector_shapes`` (0).
PRIO_HARDWARE, PRIO_STRATEGY, PRIO_WRITE, PRIO_DEFAULT = 3, 2, 1, 0


class Op:
    """The record of one op; subclasses override only what differs.

    - ``anchor`` / ``anchor_priority``: the ``infer_indices`` strategy (by name) that seeds a layout from
      this op, and the priority it seeds at (None: the op anchors nothing).
    - ``index_flow``: how layouts flow forward and backward through it (an ``infer_indices`` rule by name:
      ``"elementwise"`` one layout for result and operands, ``"broadcast"``/``"reduce"`` the smaller value
      takes the larger one's layout restricted to its dims, ``"permute"``, ``"loop"``; None: no flow).
    - ``expansion``: how ``expand`` clones it (an ``expand`` rule by name; ``"per_tile"``: once per
      instruction tile of its result, or of its value operand when it has no result).
    - ``lowering``: the module that registers its rule in ``codegen.lowering.LOWERINGS``.
    - ``emulated_ops``: the MLIR ops it lowers to, whose emulator semantics define it.
    """

    name: ClassVar[str] = "op"
    anchor: ClassVar[str | None] = None
    anchor_priority: ClassVar[int | None] = None
    index_flow: ClassVar[str | None] = None
    expansion: ClassVar[str] = "per_tile"
    lowering: ClassVar[str] = "wavec.codegen.lowering"
    emulated_ops: ClassVar[tuple[str, ...] | None] = None  # every record declares them (() = emits nothing)
    memory_arg: ClassVar[int | None] = None  # accesses: the position of the memory they read or write
    has_result: ClassVar[bool] = True  # whether the tracer gives it a typed value (``meta["type"]``)
    writes_memory: ClassVar[bool] = False  # a value-producing side effect (atomics): never cloned or hoisted


class Elementwise(Op):
    """Default record of an elementwise op: one layout for result and operands (operands with fewer
    dims take it restricted), cloned once per tile, lowered in ``codegen/lowering.py``."""

    index_flow: ClassVar[str | None] = "elementwise"


def _shape_error(op: str, message: str) -> ShapeError:
    return ShapeError(current_loc(), op=op, message=message)


def _dtype_error(op: str, message: str) -> DTypeError:
    return DTypeError(current_loc(), op=op, message=message)


def _need_value(op: str, name: str, x) -> Value:
    if not isinstance(x, Value):
        raise _shape_error(op, f"{name} must be a traced tensor, got {type(x).__name__}")
    return x


def _need_arithmetic(op: str, x: Value) -> None:
    if x.dtype.is_fp8:
        raise _dtype_error(op, f"{x.dtype} is a storage type; wc.cast it to f16, bf16 or f32 to compute on it")


def _need_memory(op: str, name: str, x) -> Value:
    x = _need_value(op, name, x)
    if x.type.address_space is None:
        raise _shape_error(op, f"{name} must be a Memory argument, got a register value")
    return x


def _need_register(op: str, name: str, x) -> Value:
    x = _need_value(op, name, x)
    if x.type.address_space is not None:
        raise _shape_error(op, f"{name} is a Memory argument; wc.read it first")
    return x


class Read(Op):
    name = "read"
    anchor, anchor_priority = "copy_distribution", PRIO_STRATEGY  # staging copies: the whole workgroup
    index_flow = "indexed_access"  # index values take the read's layout (``wavec/frontend/mapping.py``)
    memory_arg = 0
    lowering = "wavec.codegen.memory_access"
    emulated_ops = ("vector.load", "nvgpu.ldmatrix", "scf.if")


def read(memory: Value, elements_per_thread: int | None = None, mapping: dict | None = None) -> Value:
    """Load a Memory tile into registers (each thread gets the elements its layout assigns it).

    Batch dimensions (``WorkgroupConstraint(d, 1, axis)``) are indexed by the workgroup and dropped.
    ``mapping={d: e}`` (``frontend/mapping.py``): a batch-coordinate expression drops ``d`` (GQA reads kv
    head ``wc.tile_start(H) // (H // KVH)``); an index tensor replaces ``d`` by its dims (a gather:
    ``wc.read(x, mapping={T: wc.read(ids)})``, x [T, K], ids [M] i32, is ``Register[M, K]``)."""
    tr = active_tracer("read")
    mem = _need_memory("read", "memory", memory)
    static, dynamic, shape = split_mapping(tr, "read", mem, mapping)
    return tr.create(
        Read,
        (mem, *dynamic.values()),
        TensorType(shape, mem.type.dtype),
        elements_per_thread=elements_per_thread,
        **access_kwargs(static, dynamic),
    )


class Write(Op):
    name = "write"
    anchor, anchor_priority = "written_value", PRIO_WRITE
    index_flow = "indexed_access"
    memory_arg = 1
    has_result = False
    lowering = "wavec.codegen.memory_access"
    emulated_ops = ("vector.store", "scf.if")


def _checked_store(op: str, value: Value, memory: Value, mapping: dict | None) -> tuple:
    """(value, memory, kwargs, index values) of a store-like op, its shapes and dtypes checked."""
    tr = active_tracer(op)
    val = _need_register(op, "value", value)
    mem = _need_memory(op, "memory", memory)
    static, dynamic, held = split_mapping(tr, op, mem, mapping)
    if set(val.type.dims) != set(held) or len(val.type.dims) != len(held):
        raise _shape_error(
            op,
            f"value of shape {list(val.shape)} cannot be written to memory of shape {list(mem.shape)}"
            + (f" (its registers hold {list(held)})" if list(held) != list(mem.shape) else ""),
        )
    if val.dtype != mem.dtype:
        raise _dtype_error(op, f"value is {val.dtype} but memory is {mem.dtype}; use wc.cast")
    return val, mem, access_kwargs(static, dynamic), tuple(dynamic.values())


def write(value: Value, memory: Value, mapping: dict | None = None) -> None:
    """Store a register tile into a Memory argument (batch dims indexed by the workgroup); ``mapping`` as
    for ``read`` (an index tensor: a scatter; lanes storing to one address race: use ``wc.atomic_add``)."""
    val, mem, kwargs, idx = _checked_store("write", value, memory, mapping)
    tr = active_tracer("write")
    check_injective("write", val, mem, dict(zip(kwargs.get("dynamic", ()), idx)), tr.batch_dims)
    tr.create(Write, (val, mem, *idx), None, **kwargs)


class Arange(Op):
    """Each element's coordinate along ``kwargs["dim"]`` (i32)."""

    name = "arange"
    lowering = "wavec.codegen.lowering_ops"
    emulated_ops = ("vector.broadcast", "arith.index_cast", "arith.addi")


def arange(dim: sympy.Symbol) -> Value:
    """``Register[dim, i32]``: each element holds its own coordinate along ``dim`` (for masks)."""
    tr = active_tracer("arange")
    if not isinstance(dim, sympy.Symbol):
        raise _shape_error("arange", f"dim must be a wc.sym symbol, got {dim!r}")
    return tr.create(Arange, (), TensorType((dim,), dt.i32), dim=dim)


def index(dim: sympy.Symbol) -> Value:
    """``Register[dim, i32]`` of each element's coordinate along ``dim`` (Wave's ``self_index``): builds
    computed index mappings, e.g. ``mapping={SLOT: blk * PAGE + wc.index(S) % PAGE}``."""
    return arange(dim)


def tile_start(dim: sympy.Symbol) -> sympy.Expr:
    """The first coordinate of ``dim`` in this workgroup's tile — for a batch dimension, its coordinate.
    An index expression (not a traced value): for ``mapping=`` and ``iterate(..., end=)``."""
    from ..indexing.symbols import tile_start_symbol

    if not isinstance(dim, sympy.Symbol):
        raise _shape_error("tile_start", f"dim must be a wc.sym symbol, got {dim!r}")
    return tile_start_symbol(dim)


class RegisterInit(Op):
    name = "register"
    emulated_ops = ("arith.constant",)


def register(shape: tuple, dtype: dt.DType, init) -> Value:
    """``Register[shape, dtype](init)``: a register tile filled with ``init``.  Batch dimensions are
    dropped, as ``read`` drops them: a workgroup holds one coordinate of each, so the tile combines with
    values read from memory and writes back to a memory with that dimension."""
    tr = active_tracer("Register")
    shape = tuple(d for d in shape if d not in tr.batch_dims)
    if not isinstance(init, numbers.Real):
        raise DTypeError(current_loc(), op="Register", message=f"init must be a Python number, got {init!r}")
    value: int | float
    if dtype.is_float:
        value = float(init)
    else:  # an integral init directly: a large i64 would not survive a float round trip
        value = int(init) if isinstance(init, numbers.Integral) else int(float(init))
    return tr.create(RegisterInit, (), TensorType(shape, dtype), value=value)


class MMA(Op):
    name = "mma"
    anchor, anchor_priority = "mma_operands", PRIO_HARDWARE
    expansion = "mma_chain"  # clones chained along K, K steps outermost
    # (the compare, mask and select zero an operand's padding along K: codegen/padding.py)
    emulated_ops = (
        "nvgpu.mma.sync", "amdgpu.mfma", "nvvm.convert.float.to.tf32", "arith.cmpi", "vector.from_elements",
        "arith.select",
    )  # fmt: skip

    @staticmethod
    def dims(node) -> tuple:
        """(M, N, K) of an mma node."""
        a, b, acc = node.args
        m, n = acc.meta["type"].shape
        k = a.meta["type"].shape[1]
        return m, n, k


def mma(a: Value, b: Value, acc: Value) -> Value:
    """``acc + a @ b.T`` on the matrix units: a is [M, K], b is [N, K], acc is [M, N]."""
    tr = active_tracer("mma")
    a, b, acc = (_need_register("mma", n, x) for n, x in (("a", a), ("b", b), ("acc", acc)))
    if len(a.shape) != 2 or len(b.shape) != 2 or len(acc.shape) != 2:
        raise _shape_error("mma", "a, b and acc must be 2-D: a [M, K], b [N, K], acc [M, N]")
    (m, k), (n, k2), (m2, n2) = a.shape, b.shape, acc.shape
    if k != k2 or m != m2 or n != n2:
        raise _shape_error(
            "mma",
            f"shapes do not contract: a {list(a.shape)}, "
            f"b {list(b.shape)}, acc {list(acc.shape)} (expected a [M, K], b [N, K], acc [M, N])",
        )
    if a.dtype != b.dtype:
        raise _dtype_error("mma", f"a is {a.dtype} but b is {b.dtype}")
    return tr.create(MMA, (a, b, acc), TensorType(acc.shape, acc.dtype))


_CMP_OPS = {"lt", "le", "gt", "ge", "eq", "ne"}
_NOT_I1 = {"floordiv", "mod", "shl", "shr"}  # floordiv, mod: Python semantics (remainder has the divisor's sign)
_INT_ONLY = _NOT_I1 | set(BIT_KINDS)
_FLOAT_ONLY = {"div_approx"}  # x / y to about 2 ulp (div.approx.f32 on NVIDIA): what silu and sigmoid divide by
BINARY_KINDS = {"add", "sub", "mul", "div", "maximum", "minimum"} | _INT_ONLY | _CMP_OPS | _FLOAT_ONLY


class Binary(Elementwise):
    name = "binary"
    emulated_ops = ("arith.addf", "arith.addi", "arith.mulf", "arith.divf", "arith.cmpf", "arith.cmpi", "arith.andi",
                    "arith.ori", "arith.xori", "arith.shli", "arith.shrsi", "arith.shrui")  # fmt: skip


def _broadcast_shapes(op: str, sa: tuple, sb: tuple) -> tuple:
    """Positional broadcasting (equal ranks, 1 against any dim), else by dimension name: ``[M]`` and
    ``[N]`` give ``[M, N]``, ``[N]`` and ``[M, N]`` give ``[M, N]`` in either order (each operand's dims
    in the result's order, like Wave's named dims)."""
    if not sa or not sb:  # a rank-0 value (a scalar argument) broadcasts to any shape
        return sa or sb
    if len(sa) == len(sb) and all(x == y or 1 in (x, y) for x, y in zip(sa, sb)):
        return tuple(y if x == 1 else x for x, y in zip(sa, sb))
    for first, second in ((sa, sb), (sb, sa)):
        out = tuple(first) + tuple(d for d in second if d not in first)
        if 1 not in out and all([d for d in out if d in s] == list(s) for s in (sa, sb)):
            return out
    raise _shape_error(
        op, f"shapes {list(sa)} and {list(sb)} do not broadcast; use x[None, :], wc.broadcast or wc.permute"
    )


def binary(kind: str, x, y) -> Value:
    """``x <kind> y`` elementwise; numbers broadcast.  ``kind``: add, sub, mul, div, maximum, minimum, a
    comparison (lt le gt ge eq ne, giving i1), on integers floordiv, mod, and, or, xor, shl, shr (the
    operators ``// % & | ^ << >>``; and/or/xor also combine i1 masks: ``(r < M) & (c < N)``), or on floats
    div_approx (``x / y`` to about 2 ulp: one reciprocal and a multiply on NVIDIA instead of the IEEE
    division's dozen instructions; for activations like silu, not for statistics)."""
    tr = active_tracer(kind)
    if kind not in BINARY_KINDS:
        raise _shape_error("binary", f"unknown kind {kind!r}; accepted: {sorted(BINARY_KINDS)}")
    if not isinstance(x, Value) and not isinstance(y, Value):
        raise _shape_error(kind, "at least one operand must be a traced tensor")
    ref = x if isinstance(x, Value) else y
    _need_arithmetic(kind, ref)
    if (kind in _INT_ONLY and ref.dtype.is_float) or (kind in _NOT_I1 and ref.dtype == dt.i1):
        raise _dtype_error(kind, f"needs integer operands, got {ref.dtype}")
    if kind in _FLOAT_ONLY and not ref.dtype.is_float:
        raise _dtype_error(kind, f"needs float operands, got {ref.dtype}")
    for v in (x, y):
        if isinstance(v, Value):
            _need_register(kind, "operand", v)
            if v.dtype != ref.dtype:
                raise _dtype_error(kind, f"operand dtypes differ: {x.dtype} vs {y.dtype}; use wc.cast")
        elif isinstance(v, sympy.Expr) and not ref.dtype.is_float:
            pass  # a shape expression (``cols < N``): evaluated at run time as i32
        elif not isinstance(v, (int, float)):
            raise _shape_error(kind, f"operand {v!r} is neither a tensor nor a number")
    shape = _broadcast_shapes(kind, x.shape, y.shape) if isinstance(x, Value) and isinstance(y, Value) else ref.shape
    out_dtype = dt.i1 if kind in _CMP_OPS else ref.dtype
    return tr.create(Binary, (x, y), TensorType(shape, out_dtype), kind=kind)


def clip(x, lo, hi) -> Value:
    """``min(max(x, lo), hi)`` elementwise (a clamped index: ``wc.clip(wc.index(M) - wc.index(N), -R, R)``)."""
    return binary("minimum", binary("maximum", x, lo), hi)


def maximum(x, y) -> Value:
    """Elementwise maximum (NaN-propagating on floats)."""
    return binary("maximum", x, y)


def minimum(x, y) -> Value:
    """Elementwise minimum (NaN-propagating on floats)."""
    return binary("minimum", x, y)


class Unary(Elementwise):
    """A math function of ``UNARY_KINDS`` (``kwargs["kind"]``), elementwise."""

    name = "unary"
    emulated_ops = tuple(sorted({op for k in UNARY_KINDS.values() for op in (k.float_op, k.int_op) if op}))


def unary(kind: str, x: Value) -> Value:
    """``kind(x)`` elementwise, ``kind`` one of ``UNARY_KINDS`` (wavec/frontend/unary_kinds.py)."""
    if kind not in UNARY_KINDS:
        raise _shape_error("unary", f"unknown kind {kind!r}; accepted: {', '.join(UNARY_KINDS)}")
    tr = active_tracer(kind)
    x = _need_register(kind, "x", x)
    _need_arithmetic(kind, x)
    if UNARY_KINDS[kind].int_op is None and not x.dtype.is_float:
        raise _dtype_error(kind, f"needs a float operand, got {x.dtype}")
    return tr.create(Unary, (x,), x.type, kind=kind)


class Cast(Elementwise):
    name = "cast"
    lowering = "wavec.codegen.casts"
    emulated_ops = ("arith.extf", "arith.truncf", "arith.fptosi", "arith.fptoui", "arith.sitofp", "arith.uitofp",
                    "arith.extui", "arith.extsi", "arith.trunci", "arith.maximumf", "arith.minimumf",
                    "arith.select", "arith.cmpf", "arith.bitcast", "arith.shrui", "math.roundeven")  # fmt: skip


def cast(x: Value, dtype: dt.DType) -> Value:
    """``x`` converted to ``dtype``, saturating (``codegen/casts.py``): floats round to nearest even, to fp8
    clamped to its finite range (NaN stays NaN); float to integer truncates, clamped to the integer range
    (NaN gives 0); integer narrowing wraps.  ``wc.cast(acc, wc.f16)``, ``wc.cast(x * s, wc.f8e4m3fn)``."""
    tr = active_tracer("cast")
    x = _need_register("cast", "x", x)
    if not isinstance(dtype, dt.DType):
        raise _dtype_error("cast", f"dtype must be a wavec dtype, got {dtype!r}")
    return tr.create(Cast, (x,), TensorType(x.shape, dtype), dtype=dtype)


class Select(Elementwise):
    name = "select"
    emulated_ops = ("arith.select",)


def where(cond: Value, x, y) -> Value:
    """``x`` where ``cond`` holds, else ``y``; either may be a Python number (``wc.where(m, s, -inf)``)."""
    tr = active_tracer("where")
    cond = _need_register("where", "cond", cond)
    if cond.dtype != dt.i1:
        raise _dtype_error("where", f"cond must be a comparison result, got {cond.dtype}")
    vals = [v for v in (x, y) if isinstance(v, Value)]
    if not vals:
        raise _shape_error("where", "x or y must be a traced tensor")
    for name, v in (("x", x), ("y", y)):
        if isinstance(v, Value):
            _need_register("where", name, v)
        elif not isinstance(v, (int, float)):
            raise _shape_error("where", f"{name} = {v!r} is neither a tensor nor a number")
    if len(vals) == 2 and x.dtype != y.dtype:
        raise _dtype_error("where", f"x is {x.dtype} but y is {y.dtype}")
    shape = cond.shape
    for v in vals:
        shape = _broadcast_shapes("where", shape, v.shape)
    return tr.create(Select, (cond, x, y), TensorType(shape, vals[0].dtype))


class Broadcast(Op):
    name = "broadcast"
    index_flow = "broadcast"
    emulated_ops = ("vector.shuffle",)


def broadcast(x: Value, shape) -> Value:
    """Give ``x`` the dimensions of ``shape`` (every dim of x must appear in shape, in order); batch
    dimensions of ``shape`` are dropped, as ``read`` and ``Register`` drop them."""
    tr = active_tracer("broadcast")
    x = _need_register("broadcast", "x", x)
    shape = tuple(d for d in shape if d not in tr.batch_dims)
    pos = [shape.index(d) if d in shape else -1 for d in x.type.dims]
    if -1 in pos or pos != sorted(pos):
        raise _shape_error("broadcast", f"cannot broadcast {list(x.shape)} to {list(shape)}")
    return tr.create(Broadcast, (x,), TensorType(shape, x.dtype), shape=shape)


def expand_dims(x: Value, key) -> Value:
    """``x[None, :]``: insert unit dimensions (the only indexing the DSL supports)."""
    key = key if isinstance(key, tuple) else (key,)
    dims = list(x.shape)
    if builtins.sum(k is not None for k in key) != len(dims) or any(k is not None and k != slice(None) for k in key):
        raise _shape_error(
            "getitem", f"only x[None, :]-style indexing is supported; got {key} on a tensor of shape {list(x.shape)}"
        )
    it = iter(dims)
    shape = tuple(1 if k is None else next(it) for k in key)
    tr = active_tracer("getitem")
    return tr.create(Broadcast, (x,), TensorType(shape, x.dtype), shape=shape)


class Permute(Op):
    """Reorder the dimensions of a register value (free: the register vector is unchanged)."""

    name = "permute"
    index_flow = "permute"
    lowering = "wavec.codegen.lowering_ops"
    emulated_ops = ()  # free: layouts order registers by dimension name


def permute(x: Value, dims) -> Value:
    """``x`` with its dimensions in the order ``dims`` (a permutation of x's dimensions)."""
    tr = active_tracer("permute")
    x = _need_register("permute", "x", x)
    dims = tuple(dims)
    if sorted(map(str, dims)) != sorted(map(str, x.shape)) or len(set(dims)) != len(dims):
        raise _shape_error("permute", f"dims {list(dims)} are not a permutation of the dimensions {list(x.shape)} of x")
    return tr.create(Permute, (x,), TensorType(dims, x.dtype), dims=dims)


class Iterate(Op):
    name = "iterate"
    index_flow = "loop"  # init, iter_arg, yielded value and result share one layout; captures too
    expansion = "loop"  # the body expands inside the loop, carried values per tile
    emulated_ops = ("scf.for",)
    has_result = False  # its values are the GetResult nodes


class GetResult(Op):
    name = "get_result"
    expansion = "loop_result"  # cloned by its loop's expansion
    emulated_ops = ()  # one of the scf.for results


def iterate(dim: sympy.Symbol, init_args: list, start: sympy.Expr | None = None, end: sympy.Expr | None = None):
    """Decorator: run the body once per tile of ``dim`` (its TilingConstraint) with loop-carried values.

    The body takes the carried values and returns their next values; the decorated name becomes the
    final value (or a tuple of them).  ``start`` / ``end``: cover only the tiles from the one holding
    coordinate ``start`` to the one holding ``end - 1`` (``end`` clamped to the size of ``dim``); index
    expressions of ``wc.tile_start(...)`` and shape symbols.  Causal attention stops at the diagonal with
    ``end=wc.tile_start(M) + BLOCK_M``; two loops over one dim split masked tiles from unmasked ones."""
    tr = active_tracer("iterate")
    inits = [_need_register("iterate", f"init_args[{i}]", v) for i, v in enumerate(init_args)]
    loc = current_loc()

    def deco(body):
        name = f"iterate_{len(tr.subgraphs)}"
        g = tr.push(name)
        params = []
        for i, v in enumerate(inits):
            ph = g.placeholder(f"iter_arg_{i}")
            ph.meta.update(type=v.type, loc=loc, role="iter_arg", index=i)
            params.append(Value(ph))
        tr.loops.append(dim)
        try:
            out = body(*params)
        finally:
            tr.loops.pop()
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(inits):
            raise ShapeError(loc, op="iterate", message=f"body returns {len(outs)} values for {len(inits)} init_args")
        for i, (o, v) in enumerate(zip(outs, inits)):
            o = _need_register("iterate", f"returned value {i}", o)
            if o.type != v.type:
                raise ShapeError(loc, op="iterate", message=f"returned value {i} is {o.type} but its init is {v.type}")
        g.output(tuple(tr.lift(o) for o in outs))
        tr.pop()
        captures = tuple(tr.captures.get(g, {}).keys())
        extra = {k: sympy.sympify(v) for k, v in (("start", start), ("end", end)) if v is not None}
        it = tr.create(Iterate, (tuple(inits), captures), None, loc=loc, dim=dim, subgraph=name, **extra)
        results = [tr.create(GetResult, (it,), v.type, loc=loc, index=i) for i, v in enumerate(inits)]
        return results[0] if len(results) == 1 else tuple(results)

    return deco


# ----- ops that passes create (no user stub): shared memory, barriers, asynchronous copies -----


class Allocate(Op):
    """A shared-memory tile (``kwargs``: ``tile`` per dim, ``base`` per dim = the tile's origin in the
    tensor's coordinates, ``stages`` buffers for pipelining, ``pad`` elements per row)."""

    name = "allocate"
    lowering = "wavec.codegen.memory_access"
    emulated_ops = ("memref.alloc",)


class Barrier(Op):
    name = "barrier"
    emulated_ops = ("gpu.barrier",)
    has_result = False


class WideStore(Op):
    """Four global writes of mma.sync accumulator fragments of neighbouring N tiles (``args`` = the four
    values, then the memory), stored as one 16-byte run per lane and row after a transpose within each
    quad of lanes (``passes/widen_stores.py``); ``meta["narrow"]`` keeps the four writes it replaced."""

    name = "wide_store"
    lowering = "wavec.codegen.memory_access"
    emulated_ops = ("gpu.shuffle", "vector.store")


class AsyncCopy(Op):
    """Global -> shared copy issued asynchronously (cp.async); ``args = (global memory, shared tile)``."""

    name = "async_copy"
    memory_arg = 0
    lowering = "wavec.codegen.memory_access"
    emulated_ops = ("nvgpu.device_async_copy",)


class AsyncCommit(Op):
    name = "async_commit"
    emulated_ops = ("nvgpu.device_async_create_group",)


class AsyncWait(Op):
    """Wait until at most ``kwargs["pending"]`` committed copy groups are still in flight."""

    name = "async_wait"
    emulated_ops = ("nvgpu.device_async_wait",)


class ConvertLayout(Op):
    """The same values in another thread layout (inserted by ``convert_layouts``; ``kwargs["via"]`` is
    "registers" or "shared")."""

    name = "convert_layout"
    expansion = "regroup"  # each output tile takes every input tile it overlaps
    lowering = "wavec.codegen.convert"
    emulated_ops = ("vector.shuffle", "gpu.shuffle", "memref.store", "memref.load")
