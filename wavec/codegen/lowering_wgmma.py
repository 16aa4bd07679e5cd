"""Lowering rules of the Hopper ops (``frontend/ops_hopper.py``), registered in ``lowering.LOWERINGS``.

- ``MatrixDescriptor`` -> the 64-bit ``wgmma`` matrix descriptor (PTX ISA, "Matrix Descriptor Format")
  of the tile's ``SharedLayout`` (core matrices or 128-byte swizzle):
  bits 0-13 start address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 62-63 swizzle mode.  The start address
  is the shared tile's address (``memref.extract_aligned_pointer_as_index``, emitted once before the
  loops) plus the stage and the instruction tile's byte offset; the whole descriptor is one index
  expression, so its loop-invariant part is hoisted like any other address.
- ``WarpgroupMMA`` -> ``nvvm.wgmma.mma_async`` m64nNk16 (A K-major "row", B K-major "col"); the
  accumulator is the layout's ``vector<N/2 x f32>`` and crosses into the instruction's
  ``!llvm.struct<(f32 x N/2)>`` only at the ends of a chain of wgmmas (LLVM folds the element moves):
  into it before the first, out of it right after the ``wgmma.wait_group`` that retires the last, so
  no instruction touches the asynchronously written registers early.
- ``WgmmaFence``/``WgmmaCommit``/``WgmmaWait`` -> ``nvvm.wgmma.{fence,commit.group,wait.group}``;
  ``ProxyFence`` -> ``nvvm.fence.proxy <async.shared>, space = <cta>``.
"""

from __future__ import annotations

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, llvm, memref, nvvm, vector

from ..errors import CodegenError
from ..frontend.ops_hopper import MatrixDescriptor, ProxyFence, WarpgroupMMA, WgmmaCommit, WgmmaFence, WgmmaWait
from ..frontend.tracing import capture_root
from .lowering import FunctionBuilder, rule, vec_type

_STRUCTS = "wgmma_structs"  # FunctionBuilder.values key: {wgmma node: its !llvm.struct result}
_PENDING = "wgmma_pending"  # FunctionBuilder.values key: wgmma nodes whose result leaves the chain


def _tile_address_symbol(fb: FunctionBuilder, alloc: fx.Node) -> sympy.Symbol:
    """A symbol whose value is the shared address of ``alloc``, defined once before the outermost loop."""
    sym = sympy.Symbol(f"$SMEM_{alloc.name}", integer=True, nonnegative=True)
    if sym not in fb.symbols:
        if fb.hoist_points:
            with fb.hoist_points[0]:
                fb.symbols[sym] = memref.extract_aligned_pointer_as_index(fb.values[alloc])
        else:
            fb.symbols[sym] = memref.extract_aligned_pointer_as_index(fb.values[alloc])
    return sym


@rule(MatrixDescriptor)
def lower_descriptor(fb: FunctionBuilder, node: fx.Node) -> None:
    alloc = capture_root(node.args[0])
    smem = alloc.kwargs["smem_layout"]
    dims = tuple(alloc.kwargs["tile"])
    tile = tuple(alloc.kwargs["tile"].values())
    layout = node.meta["layout"]
    row, k = (sympy.expand(layout.seq(d).start - sympy.sympify(alloc.kwargs["base"][d])) for d in dims)
    try:
        offset = smem.byte_offset(row, k, tile)
    except ValueError as e:
        raise CodegenError(node.meta.get("loc"), message=f"descriptor of %{node.name}: {e}") from None
    stage_bytes = tile[0] * tile[1] * smem.elem_bytes  # a multiple of 1024: every stage is atom-aligned
    address = _tile_address_symbol(fb, alloc) + sympy.sympify(node.meta.get("stage", 0)) * stage_bytes + offset
    desc = fb.index(sympy.floor(address / 16) + smem.descriptor_bits(tile))
    fb.values[node] = arith.index_cast(ir.IntegerType.get_signless(64), desc)


def _to_struct(fb: FunctionBuilder, acc_node: fx.Node, st: ir.Type, count: int) -> ir.Value:
    chained = fb.values.get(_STRUCTS, {}).get(acc_node)
    if chained is not None:  # the previous wgmma of the chain: no round trip through a vector
        return chained
    acc = fb.values[acc_node]
    s = llvm.mlir_undef(st)
    for i in range(count):
        s = llvm.insertvalue(s, vector.extract(acc, [], [i]), [i])
    return s


@rule(WarpgroupMMA)
def lower_wgmma(fb: FunctionBuilder, node: fx.Node) -> None:
    spec = fb.cs.mma_type.spec
    a, b, acc_node = node.args
    layout = node.meta["layout"]
    n = layout.tile[1]
    count = layout.size  # n / 2 f32 per thread
    f32 = ir.F32Type.get()
    st = llvm.StructType.get_literal([f32] * count)
    acc = _to_struct(fb, acc_node, st, count)

    def attr(text: str) -> ir.Attribute:
        return ir.Attribute.parse(text)

    in_t = attr(f"#nvvm.wgmma_type<{spec.in_dtype}>")
    one = attr("#nvvm.wgmma_scale_in<one>")
    r = nvvm.wgmma_mma_async(st, acc, fb.values[a], fb.values[b], attr(f"#nvvm.shape<m = {spec.m}, n = {n}, k = "
                             f"{spec.k}>"), in_t, in_t, attr("#nvvm.wgmma_type<f32>"),
                             attr("#nvvm.wgmma_scale_out<one>"), one, one, attr("#nvvm.mma_layout<row>"),
                             attr("#nvvm.mma_layout<col>"))
    fb.values.setdefault(_STRUCTS, {})[node] = r
    if any(u.meta.get("op") is not WarpgroupMMA for u in node.users):
        if not any(n.meta.get("op") is WgmmaWait for n in _after(node)):
            raise CodegenError(node.meta.get("loc"), message=f"%{node.name}: its result is used but no wgmma_wait "
                               "follows it in its block (insert_wgmma_fences places one)")
        fb.values.setdefault(_PENDING, []).append(node)  # becomes a vector at the wait (see lower_wgmma_wait)


def _after(node: fx.Node):
    n = node.next
    while n.op != "output" and n.op != "root":
        yield n
        n = n.next


@rule(WgmmaFence)
def lower_wgmma_fence(fb: FunctionBuilder, node: fx.Node) -> None:
    nvvm.wgmma_fence_aligned()


@rule(WgmmaCommit)
def lower_wgmma_commit(fb: FunctionBuilder, node: fx.Node) -> None:
    nvvm.wgmma_commit_group_sync_aligned()


@rule(WgmmaWait)
def lower_wgmma_wait(fb: FunctionBuilder, node: fx.Node) -> None:
    """The wait, then the accumulators of the retired wgmmas as vectors: nothing reads a wgmma result
    before its group is waited for (``insert_wgmma_fences`` places the wait before any other user)."""
    if node.kwargs["pending"] != 0:
        raise CodegenError(node.meta.get("loc"), message="wgmma_wait: only pending=0 is lowered")
    nvvm.wgmma_wait_group_sync_aligned(0)
    f32 = ir.F32Type.get()
    for mma in fb.values.pop(_PENDING, []):
        r, count = fb.values[_STRUCTS][mma], mma.meta["layout"].size
        elems = [llvm.extractvalue(f32, r, [i]) for i in range(count)]
        fb.values[mma] = vector.from_elements(vec_type(count, mma.meta["type"].dtype), elems)


@rule(ProxyFence)
def lower_proxy_fence(fb: FunctionBuilder, node: fx.Node) -> None:
    nvvm.fence_proxy(ir.Attribute.parse("#nvvm.proxy_kind<async.shared>"),
                     space=ir.Attribute.parse("#nvvm.shared_space<cta>"))
