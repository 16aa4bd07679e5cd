"""Lowering of ``wc.arrive`` (an ``Atomic`` of kind ``"arrive"``, ``frontend/ops_atomic.py``): the ordered
arrival counter of the "last workgroup combines" pattern.

Requires: the counter element is rank-0 and in bounds per workgroup (``mask_bounds``' guard still
applies), the call is at the top level of the kernel (both barriers are uniform).

Guarantees, in this order:

1. every thread: a release fence at GPU scope (NVIDIA ``fence.acq_rel.gpu``, AMD ``fence release``
   ``syncscope("agent")``): its earlier global stores are ordered before anything it does next at GPU
   scope; then a workgroup barrier, so all of them precede step 2 (the PTX model: the barrier
   synchronises the CTA, and the fences make every thread's stores part of the release);
2. one thread (``replicas.replica_guard`` of the rank-0 value): ONE atomic at GPU scope, acquire-release.
   NVIDIA: ``atom.acq_rel.gpu.global.inc.u32 old, [counter], expected - 1`` (``old >= expected - 1``
   wraps to 0: the last arrival resets the counter in the same instruction).  AMD:
   ``memref.atomic_rmw addi 1`` (LLVM ``atomicrmw`` acq_rel at system scope, which includes the
   agent), then, where ``old == expected - 1``, an ``atomic_rmw assign 0``: every other arrival of the
   round has happened, and the next round is a later launch in stream order;
3. the old value stored to a workgroup word, a barrier, every thread loads it: ``last = old ==
   expected - 1`` is workgroup-uniform (fit for ``wc.exit_if``);
4. every thread: an acquire fence at GPU scope (the same instruction on NVIDIA: acq_rel, which
   invalidates what L1 might hold stale; AMD ``fence acquire syncscope("agent")``: ``buffer_inv``), so
   the loads after it see every store the other workgroups released before their arrivals.
"""

from __future__ import annotations

import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, llvm, memref, scf, vector

from ..abi import ARRIVE_PTX, FENCE_PTX
from ..errors import CodegenError
from ..frontend.tracing import arg_node
from ..passes.schema import Kwargs
from .dynamic_access import atomic_address
from .lowering import FunctionBuilder
from .memory_access import in_bounds, index_vectors, mem_indices, run_coords
from .replicas import replica_guard


def _fence(fb: FunctionBuilder, ordering: str) -> None:
    """A GPU-scope fence of ``ordering`` (``release`` / ``acquire``) in every thread."""
    if fb.ctx.target.is_nvidia:
        llvm.inline_asm(None, [], FENCE_PTX, "~{memory}", has_side_effects=True)
        return
    order = getattr(llvm.AtomicOrdering, ordering)
    llvm.FenceOp(order, syncscope="agent")


def _address(fb: FunctionBuilder, mem: fx.Node, idx: list[ir.Value]) -> ir.Value | None:
    """The counter element's global address for the inline ``atom`` (NVIDIA; None elsewhere), made
    before any branch (its index constants are cached for later ops)."""
    if not fb.ctx.target.is_nvidia:
        return None
    source = fb.values[mem]
    ptr = fb.cached(("ptr", mem), 0, lambda: memref.extract_aligned_pointer_as_index(source))
    return atomic_address(mem, source, (ptr, fb.index(4)), idx, 1)


def _atomic(fb: FunctionBuilder, mem: fx.Node, idx: list[ir.Value], addr: ir.Value | None, wrap: ir.Value) -> ir.Value:
    """The counter's old value, after this arrival (``wrap`` = expected - 1, i32)."""
    i32 = ir.IntegerType.get_signless(32)
    if addr is not None:
        return llvm.inline_asm(i32, [addr, wrap], ARRIVE_PTX, "=r,l,r,~{memory}", has_side_effects=True)
    source = fb.values[mem]
    old = memref.atomic_rmw(arith.AtomicRMWKind.addi, arith.constant(i32, 1), source, idx)
    is_last = arith.cmpi(arith.CmpIPredicate.eq, old, wrap)
    reset = scf.IfOp(is_last)
    with ir.InsertionPoint(reset.then_block):
        memref.atomic_rmw(arith.AtomicRMWKind.assign, arith.constant(i32, 0), source, idx)
        scf.yield_([])
    return old


def lower_arrive(fb: FunctionBuilder, node: fx.Node) -> None:
    """Steps 1-4 of the module docstring for ``node``; its value: the rank-0 "arrived last" flag."""
    mem = arg_node(node, 1)
    layout = node.meta["layout"]
    ((first, _n, off),) = node.meta["accesses"]
    coords = run_coords(layout, first, off, index_vectors(fb, node, layout))
    idx = mem_indices(fb, node, mem, coords)
    i32 = ir.IntegerType.get_signless(32)
    expected = fb.index(fb.cs.resolve_tile_starts(Kwargs(node).expected))
    wrap = arith.index_cast(i32, arith.subi(expected, fb.index(1)))
    word = memref.alloc(ir.MemRefType.parse("memref<1xi32, #gpu.address_space<workgroup>>"), [], [], alignment=4)
    zero = fb.index(0)
    _fence(fb, "release")
    gpu.barrier()
    inside, guard = in_bounds(fb, node, coords), replica_guard(fb, layout)
    if guard is None:  # a rank-0 value is held by every thread: the guard picks the one that arrives
        raise CodegenError(node.meta.get("loc"), message="wc.arrive: no single thread to update the counter")
    addr = _address(fb, mem, idx)

    def old() -> ir.Value:  # -1 (never last) where the counter element is out of bounds
        if inside is None:
            return _atomic(fb, mem, idx, addr, wrap)
        branch = scf.IfOp(inside, [i32], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.yield_([_atomic(fb, mem, idx, addr, wrap)])
        with ir.InsertionPoint(branch.else_block):
            scf.yield_([arith.constant(i32, -1)])
        return branch.results[0]

    branch = scf.IfOp(guard)
    with ir.InsertionPoint(branch.then_block):
        memref.store(old(), word, [zero])
        scf.yield_([])
    gpu.barrier()
    last = arith.cmpi(arith.CmpIPredicate.eq, memref.load(word, [zero]), wrap)
    _fence(fb, "acquire")
    fb.values[node] = vector.from_elements(ir.VectorType.get([layout.size], ir.IntegerType.get_signless(1)), [last])
