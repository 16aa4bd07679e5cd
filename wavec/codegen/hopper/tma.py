"""Lowering rules of the TMA pipeline ops (``MBarrierInit``, ``MBarrierWait``, ``MBarrierArrive``,
``TmaFill``, ``WarpSpecialize`` of ``frontend/ops_hopper.py``), registered in ``lowering.LOWERINGS``;
imported by the emitter only for kernels with tensor maps.  What each op lowers to: docs/hopper.md,
"Module contracts".  All index math is emitted before an ``scf.if`` (the index cache must not hand a
value defined inside a region to code outside it); only casts sit inside.
"""

from __future__ import annotations

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, llvm, memref, nvvm, scf

from ...frontend.ops_hopper import MBarrierArrive, MBarrierInit, MBarrierWait, TmaFill, WarpSpecialize
from ...frontend.tracing import arg_nodes, capture_root
from ...indexing import THREAD, induction_symbol
from ...passes.schema import Kwargs
from ..lowering import FunctionBuilder, rule
from ..memory_access import held_coord
from .wgmma import _tile_address_symbol, hoisted_symbol

SHARED, CLUSTER, GENERIC = 3, 7, 0  # NVPTX address spaces: shared::cta, shared::cluster, generic
MAP_BYTES = 128
CLUSTER_MASK = 0b11  # ctaMask of a multicast: both workgroups of a 2-workgroup cluster
WAIT_TICKS = 10_000_000  # suspend-time hint of one try_wait (ns); the NVVM lowering loops until the phase completes


def _i32(v: ir.Value) -> ir.Value:
    return arith.index_cast(ir.IntegerType.get_signless(32), v)


def _ptr(v: ir.Value, space: int) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    return llvm.inttoptr(llvm.PointerType.get(space), arith.index_cast(i64, v))


def _const_i32(x: int) -> ir.Value:
    i32 = ir.IntegerType.get_signless(32)
    return arith.constant(i32, ir.IntegerAttr.get(i32, x))


def _const_i16(x: int) -> ir.Value:
    i16 = ir.IntegerType.get_signless(16)
    return arith.constant(i16, ir.IntegerAttr.get(i16, x))


def _maps_symbol(fb: FunctionBuilder) -> sympy.Symbol:
    return hoisted_symbol(fb, "$TENSOR_MAPS", lambda: memref.extract_aligned_pointer_as_index(fb.tensor_maps))


def _mbarriers_symbol(fb: FunctionBuilder, init: fx.Node) -> sympy.Symbol:
    return hoisted_symbol(fb, f"$MBAR_{init.name}", lambda: memref.extract_aligned_pointer_as_index(fb.values[init]))


def _cta_rank(fb: FunctionBuilder) -> sympy.Symbol:
    """This workgroup's rank in its cluster (``%cluster_ctarank``), read once at the top."""
    return hoisted_symbol(
        fb, "$CTARANK", lambda: arith.index_cast(ir.IndexType.get(), nvvm.read_ptx_sreg_cluster_ctarank())
    )


def cluster_barrier() -> None:
    """``barrier.cluster.arrive`` + ``wait`` (release/acquire: mbarrier inits and remote arrivals are seen)."""
    nvvm.cluster_arrive()
    nvvm.cluster_wait()


def _thread0(fb: FunctionBuilder, thread: int = 0) -> ir.Value:
    return arith.cmpi(arith.CmpIPredicate.eq, fb.index(THREAD), fb.index(thread))


def _map_addresses(fb: FunctionBuilder) -> list[ir.Value]:
    """The tensor maps' addresses (emitted here: before the branch that fences them)."""
    return [fb.index(_maps_symbol(fb) + MAP_BYTES * i) for i in range(len(fb.ctx.tensor_maps))]


def _fence_maps(maps: list[ir.Value]) -> None:
    """``fence.proxy.tensormap::generic.acquire.sys`` on every tensor map, in the thread that issues TMA."""
    for m in maps:
        nvvm.fence_proxy_acquire(ir.Attribute.parse("#nvvm.mem_scope<sys>"), _ptr(m, GENERIC), _const_i32(MAP_BYTES))


def _bar_index(node: fx.Node) -> sympy.Expr:
    """The full (or empty) mbarrier of a wait, arrive or fill: its stage group's first plus the stage."""
    return node.kwargs.get("bar_offset", 0) + sympy.sympify(node.kwargs["stage"])


def _empty(fb: FunctionBuilder, init: fx.Node, stage) -> sympy.Expr:
    """Address of the empty mbarrier of ``stage`` (after the ``count`` full ones)."""
    return _mbarriers_symbol(fb, init) + 8 * (init.kwargs["count"] + sympy.sympify(stage))


@rule(MBarrierInit)
def lower_mbarrier_init(fb: FunctionBuilder, node: fx.Node) -> None:
    count, empty = Kwargs(node).count, Kwargs(node).empty_arrivals  # pipeline_tma sets both
    mtype = ir.MemRefType.parse(f"memref<{count * (2 if empty else 1)}xi64, #gpu.address_space<workgroup>>")
    fb.values[node] = memref.alloc(mtype, [], [], alignment=8)
    base = _mbarriers_symbol(fb, node)
    bars = [(fb.index(base + 8 * s), 1) for s in range(count)]
    bars += [(fb.index(_empty(fb, node, s)), empty) for s in range(count)] if empty else []
    maps = _map_addresses(fb) if node.kwargs.get("fence_maps", True) else []
    branch = scf.IfOp(_thread0(fb))
    with ir.InsertionPoint(branch.then_block):
        for b, arrivals in bars:
            nvvm.mbarrier_init(_ptr(b, SHARED), _const_i32(arrivals))
        _fence_maps(maps)
        nvvm.fence_mbarrier_init()
        scf.yield_([])
    if node.kwargs.get("cluster"):  # the peer multicasts into this workgroup's stages: its mbarriers first exist
        cluster_barrier()
    else:
        gpu.barrier()


@rule(MBarrierWait)
def lower_mbarrier_wait(fb: FunctionBuilder, node: fx.Node) -> None:
    base = _mbarriers_symbol(fb, node.meta["mbarriers"])
    bar = fb.index(base + 8 * _bar_index(node))
    parity = fb.index(node.kwargs["parity"])
    if node.kwargs.get("stop") is None:
        nvvm.mbarrier_try_wait_parity(_ptr(bar, SHARED), _i32(parity), _const_i32(WAIT_TICKS))
        return
    # intra_warpgroup_overlap: the wait for a tile the loop may not have (iteration >= stop: never filled)
    filled = arith.cmpi(arith.CmpIPredicate.ult, fb.index(node.kwargs["iteration"]), fb.index(node.kwargs["stop"]))
    branch = scf.IfOp(filled)
    with ir.InsertionPoint(branch.then_block):
        nvvm.mbarrier_try_wait_parity(_ptr(bar, SHARED), _i32(parity), _const_i32(WAIT_TICKS))
        scf.yield_([])


def _boxes(fb: FunctionBuilder, node: fx.Node) -> tuple[list[tuple], int]:
    """(destination, tensor map, [coordinates innermost first], multicast?) index values of every box of
    the fill, and the bytes the stage receives.  Coordinates: the tile's origin along its two dims (plus
    64 elements per further swizzle column), :func:`~wavec.codegen.memory_access.held_coord` along the
    others.  A cluster's shared tile: this workgroup's half of the rows (its cluster rank's), into the
    same place of both workgroups' stage."""
    args, maps, subs = arg_nodes(node), node.meta["maps"], node.meta["iv_subs"]
    mappings = node.meta.get("mappings") or (None,) * len(maps)
    multicast = node.meta.get("multicast") or (False,) * len(maps)
    stage = sympy.sympify(node.kwargs["stage"])
    boxes, total = [], 0
    for (mem, tile), m, mapping, mc in zip(zip(args[0::2], args[1::2]), maps, mappings, multicast):
        kw = Kwargs(alloc := capture_root(tile))
        smem, ((row_dim, rows), (k_dim, cols)) = kw.smem_layout, kw.tile.items()
        base = {d: sympy.sympify(b).subs(subs) for d, b in kw.base.items()}
        shape = capture_root(mem).meta["type"].shape
        held = {d: held_coord(fb, mapping, d) for d in shape if d not in (row_dim, k_dim)}
        stage_bytes = rows * cols * smem.elem_bytes
        start = _tile_address_symbol(fb, alloc) + stage * stage_bytes
        per_box = smem.row_elems  # 64 elements of 2 bytes: the 128-byte swizzle span
        half = _cta_rank(fb) * (rows // 2) if mc else sympy.Integer(0)  # whole 1024-byte swizzle atoms
        for kb in range(cols // per_box):
            origin = {**held, row_dim: base[row_dim] + half, k_dim: base[k_dim] + kb * per_box}
            coords = [fb.index(origin[d]) for d in reversed(shape)]
            dst = fb.index(start + kb * rows * smem.width + half * smem.width)
            boxes.append((dst, fb.index(_maps_symbol(fb) + MAP_BYTES * m), coords, mc))
        total += stage_bytes
    return boxes, total


@rule(MBarrierArrive)
def lower_mbarrier_arrive(fb: FunctionBuilder, node: fx.Node) -> None:
    bar = fb.index(_empty(fb, node.meta["mbarriers"], _bar_index(node)))
    lane0 = arith.cmpi(arith.CmpIPredicate.eq, fb.index(sympy.Mod(THREAD, fb.cs.threads_per_wave)), fb.index(0))
    started = arith.cmpi(
        arith.CmpIPredicate.sge, fb.index(Kwargs(node).iteration - Kwargs(node).first + 1), fb.index(1)
    )  # iteration >= first, without a negative index
    peer = arith.xori(_i32(fb.index(_cta_rank(fb))), _const_i32(1)) if node.kwargs.get("remote") else None
    branch = scf.IfOp(arith.andi(lane0, started))
    with ir.InsertionPoint(branch.then_block):
        nvvm.mbarrier_arrive(_ptr(bar, SHARED))
        if peer is not None:  # the peer's producer refills this stage of both workgroups too
            remote = nvvm.mapa(llvm.PointerType.get(CLUSTER), _ptr(bar, SHARED), peer)
            nvvm.mbarrier_arrive(remote, scope=ir.Attribute.parse("#nvvm.mem_scope<cluster>"))
        scf.yield_([])


def _wait_empty(fb: FunctionBuilder, node: fx.Node) -> tuple[ir.Value, ir.Value, ir.Value] | None:
    """(refill?, empty mbarrier, parity) index values of a fill that may have to wait for a release."""
    if "empty_parity" not in node.kwargs:
        return None
    kw = node.kwargs
    fills, first = fb.index(kw.get("refill_index", kw["iteration"])), fb.index(kw["refill_from"])
    refill = arith.cmpi(arith.CmpIPredicate.uge, fills, first)
    return refill, fb.index(_empty(fb, node.meta["mbarriers"], _bar_index(node))), fb.index(kw["empty_parity"])


@rule(TmaFill)
def lower_tma_fill(fb: FunctionBuilder, node: fx.Node) -> None:
    bar = fb.index(_mbarriers_symbol(fb, node.meta["mbarriers"]) + 8 * _bar_index(node))
    boxes, total = _boxes(fb, node)
    empty = _wait_empty(fb, node)
    if node.kwargs["stop"] is None:  # the producer's loop: its issuing thread, every iteration
        _issue_fill(bar, boxes, total, empty)
        return
    issue = arith.andi(
        _thread0(fb),
        arith.cmpi(arith.CmpIPredicate.ult, fb.index(node.kwargs["iteration"]), fb.index(node.kwargs["stop"])),
    )
    branch = scf.IfOp(issue)
    with ir.InsertionPoint(branch.then_block):
        _issue_fill(bar, boxes, total, empty)
        scf.yield_([])


def _issue_fill(bar: ir.Value, boxes: list, total: int, empty) -> None:
    """(with empty mbarriers, a refill first waits for the stage's release) expect_tx, then the boxes."""
    if empty is not None:  # every warp released the stage's previous fill
        refill, ebar, parity = empty
        inner = scf.IfOp(refill)
        with ir.InsertionPoint(inner.then_block):
            nvvm.mbarrier_try_wait_parity(_ptr(ebar, SHARED), _i32(parity), _const_i32(WAIT_TICKS))
            scf.yield_([])
    mbar = _ptr(bar, SHARED)
    nvvm.mbarrier_arrive_expect_tx(mbar, _const_i32(total))
    for dst, tmap, coords, mc in boxes:
        nvvm.cp_async_bulk_tensor_shared_cluster_global(
            _ptr(dst, CLUSTER), _ptr(tmap, GENERIC), [_i32(c) for c in coords], mbar, [],
            multicast_mask=_const_i16(CLUSTER_MASK) if mc else None,
        )  # fmt: skip


def _set_max_registers(count: int, action: str) -> None:
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 count`` (every thread of the warpgroup, converged)."""
    nvvm.setmaxregister(count, getattr(nvvm.SetMaxRegisterAction, action))


def _producer(fb: FunctionBuilder, node: fx.Node) -> None:
    """The producer warpgroup: its first thread fences the tensor maps and runs the fills of each loop
    (``kwargs["loops"]``: attention's key loops one after the other) in order."""
    consumers = Kwargs(node).consumers
    kw = Kwargs(node)
    loops = kw.loops if "loops" in node.kwargs else ((kw.subgraph, kw.start, kw.stop),)
    maps = _map_addresses(fb)
    bounds = [(fb.trace.subgraphs[name], fb.index(lo), fb.index(hi)) for name, lo, hi in loops]
    elected = scf.IfOp(_thread0(fb, consumers))
    with ir.InsertionPoint(elected.then_block):
        _fence_maps(maps)
        persistent = fb.ctx.persistent
        if persistent:  # the consumers' tile sequence (codegen.hopper.persistent), the K loop per tile
            from .persistent import tile_loop

            ((sub, lo, hi),) = bounds
            with tile_loop(fb, persistent.tiles, persistent.remap):
                _producer_k_loop(fb, node, sub, lo, hi)
        else:
            for sub, lo, hi in bounds:
                _producer_k_loop(fb, node, sub, lo, hi)
        scf.yield_([])


def _producer_k_loop(fb: FunctionBuilder, node: fx.Node, sub: fx.Graph, lo: ir.Value, hi: ir.Value) -> None:
    loop = scf.ForOp(lo, hi, fb.index(1), [])
    with ir.InsertionPoint(loop.body):
        fb.enter_loop(loop.operation, {induction_symbol(Kwargs(node).dim): loop.induction_variable})
        fb.lower_graph(sub)
        fb.exit_loop()
        scf.yield_([])


@rule(WarpSpecialize)
def lower_warp_specialize(fb: FunctionBuilder, node: fx.Node) -> None:
    producer_regs, consumer_regs = Kwargs(node).regs
    is_producer = arith.cmpi(arith.CmpIPredicate.uge, fb.index(THREAD), fb.index(node.kwargs["consumers"]))
    split = scf.IfOp(is_producer, [], has_else=True)
    fb.enter_loop(split.operation, {})  # a scope per branch: shared index math goes before the split
    with ir.InsertionPoint(split.then_block):
        _set_max_registers(producer_regs, "decrease")
        _producer(fb, node)
        scf.yield_([])
    fb.exit_loop()
    fb.enter_loop(split.operation, {})
    with ir.InsertionPoint(split.else_block):
        _set_max_registers(consumer_regs, "increase")
        rest = list(node.graph.nodes)[list(node.graph.nodes).index(node) + 1 :]
        fb.lower_graph(node.graph, rest)
        fb.done.update(rest)
        scf.yield_([])
    fb.exit_loop()
