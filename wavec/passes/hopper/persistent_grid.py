"""persistent_grid: a persistent launch grid whose workgroups loop over the output tiles.

Applies when ``SchedulingConstraint(persistent=True)``.  Requires (else a ``ConstraintError``): one
root-graph ``iterate`` pipelined with TMA and no ``start``/``end``, workgroup axes 0 and 1 only,
``reorder_workgroups`` and ``insert_wgmma_fences`` run.  Guarantees: ``ctx.grid_override = (min(tiles,
WAVEC_SMS * per_sm), 1, 1)``; a ``PersistentTiles`` node after the ``MBarrierInit`` (and the split) runs
every later root node per tile in ``reorder_workgroups``' order; each tile's last stage is released.
Full contract: docs/hopper.md, "Module contracts".
"""

from __future__ import annotations

import sympy
import torch.fx as fx

from ...errors import ConstraintError
from ...frontend.ops import Allocate, Iterate
from ...frontend.ops_hopper import MBarrierArrive, MBarrierInit, PersistentTiles, TmaFill, WarpSpecialize, WgmmaWait
from ...frontend.tracing import Trace
from ...indexing.symbols import PID, TILE, WORKGROUP
from ..context import PassContext, PersistentGrid
from ..schema import op_node
from .pipeline_tma import k_base

SMS_SYMBOL = sympy.Symbol("WAVEC_SMS", integer=True, positive=True)  # the launcher's SM count
SHARED_PER_SM = 233472  # bytes of shared memory per SM on sm_90 (228 KiB)
SHARED_RESERVED = 1024  # per workgroup, reserved by the driver
THREADS_PER_SM = 2048
MBARRIER_SLOT = 1024


def workgroups_per_sm(shared_bytes: int, threads: int) -> int:
    """Workgroups one SM holds by shared memory and threads (registers are not known before ptxas: the
    wgmma GEMM tiles of 3-4 stages hold one or two workgroups per SM by shared memory alone)."""
    return max(1, min(SHARED_PER_SM // (shared_bytes + SHARED_RESERVED), THREADS_PER_SM // threads))


def _refuse(trace: Trace, why: str) -> ConstraintError:
    return ConstraintError(trace.loc, message=f"SchedulingConstraint(persistent=True): {why}")


def _the_loop(trace: Trace, ctx: PassContext) -> tuple[fx.Node, fx.Node]:
    """(the TMA-pipelined iterate, its MBarrierInit), or a ConstraintError saying why there is none."""
    cs = ctx.constraints
    if cs.scheduling.reverse_axis0:
        raise _refuse(trace, "not combined with reverse_axis0=True")
    loops = [n for n in trace.graph.nodes if n.meta.get("op") is Iterate]
    inits = [n for n in trace.graph.nodes if n.meta.get("op") is MBarrierInit]
    if len(loops) != 1 or len(inits) != 1:
        raise _refuse(
            trace,
            f"needs exactly one K loop pipelined with TMA (a Hopper wgmma GEMM on sm_90a with "
            f"128-byte-swizzled operand tiles, num_stages >= 2, async_copy not 'cp.async'); found "
            f"{len(loops)} loop(s), {len(inits)} TMA pipeline(s) (target {ctx.target.name!r}, "
            f"num_stages {cs.num_stages}, async_copy {cs.scheduling.async_copy!r})",
        )
    if loops[0].kwargs.get("start") is not None or loops[0].kwargs.get("end") is not None:
        raise _refuse(trace, "the K loop has start=/end= bounds (split-K): every tile must run the same K loop")
    axes = {axis for axis in cs.wg_axis.values() if axis is not None}
    if axes != {0, 1}:
        raise _refuse(trace, f"needs workgroup axes 0 and 1 only (the output tile grid), got {sorted(axes)}")
    return loops[0], inits[0]


def _tiles(ctx: PassContext) -> tuple[sympy.Expr, dict]:
    """(number of output tiles, WORKGROUP[i] as expressions of $TILE)."""
    cs = ctx.constraints
    by_axis = {axis: d for d, axis in cs.wg_axis.items()}
    n0, n1 = (sympy.ceiling(cs.resolve(by_axis[a]) / cs.wg_tile[by_axis[a]]) for a in (0, 1))
    if ctx.workgroup_remap:  # the grouped order of reorder_workgroups, on tile ids instead of block ids
        remap = {wg: sympy.sympify(e).subs(PID, TILE) for wg, e in ctx.workgroup_remap.items()}
    else:
        remap = {WORKGROUP[0]: sympy.floor(TILE / n1), WORKGROUP[1]: sympy.Mod(TILE, n1)}
    return n0 * n1, remap


def _shared_bytes(trace: Trace) -> int:
    total = MBARRIER_SLOT
    for n in trace.graph.nodes:
        if n.meta.get("op") is Allocate:
            elems = int(sympy.prod(n.kwargs["tile"].values()))
            total += elems * n.meta["type"].dtype.bytes * int(n.kwargs.get("stages", 1))
    return total


def _release_last(trace: Trace, ctx: PassContext, iterate: fx.Node, init: fx.Node) -> None:
    """After the final wgmma wait: release the stage of the tile's last iteration (empty mbarriers)."""
    cs = ctx.constraints
    stages = init.kwargs["count"]
    lo, stop = cs.loop_bounds(iterate.kwargs["dim"])
    nodes = list(trace.graph.nodes)
    wait = next((n for n in nodes[nodes.index(iterate) + 1 :] if n.meta.get("op") is WgmmaWait), None)
    if wait is None:
        raise _refuse(trace, "no wgmma wait retires the K loop's last group")
    last = k_base(ctx, lo, stop) + stop - lo - 1
    kwargs = {"stage": sympy.Mod(last, stages), "iteration": sympy.Integer(0), "first": sympy.Integer(0)}
    loc = wait.meta.get("loc")
    op_node(trace.graph, MBarrierArrive, (), kwargs, "mbarrier_arrive_tile_end", loc, after=wait, mbarriers=init)


def persistent_grid(trace: Trace, ctx: PassContext) -> None:
    cs = ctx.constraints
    if not cs.scheduling.persistent:
        return
    iterate, init = _the_loop(trace, ctx)
    empty = bool(init.kwargs.get("empty_arrivals"))  # a count: 0 when the loop has no empty mbarriers
    if empty and iterate.meta.get("wgmma_groups_in_flight", 0):
        _release_last(trace, ctx, iterate, init)
    tiles, remap = _tiles(ctx)
    nodes = list(trace.graph.nodes)
    after = max(nodes.index(n) for n in nodes if n.meta.get("op") in (Allocate, MBarrierInit, WarpSpecialize))
    first_fill = min(nodes.index(n) for n in nodes if n.meta.get("op") in (TmaFill, Iterate))
    if after > first_fill:
        raise _refuse(trace, "a shared allocation follows the first TMA fill")
    kwargs = {"tiles": tiles, "remap": remap, "barrier": not empty}
    op_node(trace.graph, PersistentTiles, (), kwargs, "persistent_tiles", iterate.meta.get("loc"), after=nodes[after])
    per_sm = workgroups_per_sm(_shared_bytes(trace), cs.threads + ctx.producer_threads)
    ctx.grid_override = (sympy.Min(tiles, SMS_SYMBOL * per_sm), sympy.Integer(1), sympy.Integer(1))
    ctx.persistent = PersistentGrid(tiles, remap, per_sm)
