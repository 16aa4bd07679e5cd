"""Lowering rules of the Hopper ops (``frontend/ops_hopper.py``), registered in ``lowering.LOWERINGS``:
``MatrixDescriptor`` (the 64-bit wgmma matrix descriptor, one index expression), ``WarpgroupMMA``
(``nvvm.wgmma.mma_async``, or inline PTX with A in registers; the accumulator stays in the
instruction's struct form inside a chain of wgmmas), ``WgmmaFence``/``WgmmaCommit``/``WgmmaWait`` and
``ProxyFence``.  Details: docs/hopper.md, "Module contracts".
"""

from __future__ import annotations

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, llvm, memref, nvvm, vector

from ...abi import FENCE_OPERANDS
from ...errors import CodegenError
from ...frontend.dtypes import DTYPES
from ...frontend.ops import Permute, RegisterInit
from ...frontend.ops_hopper import (
    MatrixDescriptor,
    ProxyFence,
    WarpgroupMMA,
    WgmmaAccumulator,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from ...frontend.tracing import arg_node, arg_nodes, capture_root, placeholders
from ...passes.schema import Kwargs
from ..lowering import FunctionBuilder, elem_type, round_tf32, rule, vec_type


def hoisted_symbol(fb: FunctionBuilder, name: str, make) -> sympy.Symbol:
    """A symbol for an address computed once (by ``make``) at the top of the function, before any loop."""
    sym = sympy.Symbol(name, integer=True, nonnegative=True)
    if sym not in fb.symbols:
        with fb.at_level(0):
            fb.symbols[sym] = make()
    return sym


def _tile_address_symbol(fb: FunctionBuilder, alloc: fx.Node) -> sympy.Symbol:
    """A symbol whose value is the shared address of ``alloc``."""
    return hoisted_symbol(fb, f"$SMEM_{alloc.name}", lambda: memref.extract_aligned_pointer_as_index(fb.values[alloc]))


@rule(MatrixDescriptor)
def lower_descriptor(fb: FunctionBuilder, node: fx.Node) -> None:
    alloc = capture_root(arg_node(node, 0))
    kw = Kwargs(alloc)
    (row_dim, rows), (k_dim, cols) = kw.tile.items()
    smem, tile, layout = kw.smem_layout, (rows, cols), node.meta["layout"]
    iv_subs = node.meta.get("iv_subs") or {}  # a tile of another iteration (intra_warpgroup_overlap): its base
    row, k = (sympy.expand(layout.seq(d).start - sympy.sympify(kw.base[d]).subs(iv_subs)) for d in (row_dim, k_dim))
    try:
        offset = smem.byte_offset(row, k, tile)
    except ValueError as e:
        raise CodegenError(node.meta.get("loc"), message=f"descriptor of %{node.name}: {e}") from None
    stage_bytes = tile[0] * tile[1] * smem.elem_bytes  # a multiple of 1024: every stage is atom-aligned
    address = _tile_address_symbol(fb, alloc) + sympy.sympify(node.meta.get("stage", 0)) * stage_bytes + offset
    bits = smem.descriptor_bits(tile)
    fb.values[node] = split_descriptor(fb.index(sympy.floor(address / 16) + bits % 2**32), bits >> 32)


def split_descriptor(low: ir.Value, high: int) -> ir.Value:
    """The 64-bit descriptor from its low word (an ``index``: start address >> 4 plus the LBO field) and its
    constant high word (SBO, swizzle mode): ``zext(trunc_32(low)) | high << 32``, the same value as the
    64-bit sum (the low word never carries), but with a constant high word in the PTX, as CUTLASS's
    ``GmmaDescriptor``: ptxas 12.9 miscompiled the add chain (docs/hopper.md, "Module contracts",
    ``codegen/ptx_check.py``; checked by ``ptx_check.wgmma_descriptor_violations``)."""
    i32, i64 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(64)
    word = arith.extui(i64, arith.index_cast(i32, low))
    hi = high << 32
    return arith.ori(word, arith.constant(i64, hi - 2**64 if hi >= 2**63 else hi))


def _to_struct(acc: ir.Value, count: int) -> ir.Value:
    """The accumulator in the instruction's struct form (a wgmma result or a carried one already is)."""
    if not isinstance(acc.type, ir.VectorType):
        return acc
    s = llvm.mlir_undef(llvm.StructType.get_literal([ir.VectorType(acc.type).element_type] * count))
    for i in range(count):
        s = llvm.insertvalue(s, vector.extract(acc, [], [i]), [i])
    return s


def _elements(v: ir.Value, count: int) -> list[ir.Value]:
    """The f32 (or s32) elements of an accumulator in vector or in struct form."""
    if isinstance(v.type, ir.VectorType):
        return [vector.extract(v, [], [i]) for i in range(count)]
    return [llvm.extractvalue(_struct_elem(v.type), v, [i]) for i in range(count)]


def _struct_elem(t: ir.Type) -> ir.Type:
    return llvm.StructType(t).body[0]


def _reg(t: ir.Type) -> str:
    """The inline-asm constraint letter of an accumulator register: ``f`` (f32) or ``r`` (s32)."""
    return "f" if t == ir.F32Type.get() else "r"


_PTX_TYPE = {"f16": "f16", "bf16": "bf16", "i8": "s8", "f32": "tf32"}  # operands (f32 ones as tf32)
_PTX_ACC = {"f32": "f32", "i32": "s32"}
# the immediates after scale-d (PTX ISA): imm-scale-a, imm-scale-b and, for 16-bit types, imm-trans-b;
# none for integers
_IMMEDIATES = {"f16": ", 1, 1, {trans_b}", "bf16": ", 1, 1, {trans_b}", "f32": ", 1, 1", "i8": ""}


def _to_vector(fb: FunctionBuilder, node: fx.Node) -> None:
    value, count = fb.values[node], node.meta["layout"].size
    if not isinstance(value.type, ir.VectorType):
        fb.values[node] = vector.from_elements(vec_type(count, node.meta["type"].dtype), _elements(value, count))


def _mn_major(node: fx.Node) -> bool:
    """Whether a descriptor operand (possibly through a ``permute``) reads an MN-major tile."""
    while node.meta.get("op") is Permute:
        node = arg_node(node, 0)
    return Kwargs(capture_root(arg_node(node, 0))).smem_layout.mn_major


def _attr(text: str) -> ir.Attribute:
    return ir.Attribute.parse(text)


@rule(WarpgroupMMA)
def lower_wgmma(fb: FunctionBuilder, node: fx.Node) -> None:
    assert fb.cs.mma_type is not None  # infer_indices rejects an mma without one
    spec = fb.cs.mma_type.spec
    a, b, acc_node = arg_nodes(node)
    layout = node.meta["layout"]
    n, count = layout.tile[1], layout.size  # n / 2 f32 (s32) per thread
    st = llvm.StructType.get_literal([elem_type(DTYPES[spec.acc_dtype])] * count)
    _check_readers(fb, node)
    if node.meta.get("a_in_registers"):
        fb.values[node] = _wgmma_registers_a(fb, node, n, count, st)
        return
    in_t, one = _attr(f"#nvvm.wgmma_type<{_PTX_TYPE[spec.in_dtype]}>"), _attr("#nvvm.wgmma_scale_in<one>")
    # imm-trans-a/b = 1 (layout col for A, row for B) reads an MN-major tile
    lay_a = "col" if _mn_major(a) else "row"
    lay_b = "row" if _mn_major(b) else "col"
    shape = _attr(f"#nvvm.shape<m = {spec.m}, n = {n}, k = {spec.k}>")
    types = (in_t, in_t, _attr(f"#nvvm.wgmma_type<{_PTX_ACC[spec.acc_dtype]}>"))  # A, B, D
    scales = (_attr("#nvvm.wgmma_scale_out<one>"), one, one)  # D, A, B
    layouts = (_attr(f"#nvvm.mma_layout<{lay_a}>"), _attr(f"#nvvm.mma_layout<{lay_b}>"))
    acc = _to_struct(fb.values[acc_node], count)
    fb.values[node] = nvvm.wgmma_mma_async(st, acc, fb.values[a], fb.values[b], shape, *types, *scales, *layouts)


def _zero(node: fx.Node) -> bool:
    """Whether an accumulator operand is a fresh all-zero register tile (``Register[...](0.0)``)."""
    return node.meta.get("op") is RegisterInit and Kwargs(node).value == 0.0


def _wgmma_registers_a(fb: FunctionBuilder, node: fx.Node, n: int, count: int, st: ir.Type) -> ir.Value:
    """``wgmma.mma_async`` with A in registers (four 32-bit registers per thread: f16x2/bf16x2, s8x4 or a
    tf32 rounded by ``cvt.rna``; no MLIR op has this form, so inline PTX as IREE emits for the descriptor
    form): outputs ``=f`` (``=r`` for s32) tied to the accumulator inputs, then the A registers (``r``)
    and the B descriptor (``l``).  A zero accumulator
    (S = Q Kᵀ in attention) is not passed at all: scale-d = 0 makes the instruction compute D = A B,
    which saves zeroing N/2 registers per tile and iteration."""
    assert fb.cs.mma_type is not None  # infer_indices rejects an mma without one
    spec = fb.cs.mma_type.spec
    a, b, acc_node = arg_nodes(node)
    i32 = ir.IntegerType.get_signless(32)
    elems = [] if _zero(acc_node) else _elements(fb.values[acc_node], count)
    a_val = round_tf32(fb.values[a]) if spec.in_dtype == "f32" else fb.values[a]
    packed = vector.bitcast(ir.VectorType.get([4], i32), a_val)
    regs = [vector.extract(packed, [], [i]) for i in range(4)]
    first = count + len(elems)  # tied inputs are numbered too: $count..$2count-1
    outs = ", ".join(f"${i}" for i in range(count))
    ins = ", ".join(f"${first + i}" for i in range(4))
    trans_b = int(_mn_major(b))
    asm = (
        f"{{\n.reg .pred p;\nsetp.ne.b32 p, {0 if not elems else 1}, 0;\n"
        f"wgmma.mma_async.sync.aligned.m{spec.m}n{n}k{spec.k}.{_PTX_ACC[spec.acc_dtype]}."
        f"{_PTX_TYPE[spec.in_dtype]}.{_PTX_TYPE[spec.in_dtype]} "
        f"{{{outs}}}, {{{ins}}}, ${first + 4}, p{_IMMEDIATES[spec.in_dtype].format(trans_b=trans_b)};\n}}\n"
    )
    reg = _reg(_struct_elem(st))
    constraints = ",".join([f"={reg}"] * count + [str(i) for i in range(len(elems))] + ["r"] * 4 + ["l"])
    return llvm.inline_asm(st, elems + regs + [fb.values[b]], asm, constraints, has_side_effects=True)


def _check_readers(fb: FunctionBuilder, node: fx.Node) -> None:
    """Nothing may read the registers an in-flight wgmma writes: its users are the next wgmma of the chain,
    a wait that retires it, or the loop's yield when the loop carries it in struct form."""
    retired = any(u.meta.get("op") is WgmmaWait and node in Kwargs(u).retire for u in node.users)
    for u in node.users:
        if u.meta.get("op") in (WarpgroupMMA, WgmmaWait) or retired:
            continue
        if u.op == "output":
            carried = placeholders(node.graph, "iter_arg")
            if not isinstance(fb.values[carried[arg_nodes(u, 0).index(node)]].type, ir.VectorType):
                continue
        raise CodegenError(
            node.meta.get("loc"),
            message=f"%{node.name} is read by %{u.name} with no "
            "wgmma_wait retiring it first (insert_wgmma_fences places one)",
        )


def fence_operands(s: ir.Value, count: int) -> ir.Value:
    """The struct ``s`` through an empty volatile inline asm whose outputs are tied to its inputs (what
    CUTLASS's ``warpgroup_fence_operand`` does): the values become opaque results of a side-effecting op
    that LLVM may neither sink past the ``wgmma.fence`` that follows nor rematerialise after it.  Without
    it, LLVM moved the zero-initialisation of a 64x256 accumulator (128 ``mov``) of a peeled first loop
    iteration between ``wgmma.fence`` and the first ``wgmma`` - a register write the fence does not order,
    so the wgmma read undefined registers (wrong results on an H100, warp-specialized 128x256 tile)."""
    constraints = ",".join([f"={_reg(_struct_elem(s.type))}"] * count + [str(i) for i in range(count)])
    return llvm.inline_asm(s.type, _elements(s, count), FENCE_OPERANDS, constraints, has_side_effects=True)


@rule(WgmmaAccumulator)
def lower_wgmma_accumulator(fb: FunctionBuilder, node: fx.Node) -> None:
    count = node.meta["layout"].size
    fb.values[node] = fence_operands(_to_struct(fb.values[arg_node(node, 0)], count), count)


@rule(WgmmaFence)
def lower_wgmma_fence(fb: FunctionBuilder, node: fx.Node) -> None:
    nvvm.wgmma_fence_aligned()


@rule(WgmmaCommit)
def lower_wgmma_commit(fb: FunctionBuilder, node: fx.Node) -> None:
    nvvm.wgmma_commit_group_sync_aligned()


@rule(WgmmaWait)
def lower_wgmma_wait(fb: FunctionBuilder, node: fx.Node) -> None:
    """The wait, then the retired accumulators as vectors: only now may other instructions read them."""
    nvvm.wgmma_wait_group_sync_aligned(Kwargs(node).pending)
    for n in Kwargs(node).retire:
        _to_vector(fb, n)


@rule(ProxyFence)
def lower_proxy_fence(fb: FunctionBuilder, node: fx.Node) -> None:
    nvvm.fence_proxy(
        ir.Attribute.parse("#nvvm.proxy_kind<async.shared>"), space=ir.Attribute.parse("#nvvm.shared_space<cta>")
    )
