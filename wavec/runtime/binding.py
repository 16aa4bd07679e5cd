"""Argument validation and symbol binding for a launch, plus grid evaluation.

Requires: torch, imported lazily when the first :class:`BindingPlan` is built.

Guarantees:

* :func:`bind_arguments` returns the value of every symbol (dynamic and compile-time bound) or raises
  :class:`~wavec.errors.ArgumentError` naming the argument, what was expected and what was got.  Checks:
  argument count, tensor type, dtype, rank, device (one device of ``device_type``), row-major
  contiguity and base-pointer alignment (else :class:`~wavec.errors.StrideMiss`: a kernel from
  ``wc.compile`` launches its strided variant; a strided variant's plan checks strides instead:
  ``runtime/strides.py``), static dims, symbol consistency across arguments, divisibility,
  int32 range of dynamic symbols, and outputs overlapping another argument's memory.
* :func:`grid_for` evaluates the grid expressions, compiled once per metadata into a function built from
  a whitelisted AST (int literals, symbol names, ``+ - * // %``, unary minus, ``min``/``max``) and run
  with no builtins.
* The per-metadata work is done once in a :class:`BindingPlan`; a call compares precomputed tuples.  What
  depends only on the argument shapes (symbol values and their checks, sizes in bytes, the grid) is
  derived once per distinct shapes (``_by_shapes``); the per-tensor checks and the overlap of outputs run
  on every call.
"""

from __future__ import annotations

import ast
import keyword
import math
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from wavec.abi import HIGH_WORD, SMS_NAME  # a persistent grid's SM count: the launcher adds it to the values
from wavec.errors import AlignmentMiss, ArgumentError, LaunchError
from wavec.frontend.dtypes import TORCH_NAMES
from wavec.runtime.artifact import DTYPES, KernelMetadata
from wavec.runtime.strides import StridedBinding, dense_miss

__all__ = ["BindingPlan", "plan_for", "bind_arguments", "grid_for", "compile_grid", "INT32_MAX", "SMS_NAME"]


INT32_MAX = 2**31 - 1
GRID_LIMITS = (2**31 - 1, 65535, 65535)
_TORCH_DTYPE_NAMES = TORCH_NAMES
_DEVICE_TYPES = ("cuda", "cpu")
_MAX_SHAPES = 256  # distinct argument shapes remembered per plan
_F32, _F32_TO_I32, _F16, _U16 = struct.Struct("<f"), struct.Struct("<i"), struct.Struct("<e"), struct.Struct("<H")
FLOAT_SCALAR_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


INT_SCALAR_RANGES = {"i32": range(-(2**31), 2**31), "i64": range(-(2**63), 2**63)}


def low_word(x: int) -> int:
    """The low 32 bits of ``x`` as a signed int32 (the launch constants are int32)."""
    return (x + 2**31) % 2**32 - 2**31


def float_constant(dtype: str, x: float) -> int:
    """The i32 launch constant of a float scalar ``x`` of ``dtype`` ("f32", "f16", "bf16"): its bits, an
    f16's or bf16's in the low half (the kernel truncates and bitcasts: ``emitter.scalar_from_constant``).
    Rounded as torch converts a Python float: to f32, then to f16 / bf16 to nearest even; a finite ``x``
    that becomes infinite raises ``OverflowError``."""
    bits = _F32_TO_I32.unpack(_F32.pack(x))[0]  # OverflowError beyond f32's range
    if dtype == "f32":
        return bits
    f = _F32.unpack(_F32.pack(x))[0]
    if dtype == "f16":
        return _U16.unpack(_F16.pack(f))[0]  # OverflowError beyond f16's range
    if math.isnan(f):
        return 0x7FC0  # torch's bf16 NaN
    u = bits & 0xFFFFFFFF
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    if rounded & 0x7FFF == 0x7F80 and not math.isinf(f):
        raise OverflowError("float too large for bfloat16")
    return rounded


class _Arg:
    """Per-binding facts used on the hot path."""

    __slots__ = ("name", "dtype", "dtype_name", "rank", "itemsize", "is_output")

    def __init__(self, name: str, dtype: Any, dtype_name: str, rank: int, itemsize: int, is_output: bool):
        self.name, self.dtype, self.dtype_name = name, dtype, dtype_name
        self.rank, self.itemsize, self.is_output = rank, itemsize, is_output


class BindingPlan:
    """Everything about one :class:`KernelMetadata` that does not depend on the tensors of a call."""

    def __init__(self, meta: KernelMetadata, device_type: str = "cuda") -> None:
        import torch

        if device_type not in _DEVICE_TYPES:
            raise ValueError(f"device_type must be one of {_DEVICE_TYPES}, got {device_type!r}")
        self.meta = meta
        self.kernel = meta.label
        self.device_type = device_type
        self._tensor_type = torch.Tensor
        self._bool = torch.bool
        self.args: tuple[_Arg, ...] = tuple(_make_arg(meta, a) for a in meta.args)
        self.scalars: tuple[tuple[str, str], ...] = tuple(meta.scalars)
        self.nargs = len(self.args) + len(self.scalars)
        clash = [n for n, _ in self.scalars if n in {e for a in meta.args for e in a.shape if isinstance(e, str)}]
        if clash:
            raise _bad_metadata(meta.kernel, f"scalar arguments {clash} are named like shape symbols")
        self.statics: dict[str, int] = dict(meta.static_symbols)
        # (arg index, dim, expected int, symbol name or "") for dims fixed at compile time.
        static_checks: list[tuple[int, int, int, str]] = []
        # (symbol, arg index, dim): the first occurrence of a symbol binds it, the others must agree.
        binders: dict[str, tuple[int, int]] = {}
        uses: list[tuple[str, int, int]] = []
        for ai, spec in enumerate(meta.args):
            for d, entry in enumerate(spec.shape):
                if isinstance(entry, int):
                    static_checks.append((ai, d, entry, ""))
                elif entry in self.statics:
                    static_checks.append((ai, d, self.statics[entry], entry))
                elif entry not in binders:
                    binders[entry] = (ai, d)
                else:
                    uses.append((entry, ai, d))
        self.static_checks = tuple(static_checks)
        self.binders = tuple((s, ai, d) for s, (ai, d) in binders.items())
        self.uses = tuple(uses)
        self.dynamic = tuple(binders)
        strides = {c for a in meta.args for c in a.strides if isinstance(c, str)}
        words = {n for n, _ in meta.scalars} | {n + HIGH_WORD for n, d in meta.scalars if d == "i64"}
        missing = [c for c in meta.constants if c not in binders and c not in words and c not in strides]
        if missing:
            raise _bad_metadata(meta.kernel, f"launch constants {missing} are not bound by any argument's shape")
        self.divisibility = tuple((s, v) for s, v in meta.divisibility if s in binders)
        self._check_static_divisibility()
        self.outputs = tuple(i for i, a in enumerate(self.args) if a.is_output)
        align = meta.alignment_bytes
        self.align = align if align > 1 else 0
        self.grid_fn = _grid_fn_for(meta)
        self.needs_sms = any(SMS_NAME in g for g in meta.grid)  # persistent grid: the launcher supplies it
        self._by_shapes: dict[tuple, tuple[dict[str, int], tuple[int, ...], tuple[int, int, int] | None]] = {}
        if any(spec.strides for spec in meta.args):  # a strided variant: its own per-call checks
            self._check_strided_metadata()
            self.bind_launch = StridedBinding(self).bind_launch  # type: ignore[method-assign]

    # ----------------------------------------------------------------------------------------- hot path

    def bind(self, tensors: Sequence[Any]) -> tuple[dict[str, int], list[int], int]:
        """Validate ``tensors``; return (symbol values, base pointers, device index or -1 for CPU)."""
        values, ptrs, device, _grid = self.bind_launch(tensors)
        return dict(values), ptrs, device

    def bind_launch(self, tensors: Sequence[Any]) -> tuple[dict[str, int], list[int], int, tuple[int, int, int] | None]:
        """``bind`` for a launcher: the values dict may be shared between calls of the same shapes (do not
        change it) and the grid comes along (None: evaluate it, with the SM count where it needs one).
        Every tensor is checked on every call (type, dtype, rank, device, contiguity, alignment, overlap);
        what depends only on the shapes is checked once per distinct shapes."""
        align = self.align
        device, ptrs, shapes = self.tensors(tensors)
        for t, a, ptr in zip(tensors, self.args, ptrs):
            if not t.is_contiguous():
                why = f"non-contiguous (strides {tuple(t.stride())}, shape {tuple(t.shape)}); this kernel needs "
                dense_miss(self, tensors, a, why + "row-major dense strides — call .contiguous()")
            if align and ptr % align:
                why = f"base pointer 0x{ptr:x} is not aligned to {align} bytes (storage offset {t.storage_offset()})"
                dense_miss(self, tensors, a, why + "; pass a tensor that starts at an aligned address, e.g. .clone()")
        values, nbytes, grid = self._derived(shapes)
        if self.outputs:
            self._check_overlap(ptrs, nbytes)
        if self.scalars:
            values = dict(values)
            self._bind_scalars(tensors, values)
        return values, ptrs, -1 if device is None else device, grid

    def _derived(self, shapes: list[Any]) -> tuple[dict[str, int], tuple[int, ...], tuple[int, int, int] | None]:
        """(symbol values, bytes per argument, grid or None) of these shapes: checked and derived on the
        first call with them, then one dictionary lookup (the values dict is shared: copy to change it)."""
        key = tuple(shapes)
        hit = self._by_shapes.get(key)
        if hit is not None:
            return hit
        values = dict(self.statics)
        for ai, d, want, sym in self.static_checks:
            if shapes[ai][d] != want:
                self._static_error(ai, d, want, sym, shapes[ai])
        for sym, ai, d in self.binders:
            values[sym] = shapes[ai][d]
        for sym, ai, d in self.uses:
            if shapes[ai][d] != values[sym]:
                self._consistency_error(sym, ai, d, shapes)
        for sym, div in self.divisibility:
            if values[sym] % div:
                self._alignment_miss(sym, div, values)
        for sym in self.dynamic:
            if values[sym] > INT32_MAX:
                why = f"does not fit in int32 (max {INT32_MAX}); sizes are passed to the kernel as 32-bit constants"
                self._symbol_error(sym, values[sym], why)
        nbytes = tuple(a.itemsize * math.prod(sh) for a, sh in zip(self.args, shapes, strict=True))
        # scalars and the SM count take part in the grid: evaluated per call then
        grid = None if self.scalars or self.needs_sms else self.grid(values)
        if len(self._by_shapes) >= _MAX_SHAPES:
            self._by_shapes.clear()
        self._by_shapes[key] = hit = (values, nbytes, grid)
        return hit

    def tensors(self, tensors: Sequence[Any]) -> tuple[int | None, list[int], list[Any]]:
        """(device index or None for CPU, base pointers, shapes) of the tensor arguments after the checks
        every binding makes (their count, then per tensor type, dtype, rank and one device), each error
        naming the argument; the dense and the strided bindings add their layout checks."""
        if len(tensors) != self.nargs:
            self._count_error(tensors)
        cuda = self.device_type == "cuda"
        device = None
        ptrs: list[int] = []
        shapes: list[Any] = []
        for t, a in zip(tensors, self.args):
            self._check_tensor(t, a)
            if t.is_cuda if cuda else t.is_cpu:
                dev = t.get_device()
                if dev != device:
                    if device is not None:
                        self._device_error(a, t, device)
                    device = dev
            else:
                self._device_error(a, t, device)
            ptrs.append(t.data_ptr())
            shapes.append(t.shape)
        return device, ptrs, shapes

    def _check_tensor(self, t: Any, a: _Arg) -> None:
        """Type, dtype and rank of one tensor."""
        if not isinstance(t, self._tensor_type):
            self._fail(a, f"expected a torch.Tensor of dtype {a.dtype_name}, got {type(t).__name__}")
        if t.dtype is not a.dtype:
            self._fail(a, f"expected dtype {a.dtype_name} ({a.dtype}), got {t.dtype}")
        if len(t.shape) != a.rank:
            why = f"expected rank {a.rank} (shape {self._spec_shape(a)}), got rank {t.dim()} (shape {tuple(t.shape)})"
            self._fail(a, why)

    def _check_strided_metadata(self) -> None:
        for spec in self.meta.args:
            if len(spec.strides) != len(spec.shape) or spec.multiple < 1 or spec.multiple & (spec.multiple - 1):
                why = f"argument {spec.name!r} has strides {spec.strides} and multiple {spec.multiple}"
                raise _bad_metadata(self.kernel, why + " (one entry per dimension; a power of two)")
            missing = [c for c in spec.strides if isinstance(c, str) and c not in self.meta.constants]
            if missing:
                raise _bad_metadata(self.kernel, f"stride constants {missing} are not launch constants")

    def _bind_scalars(self, args: Sequence[Any], values: dict[str, int]) -> None:
        """Each scalar argument as the i32 launch constants that carry it (a float as its bits, an i64 as
        its low and high words)."""
        for (name, dtype), x in zip(self.scalars, args[len(self.args) :]):
            integer = dtype in INT_SCALAR_RANGES
            if isinstance(x, self._tensor_type):
                if x.dim() != 0:
                    got = f"got a tensor of shape {tuple(x.shape)}"
                    self._fail(name, f"expected a {dtype} scalar (a Python number or a 0-d tensor), {got}")
                if integer and (x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == self._bool):
                    self._fail(name, f"expected an integer ({dtype}) scalar, got a 0-d tensor of dtype {x.dtype}")
                x = x.item()
            if isinstance(x, bool) or not isinstance(x, int if integer else (int, float)):
                want = "a Python int or a 0-d integer tensor" if integer else "a Python number or a 0-d tensor"
                self._fail(name, f"expected a {dtype} scalar ({want}), got {type(x).__name__} {x!r}")
            if integer and isinstance(x, int):  # (an int: checked above)
                if x not in INT_SCALAR_RANGES[dtype]:
                    self._fail(name, f"{x} does not fit in {'int32' if dtype == 'i32' else 'int64'}")
                values[name] = low_word(x)
                if dtype == "i64":
                    values[name + HIGH_WORD] = low_word(x >> 32)
                continue
            try:
                values[name] = float_constant(dtype, float(x))
            except OverflowError:
                self._fail(name, f"{x!r} does not fit in {FLOAT_SCALAR_NAMES[dtype]}")

    def grid(self, values: dict[str, int]) -> tuple[int, int, int]:
        """The launch grid for ``values``; raises :class:`LaunchError` if negative or over the limits."""
        return _checked_grid(self.meta, self.grid_fn, values)

    # ----------------------------------------------------------------------------------------- errors

    def _fail(self, a: _Arg | str, message: str) -> NoReturn:
        raise ArgumentError(kernel=self.kernel, arg=a if isinstance(a, str) else a.name, message=message) from None

    def _spec_shape(self, a: _Arg) -> str:
        spec = next(s for s in self.meta.args if s.name == a.name)
        return "(" + ", ".join(str(x) for x in spec.shape) + ("," if len(spec.shape) == 1 else "") + ")"

    def _count_error(self, tensors: Sequence[Any]) -> None:
        every = [a.name for a in self.args] + [n for n, _ in self.scalars]
        n, names = len(tensors), ", ".join(every)
        what = "arguments" if self.scalars else "tensor arguments"
        expected = f"expected {self.nargs} {what} ({names}), got {n}"
        if n < self.nargs:
            raise ArgumentError(kernel=self.kernel, arg=every[n], message=f"missing: {expected}")
        raise ArgumentError(kernel=self.kernel, arg=f"#{self.nargs}", message=f"unexpected extra argument: {expected}")

    def _device_error(self, a: _Arg, t: Any, device: int | None) -> None:
        got = str(t.device)
        if self.device_type == "cpu":
            self._fail(a, f"expected a CPU tensor, got one on {got}")
        if not t.is_cuda:
            self._fail(a, f"expected a CUDA tensor, got one on {got}")
        self._fail(
            a, f"expected all tensors on the same device (cuda:{device}, like the earlier arguments), got one on {got}"
        )

    def _static_error(self, ai: int, d: int, want: int, sym: str, shape: Any) -> None:
        what = f"{sym}={want} (bound at compile time)" if sym else str(want)
        self._fail(
            self.args[ai],
            f"dimension {d} should be {what}, got {shape[d]} (shape {tuple(shape)}, "
            f"expected {self._spec_shape(self.args[ai])})",
        )

    def _consistency_error(self, sym: str, ai: int, d: int, shapes: list[Any]) -> None:
        _, bi, bd = next(b for b in self.binders if b[0] == sym)
        first, this = self.args[bi], self.args[ai]
        self._fail(
            this,
            f"dimension {d} is symbol {sym}, which argument {first.name!r} (dimension {bd}) "
            f"bound to {shapes[bi][bd]}; got {shapes[ai][d]} (shape {tuple(shapes[ai])}, "
            f"{first.name!r} has shape {tuple(shapes[bi])})",
        )

    def _symbol_error(self, sym: str, value: int, why: str) -> None:
        _, ai, d = next(b for b in self.binders if b[0] == sym)
        self._fail(self.args[ai], f"{sym}={value} (dimension {d}) {why}")

    def _alignment_miss(self, sym: str, div: int, values: dict[str, int]) -> NoReturn:
        _, ai, d = next(b for b in self.binders if b[0] == sym)
        why = f"must be a multiple of {div}: the kernel accesses rows along {sym} {div} elements at a time"
        raise AlignmentMiss(
            values,
            kernel=self.kernel,
            arg=self.args[ai].name,
            message=f"{sym}={values[sym]} (dimension {d}) {why} (16-byte vectors); a kernel from wc.compile "
            "launches its narrow variant instead",
        ) from None

    def _check_static_divisibility(self) -> None:
        for sym, div in self.meta.divisibility:
            if div <= 0:
                raise _bad_metadata(self.kernel, f"divisor {div} for {sym}")
            if sym in self.statics and self.statics[sym] % div:
                raise _bad_metadata(self.kernel, f"compile-time {sym}={self.statics[sym]} is not divisible by {div}")

    def _check_overlap(self, ptrs: list[int], nbytes: tuple[int, ...]) -> None:
        spans = [(p, p + n) for p, n in zip(ptrs, nbytes, strict=True)]
        for oi in self.outputs:
            lo, hi = spans[oi]
            if lo == hi:
                continue
            for j, (lo2, hi2) in enumerate(spans):
                if j != oi and lo2 != hi2 and lo < hi2 and lo2 < hi:
                    other = self.args[j]
                    kind = "output" if other.is_output else "input"
                    self._fail(
                        self.args[oi],
                        (
                            f"output memory [0x{lo:x}, 0x{hi:x}) overlaps {kind} {other.name!r} "
                            f"[0x{lo2:x}, 0x{hi2:x}); in-place or aliased outputs are not supported — "
                            "pass a separate output tensor"
                        ),
                    )


def _bad_metadata(kernel: str, what: str) -> LaunchError:
    return LaunchError(kernel=kernel, message=f"invalid metadata: {what}")


def _make_arg(meta: KernelMetadata, spec: Any) -> _Arg:
    import torch

    if spec.dtype not in DTYPES:
        raise _bad_metadata(meta.kernel, f"argument {spec.name!r} has dtype {spec.dtype!r}")
    tdtype = getattr(torch, _TORCH_DTYPE_NAMES[spec.dtype])
    return _Arg(spec.name, tdtype, spec.dtype, len(spec.shape), tdtype.itemsize, spec.is_output)


# --------------------------------------------------------------------------------------------- grid

_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_FUNCS = {"min": min, "max": max}


def _check_grid_node(node: ast.AST, symbols: frozenset[str], expr: str, kernel: str) -> None:
    def bad(why: str) -> LaunchError:
        return LaunchError(kernel=kernel, message=f"invalid grid expression {expr!r}: {why}")

    if isinstance(node, ast.Expression):
        _check_grid_node(node.body, symbols, expr, kernel)
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, _BINOPS):
            raise bad(f"operator {type(node.op).__name__} is not allowed")
        _check_grid_node(node.left, symbols, expr, kernel)
        _check_grid_node(node.right, symbols, expr, kernel)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise bad(f"operator {type(node.op).__name__} is not allowed")
        _check_grid_node(node.operand, symbols, expr, kernel)
    elif isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise bad(f"constant {node.value!r} is not an int")
    elif isinstance(node, ast.Name):
        if node.id not in symbols:
            raise bad(f"unknown symbol {node.id!r}; known: {sorted(symbols)}")
    elif isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS) or node.keywords or not node.args:
            raise bad("only min(...) and max(...) calls are allowed")
        for arg in node.args:
            _check_grid_node(arg, symbols, expr, kernel)
    else:
        raise bad(f"{type(node).__name__} is not allowed")


def compile_grid(grid: Sequence[str], symbols: Sequence[str], kernel: str = "?") -> Callable[..., tuple]:
    """Compile three grid expressions into ``fn(**symbol_values) -> (gx, gy, gz)``.

    Symbols are keyword parameters (extra keywords are ignored); the function runs with no builtins.
    """
    if len(grid) != 3:
        raise _bad_metadata(kernel, f"grid {tuple(grid)} must have 3 entries")
    names = frozenset(symbols)
    bad = [s for s in names if not s.isidentifier() or keyword.iskeyword(s) or s in _FUNCS or s.startswith("_")]
    if bad:
        raise _bad_metadata(kernel, f"symbol names {sorted(bad)} are not usable")
    for expr in grid:
        try:
            tree = ast.parse(expr, mode="eval")
        except SyntaxError as exc:
            raise LaunchError(kernel=kernel, message=f"invalid grid expression {expr!r}: {exc.msg}") from None
        _check_grid_node(tree, names, expr, kernel)
    params = "".join(f"{s}, " for s in ["*", *sorted(names)]) if names else ""
    source = f"def _grid({params}**_unused):\n    return (({grid[0]}), ({grid[1]}), ({grid[2]}))\n"
    namespace: dict[str, Any] = {"__builtins__": {}, **_FUNCS}
    exec(compile(source, f"<wavec grid of {kernel}>", "exec"), namespace)
    return namespace["_grid"]


# --------------------------------------------------------------------------------------------- API

_PLANS: dict[tuple[int, str], tuple[KernelMetadata, BindingPlan]] = {}
_GRIDS: dict[tuple[int, str], tuple[KernelMetadata, Callable[..., tuple]]] = {}
_PLANS_LOCK = threading.Lock()
_MAX_PLANS = 4096


def _memo(table: dict, meta: KernelMetadata, key: str, build: Callable[[], Any]) -> Any:
    """``build()`` cached in ``table`` by ``(id(meta), key)`` (building one per call is wasteful)."""
    hit = table.get((id(meta), key))
    if hit is not None and hit[0] is meta:
        return hit[1]
    value = build()
    with _PLANS_LOCK:
        if len(table) >= _MAX_PLANS:
            table.clear()
        table[(id(meta), key)] = (meta, value)  # holding meta keeps id(meta) from being reused while cached
    return value


def plan_for(meta: KernelMetadata, device_type: str = "cuda") -> BindingPlan:
    """The cached :class:`BindingPlan` of ``meta`` (keyed by identity)."""
    return _memo(_PLANS, meta, device_type, lambda: BindingPlan(meta, device_type))


def bind_arguments(meta: KernelMetadata, tensors: Sequence[Any], device_type: str = "cuda") -> dict[str, int]:
    """Validate ``tensors`` against ``meta`` and return every symbol's value (dynamic and compile-time)."""
    return plan_for(meta, device_type).bind(tensors)[0]


def grid_for(meta: KernelMetadata, symbols: dict[str, int]) -> tuple[int, int, int]:
    """Evaluate ``meta.grid`` for ``symbols`` (compiled once per metadata).

    Raises :class:`LaunchError` if a symbol is missing or the grid is negative or over the CUDA limits.
    """
    return _checked_grid(meta, _grid_fn_for(meta), symbols)


def _grid_fn_for(meta: KernelMetadata) -> Callable[..., tuple]:
    def build() -> Callable[..., tuple]:
        symbols = {s for a in meta.args for s in a.shape if isinstance(s, str)}
        symbols.update(s for s, _ in meta.static_symbols)
        if any(SMS_NAME in g for g in meta.grid):
            symbols.add(SMS_NAME)
        return compile_grid(meta.grid, sorted(symbols), meta.kernel)

    return _memo(_GRIDS, meta, "grid", build)


def _checked_grid(meta: KernelMetadata, fn: Callable[..., tuple], values: dict[str, int]) -> tuple[int, int, int]:
    try:
        g = fn(**values)
    except TypeError as exc:  # a missing keyword-only symbol
        raise LaunchError(kernel=meta.kernel, message=f"grid {meta.grid}: {exc}") from None
    if not (0 <= g[0] <= GRID_LIMITS[0] and 0 <= g[1] <= GRID_LIMITS[1] and 0 <= g[2] <= GRID_LIMITS[2]):
        raise LaunchError(
            kernel=meta.kernel,
            message=f"grid {g} (from {meta.grid} with {values}) is negative or exceeds {GRID_LIMITS}",
        )
    return g
