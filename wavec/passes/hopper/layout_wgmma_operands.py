"""layout_wgmma_operands: check a warpgroup-MMA (``wgmma``) kernel and choose its operands' shared layouts.

Requires: ``promote_to_shared``; applies only for a warpgroup MMA type.  Guarantees, or a
``ConstraintError`` naming what was expected: target ``sm_90a``; each ``mma`` has the type's dtypes,
legal wave tiles, B (and A unless ``meta["a_in_registers"]``) in shared memory; each such tile gets
``kwargs["smem_layout"]`` (by ``operand_swizzle``, K- or MN-major) and ``pad = 0``; core-matrix tiles
also the staging read's ``meta["copy_layout"]``.  Full contract: docs/hopper.md, "Module contracts".
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx

from ...errors import ConstraintError
from ...frontend.ops import MMA, Iterate, Permute, Read, Write
from ...frontend.tracing import Trace, arg_node, capture_root
from ...frontend.types import AddressSpace
from ...indexing.shared_layout import SWIZZLE_NAMES, SharedLayout, SharedLayoutKind
from ..context import PassContext
from ..schema import loop_body, tile_extents


def _check_tiles(ctx: PassContext, mma: fx.Node) -> int:
    """Check that the tiles fit the warpgroup instruction; return its N."""
    cs, name, loc = ctx.constraints, ctx.mma.name, mma.meta.get("loc")
    spec = ctx.mma.spec
    m, n, k = MMA.dims(mma)
    wm, wn, wk = cs.wave_extent(m), cs.wave_extent(n), cs.workgroup_extent(k)
    if wm is None or wm % spec.m:
        raise ConstraintError(
            loc,
            message=f"{name}: {cs.explain(m)}, not a multiple of the {spec.m} rows one warpgroup instruction covers",
        )
    inst_n = None if wn is None else spec.instruction_n(wn)
    if inst_n is None:
        raise ConstraintError(
            loc, message=f"{name}: {cs.explain(n)}, not a multiple of 8 (legal instruction N: 8, 16, ..., {spec.n})"
        )
    in_dt, acc_dt = arg_node(mma, 0).meta["type"].dtype, arg_node(mma, 2).meta["type"].dtype
    if in_dt.name != spec.in_dtype or acc_dt.name != spec.acc_dtype:
        raise ConstraintError(
            loc,
            message=f"{name} takes {spec.in_dtype} operands and a {spec.acc_dtype} "
            f"accumulator, got {in_dt} and {acc_dt}",
        )
    if wk is None or wk % spec.k:
        raise ConstraintError(
            loc, message=f"{name}: {cs.explain(k, per_wave=False)}, not a multiple of the instruction's K = {spec.k}"
        )
    return inst_n


def _shared_tile(operand: fx.Node) -> fx.Node | None:
    """The ``allocate`` node an mma operand is read from (directly, or through a ``permute`` of the read
    when the tile is stored in the other dimension order), or None when it is not a shared read."""
    operand = _shared_read(operand)
    if operand.meta.get("op") is not Read:
        return None
    mem = arg_node(operand, 0)
    if mem.meta["type"].address_space != AddressSpace.SHARED:
        return None
    return capture_root(mem)


def _shared_read(operand: fx.Node) -> fx.Node:
    """The read behind an mma operand (itself, or the read a ``permute`` reorders)."""
    return arg_node(operand, 0) if operand.meta.get("op") is Permute else operand


def _assign(sub: fx.Graph, mma: fx.Node, ctx: PassContext, inst_n: int) -> None:
    m, n, k = MMA.dims(mma)
    name = ctx.mma.name
    for operand, role, mn in ((arg_node(mma, 0), "A", m), (arg_node(mma, 1), "B", n)):
        alloc = _shared_tile(operand)
        if alloc is None and role == "A":  # a register value (e.g. P in attention): wgmma's register-A form
            mma.meta["a_in_registers"] = True
            continue
        if alloc is None:
            raise ConstraintError(
                mma.meta.get("loc"),
                message=f"{name} reads its B operand from shared memory: "
                "keep SchedulingConstraint(promote_operands=True)",
            )
        dims, tile = tuple(tile_extents(alloc)), tuple(tile_extents(alloc).values())
        mn_major = len(dims) == 2 and dims[-1] == mn and dims[0] == k  # stored [K, M/N]: contiguous along M/N
        if mn_major and alloc.meta["type"].dtype.bytes != 2:  # PTX ISA: transposes are for 16-bit types only
            raise ConstraintError(
                mma.meta.get("loc"),
                message=f"{role} operand of {name}: tf32 and 8-bit wgmma read both operands K-major "
                f"(stored [{mn}, {k}]), not [{k}, {mn}]",
            )
        inst = ctx.mma.spec.m if role == "A" else inst_n
        layout = _choose(ctx, alloc.meta["type"].dtype.bytes, tile, mn_major, inst)
        why = layout.check(tile) if len(tile) == 2 else f"a rank-{len(tile)} tile"
        if why is None and mn_major and layout.swizzled and (inst * layout.elem_bytes) % layout.width:
            why = f"an MN-major instruction tile of {inst} elements is not whole {layout.width}-byte swizzle rows"
        if why:
            raise ConstraintError(
                mma.meta.get("loc"),
                message=f"{role} operand of {name} ({layout.kind.value}{', MN-major' if mn_major else ''}): {why}",
            )
        kwargs: dict[str, Any] = {**alloc.kwargs, "smem_layout": layout, "pad": 0}  # fx's Argument lacks records
        alloc.kwargs = kwargs
        if layout.swizzled:
            continue  # the default row-wise copy (8 threads per 128-byte row) is conflict free on it
        read = _shared_read(operand)
        for w in sub.nodes:
            if w.meta.get("op") is Write and w.args[1] is read.args[0] and w.args[0].meta.get("staging"):
                w.args[0].meta["copy_layout"] = layout


_KINDS = {**SWIZZLE_NAMES, "none": SharedLayoutKind.CORE_K_MAJOR}


def _choose(ctx: PassContext, elem_bytes: int, tile: tuple, mn_major: bool, inst: int) -> SharedLayout:
    """``operand_swizzle``: "auto" takes the widest swizzle (128, 64, 32 bytes) whose rows the tile's
    contiguous rows are whole multiples of (MN-major: and the instruction's M/N extent too, so every
    instruction tile starts on a swizzle row), else core matrices; a named one is taken as asked."""
    want = ctx.constraints.scheduling.operand_swizzle
    if want != "auto":
        return SharedLayout(_KINDS[want], elem_bytes, mn_major)
    for kind in SWIZZLE_NAMES.values():
        layout = SharedLayout(kind, elem_bytes, mn_major)
        if len(tile) == 2 and layout.check(tile) is None and (not mn_major or inst * elem_bytes % layout.width == 0):
            return layout
    return SharedLayout(SharedLayoutKind.CORE_K_MAJOR, elem_bytes, mn_major)


def layout_wgmma_operands(trace: Trace, ctx: PassContext) -> None:
    mma_type = ctx.constraints.mma_type
    if mma_type is None or mma_type.spec.group_waves == 1:
        return
    if not ctx.target.has_wgmma:
        raise ConstraintError(
            trace.loc,
            message=f"{mma_type.name} is a Hopper wgmma instruction: compile with "
            f"target='sm_90a' (got {ctx.target.name!r}; sm_90 without the 'a' has no wgmma)",
        )
    for it in [n for n in trace.graph.nodes if n.meta.get("op") is Iterate]:
        sub = loop_body(trace, it)
        for mma in [n for n in sub.nodes if n.meta.get("op") is MMA]:
            _assign(sub, mma, ctx, _check_tiles(ctx, mma))
    outside = [n for n in trace.graph.nodes if n.meta.get("op") is MMA]
    if outside:
        raise ConstraintError(
            outside[0].meta.get("loc"),
            message=f"{mma_type.name} operands are staged through "
            "shared memory inside wc.iterate; an mma outside a loop is not supported",
        )
