"""Lowering rules: one short rule per DSL op class, registered in ``LOWERINGS`` (JAX Pallas style).

``FunctionBuilder`` owns the state of one function: SSA values of fx nodes, the scoped cache of index
expressions (so each index is computed once per scope), and the values of hardware and dynamic symbols.
Every per-thread value is a 1-D vector whose element order is its layout's ``order``.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from contextlib import nullcontext

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import amdgpu, arith, gpu, scf, vector

from ..errors import CodegenError
from ..frontend import dtypes as dt
from ..frontend.ops import (
    MMA,
    AsyncCommit,
    AsyncWait,
    Barrier,
    Binary,
    Broadcast,
    GetResult,
    Iterate,
    RegisterInit,
    Select,
    Unary,
)
from ..frontend.tracing import Trace, arg_node, arg_nodes, placeholders
from ..frontend.unary_kinds import UNARY_KINDS
from ..indexing import LANE, THREAD, WAVE, WORKGROUP, Layout, broadcast_positions, induction_symbol
from ..indexing.padding import Wrap
from ..indexing.shared_layout import Xor
from ..indexing.symbols import PID, stage_symbol
from ..passes.context import PassContext
from ..passes.schema import Kwargs
from .emitter import scalar_ops

LOWERINGS: dict[type, Callable[[FunctionBuilder, fx.Node], None]] = {}


def rule(op: type):
    def deco(fn):
        LOWERINGS[op] = fn
        return fn

    return deco


def elem_type(dtype: dt.DType) -> ir.Type:
    """The MLIR element type (integers signless: u8 is i8, its ops unsigned)."""
    return ir.Type.parse(dtype.mlir)


def vec_type(n: int, dtype: dt.DType) -> ir.VectorType:
    return ir.VectorType.get([n], elem_type(dtype))


def reshape(t: ir.VectorType, v: ir.Value) -> ir.Value:
    """``v`` as the vector type ``t`` of as many elements (an mma fragment's 2-D form and back).  A
    ``vector<Rx1xT>`` (tf32 fragments) goes row by row through ``i32`` bits: IREE leaves its
    ``vector.shape_cast`` (and an extract / from_elements chain, which it folds into one) as an
    unrealized cast."""
    src = ir.VectorType(v.type)
    if (src.rank == 1 and t.rank == 1) or (src.shape[-1] != 1 and t.shape[-1] != 1):
        return vector.shape_cast(t, v)
    n, elem = src.shape[0], src.element_type
    i32 = ir.IntegerType.get_signless(32)
    if src.rank == 2:  # [R, 1] -> [R]
        rows = [vector.bitcast(ir.VectorType.get([1], i32), vector.extract(v, [], [i])) for i in range(n)]
        bits = vector.from_elements(ir.VectorType.get([n], i32), [vector.extract(r, [], [0]) for r in rows])
        return vector.bitcast(t, bits)
    bits = vector.bitcast(ir.VectorType.get([n], i32), v)  # [R] -> [R, 1]
    rows = [vector.broadcast(ir.VectorType.get([1], i32), vector.extract(bits, [], [i])) for i in range(n)]
    out = vector.broadcast(t, arith.constant(elem, 0.0))
    for i, r in enumerate(rows):
        out = vector.insert(vector.bitcast(ir.VectorType.get([1], elem), r), out, [], [i])
    return out


def fp8_bits(dtype: dt.DType, value: float) -> int:
    """The bits (as a signed i8) of ``value`` in the fp8 type, saturated and rounded as ``wc.cast`` does."""
    import torch

    v = builtins.min(builtins.max(float(value), -dtype.max), dtype.max) if value == value else value
    return int(torch.tensor(v).to(dtype.torch()).view(torch.int8).item())


def splat(vt: ir.VectorType, dtype: dt.DType, value) -> ir.Value:
    et = elem_type(dtype)
    if dtype.is_fp8:
        value, dtype = fp8_bits(dtype, value), dt.i8
    attr = ir.FloatAttr.get(et, float(value)) if dtype.is_float else ir.IntegerAttr.get(et, int(value))
    return arith.constant(vt, ir.DenseElementsAttr.get_splat(vt, attr))


class FunctionBuilder:
    def __init__(self, module: ir.Module, trace: Trace, ctx: PassContext, dyn: list) -> None:
        self.trace, self.ctx, self.cs = trace, ctx, ctx.constraints
        exe = module.body.operations[0]
        variant = exe.regions[0].blocks[0].operations[0]
        inner = next(op for op in variant.regions[0].blocks[0].operations if op.name == "builtin.module")
        func = inner.regions[0].blocks[0].operations[0]
        ops = list(func.regions[0].blocks[0].operations)
        self.ret = ops[-1]
        self.symbols: dict[sympy.Symbol, ir.Value] = {}
        self.ranges: dict[sympy.Symbol, int] = {}  # symbols known to lie in [0, n): a loop's carried stage
        for i, d in enumerate(dyn):
            self.symbols[d] = ops[2 + 2 * i].result
        extra = (1 if ctx.check_bounds else 0) + (1 if ctx.tensor_maps else 0)
        if ctx.strided is None:
            self.args = {a.name: ops[1 + 2 * len(dyn) + i].result for i, a in enumerate(trace.args)}
            pos = 1 + 2 * len(dyn) + len(trace.args)
        else:  # the strided views: one op per argument right before the tensor maps and bounds record
            first = len(ops) - 1 - extra - len(trace.args)
            self.args = {a.name: ops[first + i].result for i, a in enumerate(trace.args)}
            pos = 1 + 2 * len(dyn)
        self.scalars: dict[str, ir.Value] = {}
        for a in trace.scalars:  # the ops that load it (emitter.scalar_ops), the last defining it
            pos += len(scalar_ops("%s", a.type.dtype, 0))
            self.scalars[a.name] = ops[pos - 1].result
        # the bounds record, then before it the TMA tensor-map binding (emitter.skeleton puts them last)
        self.bounds_record = ops[-2].result if ctx.check_bounds else None
        self.tensor_maps = ops[-3 if ctx.check_bounds else -2].result if ctx.tensor_maps else None
        # per check id: (file:line, source code, op, memory argument, dim)
        self.bounds_checks: list[tuple[str, str, str, str, str]] = []
        self.values: dict[fx.Node, ir.Value] = {}  # an Iterate's: the list of its results
        # One scope per loop nest level: (cache of index values, symbols the level defines, insertion point
        # just before the loop that opens the next level).  An index expression is emitted at the
        # outermost level that defines all its symbols: loop-invariant address math is hoisted.
        self.scopes: list[dict] = [{}]
        self.scope_symbols: list[set] = [set()]
        self.hoist_points: list = []
        self.pending_copies: list[ir.Value] = []
        self.last_group: ir.Value | None = None
        self.done: set[fx.Node] = set()  # nodes a rule lowered ahead of the graph walk (warp_specialize)

    # ----- index expressions -----
    def index(self, expr) -> ir.Value:
        expr = sympy.sympify(expr)
        return self.derived(expr, (expr,), lambda: self._emit(expr))

    def derived(self, key, exprs: tuple, build: Callable[[], ir.Value]) -> ir.Value:
        """A value computed from index expressions (the index itself, a bounds test, a clamped index),
        cached and hoisted to the outermost level that defines all their symbols."""
        return self.cached(key, max(self._level(sympy.sympify(e)) for e in exprs), build)

    def cached(self, key, level: int, build: Callable[[], ir.Value]) -> ir.Value:
        """``build()`` emitted once at loop level ``level`` (see ``at_level``) and reused from then on."""
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        with self.at_level(level):
            v = build()
        self.scopes[level][key] = v
        return v

    def at_level(self, level: int):
        """Insertion just before the loop that opens level ``level + 1`` (here when ``level`` is innermost)."""
        return self.hoist_points[level] if level < len(self.hoist_points) else nullcontext()

    def _level(self, expr: sympy.Expr) -> int:
        """The outermost loop level at which every symbol of ``expr`` has a value."""
        free = expr.free_symbols
        for level in range(len(self.scopes) - 1, 0, -1):
            if free & self.scope_symbols[level]:
                return level
        return 0

    def enter_loop(self, loop_op, symbols: dict) -> None:
        self.hoist_points.append(ir.InsertionPoint(loop_op))
        self.scopes.append({})
        self.scope_symbols.append(set(symbols))
        self.symbols.update(symbols)

    def exit_loop(self) -> None:
        for sym in self.scope_symbols.pop():
            self.symbols.pop(sym, None)
        self.scopes.pop()
        self.hoist_points.pop()

    def _emit(self, e: sympy.Expr) -> ir.Value:
        idx = ir.IndexType.get()
        if e.is_Integer:
            return arith.constant(idx, int(e))
        if e.is_Symbol:
            if e not in self.symbols:
                raise CodegenError(message=f"index symbol {e} has no value here")
            return self.symbols[e]
        if e.is_Add:
            const, rest = e.as_coeff_Add()
            if const != 0:
                return arith.addi(self.index(rest), self.index(const))
            return self._fold(arith.addi, e.args)
        if e.is_Mul:
            coeff, rest = e.as_coeff_Mul()
            if not coeff.is_Integer:
                raise CodegenError(message=f"index {e} is not integral")
            if coeff != 1:
                return arith.muli(self.index(rest), self.index(coeff))
            return self._fold(arith.muli, e.args)
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            if isinstance(e, sympy.ceiling):
                num = num + den - 1
            return arith.divui(self.index(num), self.index(den))
        if isinstance(e, sympy.Min):
            return self._fold(arith.minui, e.args)
        if isinstance(e, sympy.Max):  # signed: clamps a difference that may be negative (``Max(0, N - M)``)
            return self._fold(arith.maxsi, e.args)
        if isinstance(e, sympy.Mod):
            return self._emit_mod(*e.args)
        if isinstance(e, Wrap):  # padded instruction tiles
            return arith.remui(self.index(e.args[0]), self.index(e.args[1]))
        if isinstance(e, Xor):  # swizzled shared layouts
            return arith.xori(self.index(e.args[0]), self.index(e.args[1]))
        raise CodegenError(message=f"cannot lower index expression {e}")

    def _fold(self, op: Callable, terms: tuple) -> ir.Value:
        """``op`` applied left to right over the index values of ``terms``."""
        acc = self.index(terms[0])
        for t in terms[1:]:
            acc = op(acc, self.index(t))
        return acc

    def _emit_mod(self, x: sympy.Expr, m: sympy.Expr) -> ir.Value:
        """``x % m``; ``(s + c) % n`` of a symbol s in [0, n) and 0 <= c < n is one compare and select
        (the next pipeline stages: a 64-bit remainder by 3 costs ptxas ~9 instructions)."""
        c, rest = x.as_coeff_Add()
        if m.is_Integer and rest.is_Symbol and self.ranges.get(rest) == int(m) and c.is_Integer and 0 <= c < m:
            v = self.index(x)
            wrap = arith.cmpi(arith.CmpIPredicate.uge, v, self.index(m))
            return arith.select(wrap, arith.subi(v, self.index(m)), v)
        return arith.remui(self.index(x), self.index(m))

    def hardware_symbols(self) -> None:
        tpw = self.cs.lanes  # a wave, or a warpgroup of 4 waves for wgmma (its layouts span 128 lanes)
        tid = gpu.thread_id(gpu.Dimension.x)
        self.symbols[THREAD] = tid
        self.symbols[LANE] = arith.remui(tid, self.index(tpw))
        wave = arith.divui(tid, self.index(tpw))
        w = self.cs.waves_per_axis
        self.symbols[WAVE[0]] = arith.remui(wave, self.index(w[0]))
        self.symbols[WAVE[1]] = arith.remui(arith.divui(wave, self.index(w[0])), self.index(w[1]))
        self.symbols[WAVE[2]] = arith.divui(wave, self.index(w[0] * w[1]))
        remap = self.ctx.workgroup_remap
        if remap:
            self.symbols[PID] = gpu.block_id(gpu.Dimension.x)
        if self.ctx.persistent:  # the workgroup ids are bound per tile by the tile loop (codegen.hopper.persistent)
            return
        for wg, dim in zip(WORKGROUP, (gpu.Dimension.x, gpu.Dimension.y, gpu.Dimension.z)):
            self.symbols[wg] = self.index(remap[wg]) if wg in remap else gpu.block_id(dim)

    # ----- graphs -----
    def build(self) -> None:
        with ir.InsertionPoint(self.ret):
            self.hardware_symbols()
            self.lower_graph(self.trace.graph)
            if self.ctx.cluster != (1, 1, 1):  # no workgroup exits while its peer multicasts into it
                from .hopper.tma import cluster_barrier

                cluster_barrier()

    def lower_graph(self, g: fx.Graph, nodes: list | None = None) -> None:
        for node in g.nodes if nodes is None else nodes:
            if node.op == "output" or node in self.done:
                continue
            loc = node.meta.get("loc")
            with ir.Location.file(loc.filename, loc.line, 0) if loc else ir.Location.unknown():
                if node.op == "placeholder":
                    self.placeholder(node)
                    continue
                op = node.meta.get("op")
                if op not in LOWERINGS:
                    raise CodegenError(loc, message=f"no lowering rule for op {op.name if op else node.target}")
                LOWERINGS[op](self, node)

    def placeholder(self, node: fx.Node) -> None:
        role = node.meta.get("role")
        if role == "memory":
            self.values[node] = self.args[node.name]
        elif role == "scalar":
            self.values[node] = vector.broadcast(vec_type(1, node.meta["type"].dtype), self.scalars[node.name])
        elif role == "capture":
            self.values[node] = self.values[node.meta["capture_of"]]
        # iter_arg placeholders are bound by the iterate rule

    def operand(self, arg, result: Layout, dtype: dt.DType) -> ir.Value:
        """``arg`` as a vector in ``result``'s element order (splatting scalars, shuffling broadcasts)."""
        vt = vec_type(result.size, dtype)
        if isinstance(arg, sympy.Expr) and not arg.is_Number:  # a shape expression, in the integer type
            return vector.broadcast(
                vt, arith.index_cast(elem_type(dtype), self.index(self.cs.resolve_tile_starts(arg)))
            )
        if not isinstance(arg, fx.Node):
            return splat(vt, dtype, arg)
        v = self.values[arg]
        lay = arg.meta["layout"]
        if lay.dims == result.dims:
            return v
        mask = broadcast_positions(result, lay)
        if mask == list(range(lay.size)):
            return v
        return vector.shuffle(v, v, mask)


@rule(Barrier)
def lower_barrier(fb: FunctionBuilder, node: fx.Node) -> None:
    gpu.barrier()


def _copy_group(copies: list[ir.Value]) -> ir.Value:
    token = ir.Type.parse("!nvgpu.device.async.token")
    return ir.Operation.create("nvgpu.device_async_create_group", results=[token], operands=copies).result


@rule(AsyncCommit)
def lower_async_commit(fb: FunctionBuilder, node: fx.Node) -> None:
    fb.last_group = _copy_group(fb.pending_copies)
    fb.pending_copies = []


@rule(AsyncWait)
def lower_async_wait(fb: FunctionBuilder, node: fx.Node) -> None:
    if node.kwargs.get("drain"):  # after a loop: its groups' tokens are out of scope; an empty group orders
        fb.last_group = _copy_group([])
    if fb.last_group is None:
        raise CodegenError(node.meta.get("loc"), message="async_wait before any committed copy group")
    ir.Operation.create(
        "nvgpu.device_async_wait",
        results=[],
        operands=[fb.last_group],
        attributes={"numGroups": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), node.kwargs["pending"])},
    )


@rule(RegisterInit)
def lower_register(fb: FunctionBuilder, node: fx.Node) -> None:
    dtype = node.meta["type"].dtype
    fb.values[node] = splat(vec_type(node.meta["layout"].size, dtype), dtype, node.kwargs["value"])


# kind -> (float op, integer op)
_ARITH = {
    "add": (arith.addf, arith.addi), "sub": (arith.subf, arith.subi), "mul": (arith.mulf, arith.muli),
    "div": (arith.divf, arith.divsi), "maximum": (arith.maximumf, arith.maxsi),
    "minimum": (arith.minimumf, arith.minsi), "floordiv": (None, arith.floordivsi),
    "mod": (None, lambda x, y: arith.subi(x, arith.muli(arith.floordivsi(x, y), y))),  # Python's sign rule
    "and": (None, arith.andi), "or": (None, arith.ori), "xor": (None, arith.xori), "shl": (None, arith.shli),
    "shr": (None, arith.shrsi),
    # afn: NVPTX emits div.approx.f32 (a reciprocal and a multiply, about 2 ulp)
    "div_approx": (lambda x, y: arith.divf(x, y, fastmath=ir.Attribute.parse("#arith.fastmath<afn>")), None),
}  # fmt: skip
_UNSIGNED = {"div": arith.divui, "floordiv": arith.divui, "mod": arith.remui, "maximum": arith.maxui,
             "minimum": arith.minui, "shr": arith.shrui}  # fmt: skip
_CMPF = {"lt": "OLT", "le": "OLE", "gt": "OGT", "ge": "OGE", "eq": "OEQ", "ne": "UNE"}
_CMPI = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}


@rule(Binary)
def lower_binary(fb: FunctionBuilder, node: fx.Node) -> None:
    kind = Kwargs(node).kind
    layout = node.meta["layout"]
    in_dtype = next(a.meta["type"].dtype for a in node.args if isinstance(a, fx.Node))
    x, y = (fb.operand(a, layout, in_dtype) for a in node.args)
    if kind in _CMPF:
        if in_dtype.is_float:
            fb.values[node] = arith.cmpf(getattr(arith.CmpFPredicate, _CMPF[kind]), x, y)
        else:
            pred = _CMPI[kind] if in_dtype.signed or kind in ("eq", "ne") else "u" + _CMPI[kind][1:]
            fb.values[node] = arith.cmpi(getattr(arith.CmpIPredicate, pred), x, y)
        return
    if in_dtype.is_float and kind in ("add", "sub", "mul"):
        # contractible: LLVM may fuse a multiply into its add (s * c - m -> one fma per element)
        fb.values[node] = _ARITH[kind][0](x, y, fastmath=ir.Attribute.parse("#arith.fastmath<contract>"))
        return
    if not in_dtype.signed and kind in _UNSIGNED:
        fb.values[node] = _UNSIGNED[kind](x, y)
        return
    fb.values[node] = _ARITH[kind][0 if in_dtype.is_float else 1](x, y)


@rule(Unary)
def lower_unary(fb: FunctionBuilder, node: fx.Node) -> None:
    """The MLIR op of the kind's ``UNARY_KINDS`` entry; integer negation as ``0 - x``; f32 exp2 on NVIDIA
    as ``ex2.approx``."""
    kind, x = UNARY_KINDS[Kwargs(node).kind], fb.values[arg_node(node, 0)]
    dtype = node.meta["type"].dtype
    if kind.name == "neg" and not dtype.is_float:
        fb.values[node] = arith.subi(splat(x.type, dtype, 0), x)
    elif kind.name == "abs" and not dtype.signed:  # u8: |x| is x (torch.abs on uint8)
        fb.values[node] = x
    elif kind.name == "exp2" and dtype.is_float and fb.cs.threads_per_wave == 32 and fb.ctx.target.has_nvvm_math:
        from .lowering_ops import nv_exp2

        if dtype == dt.f32:
            fb.values[node] = nv_exp2(x)
        else:  # IREE's half-precision exp2 polynomial is 6 ulp off (H100); f32 and one rounding is exact enough
            wide = vec_type(node.meta["layout"].size, dt.f32)
            fb.values[node] = arith.truncf(x.type, nv_exp2(arith.extf(wide, x)))
    elif kind.name == "round" and dtype in (dt.f16, dt.bf16):  # the GPU's half roundeven rounds halves away
        wide = vec_type(node.meta["layout"].size, dt.f32)
        r = ir.Operation.create("math.roundeven", results=[wide], operands=[arith.extf(wide, x)]).result
        fb.values[node] = arith.truncf(x.type, r)  # an integer-valued f32 of a half: exact in the half type
    else:
        name = kind.float_op if dtype.is_float else kind.int_op
        fb.values[node] = ir.Operation.create(name, results=[x.type], operands=[x]).result


@rule(Select)
def lower_select(fb: FunctionBuilder, node: fx.Node) -> None:
    layout, dtype = node.meta["layout"], node.meta["type"].dtype
    c = fb.operand(node.args[0], layout, dt.i1)
    x, y = (fb.operand(a, layout, dtype) for a in node.args[1:])
    fb.values[node] = arith.select(c, x, y)


@rule(Broadcast)
def lower_broadcast(fb: FunctionBuilder, node: fx.Node) -> None:
    fb.values[node] = fb.operand(node.args[0], node.meta["layout"], node.meta["type"].dtype)


@rule(MMA)
def lower_mma(fb: FunctionBuilder, node: fx.Node) -> None:
    """``nvgpu.mma.sync`` (f16/bf16 m16n8k16, 8-bit m16n8k32, tf32 m16n8k8 with its operands rounded by
    ``cvt.rna.tf32.f32``) or ``amdgpu.mfma``; the fragments reshaped to the instruction's vector types."""
    assert fb.cs.mma_type is not None  # infer_indices rejects an mma without one
    spec = fb.cs.mma_type.spec
    a, b, c = (fb.values[x] for x in arg_nodes(node))
    k = MMA.dims(node)[2]  # padding along K must add nothing (``codegen/padding.py``)
    a, b = (zero_k_padding(fb, arg_node(node, i), k, v) for i, v in ((0, a), (1, b)))
    in_dt = arg_node(node, 0).meta["type"].dtype
    acc_dt = arg_node(node, 2).meta["type"].dtype
    if in_dt.name != spec.in_dtype or acc_dt.name != spec.acc_dtype:
        raise CodegenError(
            node.meta.get("loc"),
            message=f"{fb.cs.mma_type.name} takes {spec.in_dtype} operands and a "
            f"{spec.acc_dtype} accumulator, got {in_dt} and {acc_dt}",
        )
    if spec.vendor != "nvidia":
        fb.values[node] = amdgpu.mfma(spec.m, spec.n, spec.k, a, b, c, blocks=1)
        return
    tf32 = in_dt == dt.f32
    if tf32:
        a, b = round_tf32(a), round_tf32(b)
    a_t, b_t = (ir.VectorType.get(list(s), elem_type(in_dt)) for s in (spec.a_shape, spec.b_shape))
    c_t = ir.VectorType.get(list(spec.c_shape), elem_type(acc_dt))
    frags = [reshape(t, v) for t, v in zip((a_t, b_t, c_t), (a, b, c))]  # the fragments' 2-D shapes
    i64 = ir.IntegerType.get_signless(64)
    attrs = {"mmaShape": ir.ArrayAttr.get([ir.IntegerAttr.get(i64, x) for x in (spec.m, spec.n, spec.k)])}
    if tf32:
        attrs["tf32Enabled"] = ir.UnitAttr.get()
    mma = ir.Operation.create("nvgpu.mma.sync", results=[c_t], operands=frags, attributes=attrs)
    fb.values[node] = reshape(c.type, mma.result)


def round_tf32(v: ir.Value) -> ir.Value:
    """The f32 vector ``v`` rounded to tf32 (``cvt.rna.tf32.f32``: nearest, ties away from zero; low 13
    bits zero).  The tensor core would otherwise ignore the low 13 bits, truncating toward zero: twice the
    error, and biased.  Pure, so LLVM computes a fragment's rounding once however many mmas read it."""
    n = ir.VectorType(v.type).shape[0]
    i32 = ir.IntegerType.get_signless(32)
    rna = ir.Attribute.parse("#nvvm.fp_rnd_mode<rna>")
    bits = [
        ir.Operation.create(
            "nvvm.convert.float.to.tf32", results=[i32], operands=[vector.extract(v, [], [i])], attributes={"rnd": rna}
        ).result
        for i in range(n)
    ]
    return vector.bitcast(v.type, vector.from_elements(ir.VectorType.get([n], i32), bits))


@rule(Iterate)
def lower_iterate(fb: FunctionBuilder, node: fx.Node) -> None:
    kw = Kwargs(node)
    dim, sub = kw.dim, fb.trace.subgraphs[kw.subgraph]
    tile = fb.cs.loop_tile.get(dim)
    if tile is None:
        raise CodegenError(node.meta.get("loc"), message=f"wc.iterate over {dim} needs a TilingConstraint on {dim}")
    inits = [fb.values[n] for n in arg_nodes(node, 0)]
    stages = fb.ctx.loop_stages.get(dim)
    if stages:  # the pipeline stage rides along as the last iter_arg
        inits.append(fb.index(node.meta.get("stage_start", fb.ctx.stage_start.get(dim, 0))))
    first, stop = fb.cs.loop_bounds(dim, node.kwargs.get("start"), node.kwargs.get("end"))
    loop = scf.ForOp(fb.index(first), fb.index(stop), fb.index(1), inits)
    iv = induction_symbol(dim)
    with ir.InsertionPoint(loop.body):
        carried = list(loop.inner_iter_args)
        loop_symbols = {iv: loop.induction_variable}
        if stages:
            loop_symbols[stage_symbol(dim)] = carried.pop()
            fb.ranges[stage_symbol(dim)] = stages
        fb.enter_loop(loop.operation, loop_symbols)
        iter_phs = placeholders(sub, "iter_arg")
        for p, v in zip(iter_phs, carried):
            fb.values[p] = v
        fb.lower_graph(sub)
        out = next(n for n in sub.nodes if n.op == "output").args[0]
        yields = [fb.values[o] for o in out]
        if stages:
            nxt = fb.index(stage_symbol(dim) + 1)
            wrap = arith.cmpi(arith.CmpIPredicate.eq, nxt, fb.index(stages))
            yields.append(arith.select(wrap, fb.index(0), nxt))
        scf.yield_(yields)
        fb.exit_loop()
    results = list(loop.results)
    fb.values[node] = results[:-1] if stages else results


@rule(GetResult)
def lower_get_result(fb: FunctionBuilder, node: fx.Node) -> None:
    fb.values[node] = fb.values[arg_node(node, 0)][Kwargs(node).index]


from . import memory_access  # noqa: E402, F401 - registers Read, Write, Allocate and AsyncCopy
from .padding import zero_k_padding  # noqa: E402 - it builds on this module's helpers
