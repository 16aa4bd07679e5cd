"""Emission of one ``hal.executable`` per kernel with the ``iree.compiler.ir`` bindings (DESIGN §6).

Requires: an expanded trace and its ``PassContext``.  Guarantees: ``emit_kernel`` returns the verified
module text and the launch interface (bindings, constants, block, grid, divisibility, and the same module
printed with each op's kernel source location, which the artifact keeps for the emulator's messages;
IREE gets the text without them, so the binary carries no debug lines).  The skeleton
(target, export, bindings, constants) is parsed from text; ``lowering.py``'s rules build the body.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..abi import BOUNDS_RECORD_WORDS, HIGH_WORD
from ..errors import CodegenError
from ..frontend.dtypes import DType
from ..frontend.mapping import index_operands
from ..frontend.ops import WideStore, Write
from ..frontend.ops_atomic import Atomic
from ..frontend.tracing import Trace, capture_root
from ..passes.context import PassContext
from ..target import Target

SUBSPAN_ALIGNMENT = 16  # bytes; the launcher checks every base pointer against it
TENSOR_MAP_ALIGNMENT = 64  # bytes; the launcher allocates the tensor-map buffer (a CUtensorMap is 64-aligned)


@dataclass(frozen=True)
class KernelInterface:
    """What the launcher needs to know about the emitted kernel."""

    entry: str
    block: tuple[int, int, int]
    # (name, dtype, shape as str/int, is_output, strides as constant names / 1 (none: dense), row multiple)
    bindings: tuple[tuple[str, str, tuple, bool, tuple, int], ...]
    constants: tuple[str, ...]  # dynamic symbols then scalar arguments, in constant-ordinal order
    grid: tuple[str, str, str]  # python integer expressions over symbol names
    divisibility: tuple[tuple[str, int], ...]
    alignment_bytes: int
    scalars: tuple[tuple[str, str], ...] = ()  # (name, dtype) of by-value arguments, after the symbols
    tensor_maps: tuple = ()  # TensorMapRequest of the TMA tensor maps, read from one binding after the tensors
    bounds_checks: tuple = ()  # WAVEC_CHECK_BOUNDS: (file:line, code, op, memory, dim) per check id (last binding)
    located_mlir: str = ""  # the module with ``loc(...)`` of every op (the kernel line of the DSL call)
    cluster: tuple[int, int, int] = (1, 1, 1)  # thread-block cluster dimensions (a cluster launch when not 1s)


def _dynamic_symbols(trace: Trace, ctx: PassContext) -> list[sympy.Symbol]:
    seen: list[sympy.Symbol] = []
    for a in trace.args:
        for d in a.type.dims:
            if d not in ctx.constraints.subs and d not in seen:
                seen.append(d)
    return seen


def _written_args(trace: Trace) -> set[str]:
    out = set()
    for g in trace.graphs():
        for n in g.nodes:
            if n.meta.get("op") in (Write, Atomic):
                out.add(capture_root(n.args[1]).name)
            elif n.meta.get("op") is WideStore:  # (its memory is the last argument)
                out.add(capture_root(n.args[-1]).name)
    return out


def _memref_type(shape, dtype_mlir: str, ctx: PassContext) -> tuple[str, list]:
    dims, dyn = [], []
    for d in shape:
        v = ctx.constraints.resolve(d)
        if v.is_Integer:
            dims.append(str(int(v)))
        else:
            dims.append("?")
            dyn.append(d)
    return f"memref<{'x'.join(dims)}x{dtype_mlir}>", dyn


def _py_expr(expr: sympy.Expr) -> str:
    """A sympy grid expression as Python integer arithmetic (ceiling -> floor division)."""
    expr = sympy.sympify(expr)
    if isinstance(expr, sympy.ceiling):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        return f"(({_py_expr(num)}) + {int(den) - 1}) // {int(den)}"
    if isinstance(expr, sympy.floor):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        return f"({_py_expr(num)}) // {int(den)}"
    if expr.is_Integer or expr.is_Symbol:
        return str(expr)
    if expr.is_Add:
        return " + ".join(f"({_py_expr(a)})" for a in expr.args)
    if expr.is_Mul:
        return " * ".join(f"({_py_expr(a)})" for a in expr.args)
    if isinstance(expr, sympy.Min):
        return "min(" + ", ".join(_py_expr(a) for a in expr.args) + ")"
    raise CodegenError(message=f"grid expression {expr} is not integer arithmetic")


def arg_strides(trace: Trace, ctx: PassContext) -> list[tuple[str | int, ...]]:
    """Per argument, its strides as the launch constants carrying them (``"x.stride0"``) or 1 (an innermost
    stride that is not one); all empty for a dense kernel (``ctx.strided`` None)."""
    if ctx.strided is None:
        return [() for _ in trace.args]
    out = []
    for a in trace.args:
        rank = len(a.type.shape)
        last: tuple[str | int, ...] = (f"{a.name}.stride{rank - 1}",) if ctx.inner_strided(a.name) else (1,)
        out.append(tuple(f"{a.name}.stride{d}" for d in range(rank - 1)) + (last if rank else ()))
    return out


def row_multiple(ctx: PassContext, a) -> int:
    """Elements a strided binding's outer strides and base offset must be multiples of: its longest run."""
    return ctx.arg_runs.get(a.name, 1) if ctx.strided is not None else 1


def _strided_args(trace: Trace, ctx: PassContext, dyn: list, written: set, nconst: int) -> list[str]:
    """The strided variant's prologue: each argument's stride constants, its binding as a flat memref over
    the elements it spans, and last, one op per argument in binding order (``FunctionBuilder`` finds them
    there): that flat memref reinterpreted with its sizes and strides (no strides: the plain subspan)."""
    lines, views = [], []
    for i, (a, strides) in enumerate(zip(trace.args, arg_strides(trace, ctx))):
        mtype, dyn_dims = _memref_type(a.type.shape, a.type.dtype.mlir, ctx)
        ro = "" if a.name in written else " flags(ReadOnly)"
        align = max(1, row_multiple(ctx, a)) * a.type.dtype.bytes
        sub = f"hal.interface.binding.subspan layout(#layout) binding({i}) alignment({align}) offset(%c0){ro}"
        sizes = [
            str(int(v)) if (v := ctx.constraints.resolve(d)).is_Integer else f"%sym{dyn.index(d)}" for d in a.type.shape
        ]
        if not any(isinstance(s, str) for s in strides):
            dyn_sizes = "{" + ", ".join(f"%sym{dyn.index(d)}" for d in dyn_dims) + "}" if dyn_dims else ""
            views.append(f"        %arg{i} = {sub} : {mtype}{dyn_sizes}")
            continue
        st = []
        for d, s in enumerate(strides):
            if isinstance(s, str):
                lines.append(
                    f"        %arg{i}_st{d}_i32 = hal.interface.constant.load layout(#layout) ordinal({nconst}) : i32"
                )
                lines.append(f"        %arg{i}_st{d} = arith.index_castui %arg{i}_st{d}_i32 : i32 to index")
                nconst += 1
                st.append(f"%arg{i}_st{d}")
            else:
                st.append(str(s))
        span = f"%arg{i}_span"
        terms = []  # the elements spanned: an upper bound, sum of size x stride
        for d, (size, stride) in enumerate(zip(sizes, st)):
            if not size.startswith("%"):
                lines.append(f"        %arg{i}_n{d} = arith.constant {size} : index")
                size = f"%arg{i}_n{d}"
            if stride.startswith("%"):
                lines.append(f"        %arg{i}_t{d} = arith.muli {size}, {stride} : index")
                terms.append(f"%arg{i}_t{d}")
            else:
                terms.append(size)
        acc = terms[0]
        for d, t in enumerate(terms[1:], 1):
            lines.append(f"        %arg{i}_s{d} = arith.addi {acc}, {t} : index")
            acc = f"%arg{i}_s{d}"
        lines.append(f"        {span} = arith.addi {acc}, %c0 : index")
        elem = a.type.dtype.mlir
        lines.append(f"        %arg{i}_flat = {sub} : memref<?x{elem}>{{{span}}}")
        layout = ", ".join("?" if isinstance(s, str) else str(s) for s in strides)
        shape = mtype[len("memref<") : -len(f"x{elem}>")]
        views.append(
            f"        %arg{i} = memref.reinterpret_cast %arg{i}_flat to offset: [0], sizes: [{', '.join(sizes)}], "
            f"strides: [{', '.join(st)}] : memref<?x{elem}> to memref<{shape}x{elem}, strided<[{layout}]>>"
        )
    return lines + views


def scalar_constants(trace: Trace) -> tuple[str, ...]:
    """The launch constants of the scalar arguments, in ordinal order: one per scalar, an i64 two (low
    word, then ``name.hi``)."""
    return tuple(n for a in trace.scalars for n in ((a.name, a.name + HIGH_WORD) if _wide(a) else (a.name,)))


def _wide(a) -> bool:
    return a.type.dtype.name == "i64"


def scalar_ops(name: str, dtype: DType, ordinal: int) -> list[str]:
    """The ops that load a scalar's launch constants (i32, toolchain.md) into ``name`` of ``dtype``: an
    i32 is the constant; an f32 its bits; an f16 / bf16 the low half's bits (the launcher packs them so);
    an i64 the low word zero-extended, or'ed with the high word shifted up.  The last op defines ``name``."""
    load = "hal.interface.constant.load layout(#layout) ordinal({}) : i32"
    ops = [f"        {name}_i32 = {load.format(ordinal)}"]
    if dtype.name == "f32":
        ops.append(f"        {name} = arith.bitcast {name}_i32 : i32 to f32")
    elif dtype.name in ("f16", "bf16"):
        ops.append(f"        {name}_i16 = arith.trunci {name}_i32 : i32 to i16")
        ops.append(f"        {name} = arith.bitcast {name}_i16 : i16 to {dtype.mlir}")
    elif dtype.name == "i64":
        ops += [
            f"        {name}_hi_i32 = {load.format(ordinal + 1)}",
            f"        {name}_lo = arith.extui {name}_i32 : i32 to i64",
            f"        {name}_hi = arith.extui {name}_hi_i32 : i32 to i64",
            f"        {name}_32 = arith.constant 32 : i64",
            f"        {name}_up = arith.shli {name}_hi, {name}_32 : i64",
            f"        {name} = arith.ori {name}_up, {name}_lo : i64",
        ]
    return ops


def skeleton(trace: Trace, ctx: PassContext, target: Target, dyn: list, written: set) -> str:
    cs = ctx.constraints
    name = trace.name
    flags = ["<storage_buffer>" if a.name in written else "<storage_buffer, ReadOnly>" for a in trace.args]
    flags += ["<storage_buffer, ReadOnly>"] if ctx.tensor_maps else []  # the TMA tensor maps, 128 bytes each
    flags += ["<storage_buffer>"] if ctx.check_bounds else []  # the bounds record (runtime/bounds.py)
    nstrides = sum(isinstance(s, str) for ss in arg_strides(trace, ctx) for s in ss)
    nconst = len(dyn) + len(scalar_constants(trace)) + nstrides
    consts = f"constants = {nconst}, " if nconst else ""
    binds = ", ".join(f"#hal.pipeline.binding{f}" for f in flags)
    lines = [
        f"#layout = #hal.pipeline.layout<{consts}bindings = [{binds}]>",
        f"hal.executable @{name}_exe {{",
        f"  hal.executable.variant public @{target.variant_name} target({target.attr_text()}) {{",
        f"    hal.executable.export public @{name} ordinal(0) layout(#layout) count(%d: !hal.device) "
        "-> (index, index, index) {",
        "      %c1 = arith.constant 1 : index",
        "      hal.return %c1, %c1, %c1 : index, index, index",
        "    }",
        "    builtin.module {",
        f"      func.func @{name}() attributes {{translation_info = #iree_codegen.translation_info<"
        f"pipeline = #iree_codegen.no_pipeline workgroup_size = [{cs.threads + ctx.producer_threads}, 1, 1] "
        f"subgroup_size = {cs.threads_per_wave}>}} {{",
        "        %c0 = arith.constant 0 : index",
    ]
    for i in range(len(dyn)):
        lines.append(f"        %sym{i}_i32 = hal.interface.constant.load layout(#layout) ordinal({i}) : i32")
        lines.append(f"        %sym{i} = arith.index_castui %sym{i}_i32 : i32 to index")
    for i, a in enumerate(trace.args if ctx.strided is None else ()):
        mtype, dyn_dims = _memref_type(a.type.shape, a.type.dtype.mlir, ctx)
        sizes = "{" + ", ".join(f"%sym{dyn.index(d)}" for d in dyn_dims) + "}" if dyn_dims else ""
        ro = "" if a.name in written else " flags(ReadOnly)"
        lines.append(
            f"        %arg{i} = hal.interface.binding.subspan layout(#layout) binding({i}) "
            f"alignment({SUBSPAN_ALIGNMENT}) offset(%c0){ro} : {mtype}{sizes}"
        )
    ordinal = len(dyn)
    for j, a in enumerate(trace.scalars):
        lines += scalar_ops(f"%scalar{j}", a.type.dtype, ordinal)
        ordinal += 2 if _wide(a) else 1
    if ctx.strided is not None:  # the strides follow the symbols and scalars
        lines += _strided_args(trace, ctx, dyn, written, ordinal)
    if ctx.tensor_maps:  # last before the return: FunctionBuilder finds it there
        lines.append(
            f"        %tensor_maps = hal.interface.binding.subspan layout(#layout) binding({len(trace.args)}) "
            f"alignment({TENSOR_MAP_ALIGNMENT}) offset(%c0) flags(ReadOnly) : "
            f"memref<{16 * len(ctx.tensor_maps)}xi64>"
        )
    if ctx.check_bounds:  # last before the return (after the tensor maps): FunctionBuilder finds it there
        lines.append(
            f"        %bounds_record = hal.interface.binding.subspan layout(#layout) binding({len(flags) - 1}) "
            f"alignment({SUBSPAN_ALIGNMENT}) offset(%c0) : memref<{BOUNDS_RECORD_WORDS}xi64>"
        )
    lines += ["        return", "      }", "    }", "  }", "}"]
    return "\n".join(lines)


def emit_kernel(trace: Trace, ctx: PassContext, target: Target) -> tuple[str, KernelInterface]:
    from iree.compiler import ir

    from . import casts, control, convert, dynamic_access, lowering_ops, reductions, scans, topk  # noqa: F401 - rules
    from .lowering import FunctionBuilder

    cs = ctx.constraints
    if cs.group_waves > 1:  # Hopper warpgroup MMA (imports the nvvm/llvm dialect bindings, ~0.1 s)
        from .hopper import wgmma  # noqa: F401 - registers the wgmma lowerings
    if ctx.tensor_maps:
        from .hopper import tma  # noqa: F401 - registers the TMA and mbarrier lowerings
    if ctx.persistent:
        from .hopper import persistent  # noqa: F401 - registers the tile loop
    if cs.scheduling.pingpong:
        from .hopper import pingpong  # noqa: F401 - registers the named barriers
    if cs.threads_per_wave != target.threads_per_wave:
        raise CodegenError(
            message=f"{target.name} runs waves of {target.threads_per_wave} threads but the kernel's "
            f"HardwareConstraint says threads_per_wave={cs.threads_per_wave}"
        )
    dyn = _dynamic_symbols(trace, ctx)
    written = _written_args(trace)
    # a kernel with no data-dependent index has nothing to check: no record binding
    ctx.check_bounds = ctx.check_bounds and any(index_operands(n) for g in trace.graphs() for n in g.nodes)
    reqs = list(ctx.requirements.items())
    for d, t in reqs:
        v = cs.resolve(d)
        if v.is_Integer and int(v) % t:
            raise CodegenError(
                trace.loc,
                message=f"{d}={int(v)} must be a multiple of {t}: rows of the "
                f"contiguous dimension {d} are accessed {t} elements (16 bytes) at a time",
            )
    text = skeleton(trace, ctx, target, dyn, written)
    with ir.Context() as mctx, ir.Location.unknown():
        mctx.load_all_available_dialects()
        module = ir.Module.parse(text)
        fb = FunctionBuilder(module, trace, ctx, dyn)
        fb.build()
        if not module.operation.verify():
            raise CodegenError(trace.loc, message="emitted module does not verify")
        out = str(module)
        located = module.operation.get_asm(enable_debug_info=True)
    sizes = {d: cs.resolve(d) for d in dyn}
    gx, gy, gz = (_py_expr(g) for g in (ctx.grid_override or cs.grid(sizes)))
    iface = KernelInterface(
        entry=trace.name,
        block=(cs.threads + ctx.producer_threads, 1, 1),
        bindings=tuple(
            (
                a.name,
                a.type.dtype.name,
                tuple(_dim_name(cs.resolve(d)) for d in a.type.shape),
                a.name in written,
                strides,
                row_multiple(ctx, a),
            )
            for a, strides in zip(trace.args, arg_strides(trace, ctx))
        ),
        constants=tuple(d.name for d in dyn)
        + scalar_constants(trace)
        + tuple(s for ss in arg_strides(trace, ctx) for s in ss if isinstance(s, str)),
        grid=(gx, gy, gz),
        divisibility=tuple((d.name, t) for d, t in reqs if not cs.resolve(d).is_Integer),
        alignment_bytes=SUBSPAN_ALIGNMENT,
        scalars=tuple((a.name, a.type.dtype.name) for a in trace.scalars),
        tensor_maps=tuple(ctx.tensor_maps),
        bounds_checks=tuple(fb.bounds_checks),
        located_mlir=located,
        cluster=ctx.cluster,
    )
    return out, iface


def _dim_name(v: sympy.Expr) -> str | int:
    return int(v) if v.is_Integer else str(v)
