"""Lowering rule of the atomic ops (``frontend/ops_atomic.py``), registered in ``lowering.LOWERINGS``.

Requires: ``coarsen_loads`` (each run is what one instruction updates: ``atomic_width``) and
``mask_bounds``.  Guarantees, per run of an atomic, under the run's bounds guard:

- NVIDIA targets (``Target.has_red``), global memory: an unused result is one relaxed GPU-scope ``red``
  as inline PTX (``red.relaxed.gpu.global.add.f32``, ``.u32`` add, ``.s32`` min/max, ``add.noftz.f16x2``
  / ``.bf16x2`` of a pair, ``.v2``/``.v4`` of 2 or 4 such words on ``has_red_vector`` targets); a used one
  is an ``atom`` of the same form on one 32-bit element, returning the old value.  ``memref.atomic_rmw``
  reaches PTX as ``atom.acq_rel.sys`` (a system-scope fence per element: ``index_add_`` ran at 4% of copy
  bandwidth on an H100); relaxed GPU scope is what CUDA's ``atomicAdd`` issues.  The address is the base
  pointer (``memref.extract_aligned_pointer_as_index``, as wgmma and TMA take it) plus the element offset
  of a ``memref.subview`` of the run (its ``extract_strided_metadata`` offset) times the element size: the
  subview keeps the emulator's per-dimension bounds check.  A generic address of global memory is its
  global address on NVIDIA GPUs (CUTLASS passes generic pointers to ``red.global`` the same way).
- NVIDIA targets, shared memory (``wc.allocate`` buffers), one 32-bit word (an f32/i32 element or an
  unused add of an f16x2/bf16x2 pair): ``red``/``atom.relaxed.cta.shared`` at the buffer's shared-window
  address (``memref.atomic_rmw`` there is ``atom.acq_rel.sys
  .shared``, a system-scope fence per element: ~2 us per atomic in a thread's sequence on an H100; the
  workgroup orders its shared accesses with barriers, which ``insert_barriers`` places).
- Everything else is ``memref.atomic_rmw`` per element (it returns the old value): float min/max (no
  ``red`` before sm_90; LLVM loops on a compare-and-swap, of the 32-bit word holding a half), bf16
  without ``bf16x2`` reductions, single f16/bf16 elements, and AMD targets.
A value several threads hold identically updates memory from one of them (``replicas.replica_guard``).
``wc.arrive`` (kind ``"arrive"``) lowers in ``codegen/arrive.py``.
Floating-point min/max are ``maximumf``/``minimumf`` (NaN-propagating, like ``wc.maximum``).  A used result
is the vector of old values in the value's element order (zeros where the guard is off).
"""

from __future__ import annotations

import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, llvm, memref, scf, vector

from ..frontend import dtypes as dt
from ..frontend.ops_atomic import Atomic
from ..frontend.tracing import arg_node
from ..frontend.types import AddressSpace
from ..passes.schema import Kwargs
from .lowering import FunctionBuilder, elem_type, rule, vec_type
from .memory_access import in_bounds, index_vectors, mem_indices, run_coords
from .replicas import guarded, replica_guard

# (float kind, integer kind) of ``arith.AtomicRMWKind`` per atomic op kind
_KINDS = {"add": ("addf", "addi"), "min": ("minimumf", "mins"), "max": ("maximumf", "maxs")}
# PTX operation and type of a red/atom of one 32-bit word, per (kind, dtype); f16/bf16: a packed pair
_PTX = {
    ("add", "f32"): "add.f32", ("add", "i32"): "add.u32", ("min", "i32"): "min.s32", ("max", "i32"): "max.s32",
    ("add", "f16"): "add.noftz.f16x2", ("add", "bf16"): "add.noftz.bf16x2",
}  # fmt: skip


def ptx_form(fb: FunctionBuilder, node: fx.Node, n: int) -> tuple[str, int, str] | None:
    """(PTX op and type, 32-bit words, scope and space) of the ``red``/``atom`` updating ``n`` elements of
    ``node``'s memory, or None where ``memref.atomic_rmw`` does it."""
    mtype, target = arg_node(node, 1).meta["type"], fb.ctx.target
    dtype, kind = mtype.dtype, Kwargs(node).kind
    if not target.has_red or (kind, dtype.name) not in _PTX:
        return None
    words = n * dtype.bytes // 4
    if words < 1 or (dtype == dt.bf16 and not target.has_red_bf16x2):
        return None
    if mtype.address_space == AddressSpace.SHARED:  # one 32-bit word, ordered by the barriers only
        return (_PTX[(kind, dtype.name)], 1, "cta.shared") if words == 1 else None
    if mtype.address_space != AddressSpace.GLOBAL or (words > 1 and not target.has_red_vector):
        return None
    op, ty = _PTX[(kind, dtype.name)].rsplit(".", 1)
    return (f"{op}.v{words}.{ty}" if words > 1 else f"{op}.{ty}"), words, "gpu.global"


def atomic_address(mem: fx.Node, source: ir.Value, base: tuple, idx: list[ir.Value], n: int) -> ir.Value:
    """The i64 address (global, or in the shared window) of the ``n`` elements of ``mem`` from ``idx``
    along its last dim (``base``: the base pointer and the element size, both made outside any branch)."""
    rank = len(idx)
    mtype = ir.MemRefType(source.type)
    strides, _offset = mtype.get_strides_and_offset()
    layout = ir.StridedLayoutAttr.get(ir.ShapedType.get_dynamic_stride_or_offset(), strides)
    shape = [1] * (rank - 1) + [n]
    view_type = ir.MemRefType.get(shape, mtype.element_type, layout, mtype.memory_space)
    view = memref.subview(source, idx, shape, [1] * rank, result_type=view_type)
    offset = memref.ExtractStridedMetadataOp(view).offset
    return arith.index_cast(ir.IntegerType.get_signless(64), arith.addi(base[0], arith.muli(offset, base[1])))


def _inline(node: fx.Node, form: tuple[str, int, str], addr: ir.Value, piece: ir.Value) -> ir.Value | None:
    """``red`` (None) or, for a used result, ``atom`` (the old word) of ``piece`` at ``addr``."""
    op, words, space = form
    f32 = op.endswith(".f32")
    reg, et = ("f", ir.F32Type.get()) if f32 else ("r", ir.IntegerType.get_signless(32))
    as_words = piece if f32 or piece.type == et else vector.bitcast(ir.VectorType.get([words], et), piece)
    vals = (
        [as_words]
        if not isinstance(as_words.type, ir.VectorType)
        else [vector.extract(as_words, [], [i]) for i in range(words)]
    )
    if node.users:
        asm = f"atom.relaxed.{space}.{op} $0, [$1], $2;"
        return llvm.inline_asm(et, [addr, *vals], asm, f"={reg},l,{reg}", has_side_effects=True)
    operands = ", ".join(f"${i + 1}" for i in range(words))
    asm = f"red.relaxed.{space}.{op} [$0], {{{operands}}};" if words > 1 else f"red.relaxed.{space}.{op} [$0], $1;"
    llvm.inline_asm(None, [addr, *vals], asm, ",".join(["l"] + [reg] * words), has_side_effects=True)
    return None


def _piece(value: ir.Value, first: int, n: int, dtype: dt.DType) -> ir.Value:
    """Elements ``first .. first + n`` of ``value`` (a scalar for one)."""
    if n == 1:
        return vector.extract(value, [], [first])
    return vector.extract_strided_slice(vec_type(n, dtype), value, [first], [n], [1])


def _update(fb: FunctionBuilder, node: fx.Node, run: tuple, idx: list[list[ir.Value]], base: tuple | None) -> list:
    """The instructions of one run (inside its guard; ``idx``: each element's indices, made before it); the
    old value of each element for a used result."""
    first, n, _off = run
    mem = arg_node(node, 1)
    dtype = mem.meta["type"].dtype
    value = fb.values[arg_node(node, 0)]
    form = ptx_form(fb, node, n)
    if form is not None and base is not None:
        piece = _piece(value, first, n, dtype)
        old = _inline(node, form, atomic_address(mem, fb.values[mem], base, idx[0], n), piece)
        return [] if old is None else [old]
    kind = getattr(arith.AtomicRMWKind, _KINDS[Kwargs(node).kind][0 if dtype.is_float else 1])
    olds = [memref.atomic_rmw(kind, vector.extract(value, [], [first + k]), fb.values[mem], idx[k]) for k in range(n)]
    return olds if node.users else []


@rule(Atomic)
def lower_atomic(fb: FunctionBuilder, node: fx.Node) -> None:
    if Kwargs(node).kind == "arrive":
        from .arrive import lower_arrive

        lower_arrive(fb, node)
        return
    mem = arg_node(node, 1)
    layout = node.meta["layout"]
    dtype, last = mem.meta["type"].dtype, mem.meta["type"].shape[-1]
    vecs = index_vectors(fb, node, layout)
    # the base pointer before any branch (hoisted: a value cached inside a region would not dominate the next)
    base = None
    if any(ptx_form(fb, node, n) for _f, n, _o in node.meta["accesses"]):
        ptr = fb.cached(("ptr", mem), 0, lambda: memref.extract_aligned_pointer_as_index(fb.values[mem]))
        base = (ptr, fb.index(dtype.bytes))
    guard = replica_guard(fb, layout)  # a replicated value updates memory once
    olds: list[ir.Value] = []
    for run in node.meta["accesses"]:
        first, n, off = run
        coords = run_coords(layout, first, off, vecs)
        each = 1 if ptx_form(fb, node, n) is not None else n  # memref.atomic_rmw: one element at a time
        idx = [mem_indices(fb, node, mem, {**coords, last: coords[last] + k} if k else coords) for k in range(each)]
        cond = guarded(in_bounds(fb, node, coords), guard)
        if cond is None:
            olds += _update(fb, node, run, idx, base)
            continue
        types = [elem_type(dtype)] * (n if node.users else 0)
        branch = scf.IfOp(cond, types, has_else=bool(types))
        with ir.InsertionPoint(branch.then_block):
            scf.yield_(_update(fb, node, run, idx, base))
        if types:
            with ir.InsertionPoint(branch.else_block):
                scf.yield_([arith.constant(t, 0.0 if dtype.is_float else 0) for t in types])
            olds += list(branch.results)
    if node.users:
        fb.values[node] = vector.from_elements(vec_type(layout.size, dtype), olds)
