"""cluster_launch: launch a TMA wgmma GEMM as 2-workgroup thread-block clusters with operand multicast.

Applies when ``SchedulingConstraint(cluster=(2, 1) | (1, 2))``.  The two workgroups of a cluster are
neighbours along the cluster axis, so the operand whose tile rows run along the *other* workgroup axis
(B along axis 0, A along axis 1) is the same tile in both: each loads half of its rows and multicasts
them into both (``pipeline_tma`` halves that operand's box, ``codegen.hopper.tma`` issues the
``.multicast::cluster`` copies, a ctaMask of both).  Each full mbarrier still expects the whole stage's
bytes (its own half and the peer's arrive on it); a stage is refilled only once the consumers of *both*
workgroups released it (each consumer warp arrives on its own and the peer's empty mbarrier, which count
twice the warps).

Requires (else a ``ConstraintError``): sm_90a, exactly one root-graph TMA loop released by empty
mbarriers, no persistent grid, no ``reverse_axis0``; a (1, 2) cluster with ``group_size`` 1 (the grouped
order linearises the grid along x), a (2, 1) one with ``group_size`` 1 or even (workgroups 2i and 2i + 1
of the grouped order then share a column of tiles).  Guarantees: ``ctx.cluster`` = the launch's cluster dimensions;
the grid's cluster axis is a multiple of 2 (a padding workgroup past the last tile loads its half of
the shared tile and masks every store); ``reorder_workgroups`` pads its tile count the same way
(:func:`cluster_tiles`), so the two workgroups of a cluster share the multicast operand's tile.
"""

from __future__ import annotations

import sympy

from ...errors import ConstraintError
from ...frontend.constraints import ConstraintSet
from ...frontend.ops_hopper import MBarrierInit
from ...frontend.tracing import Trace
from ..context import PassContext

CLUSTER_SIZE = 2


def cluster_axis(cs: ConstraintSet) -> int | None:
    """The workgroup axis of the clusters (0 or 1), None when clusters are off."""
    cluster = cs.scheduling.cluster
    return None if cluster == (1, 1) else cluster.index(CLUSTER_SIZE)


def cluster_tiles(cs: ConstraintSet, dim: sympy.Symbol) -> sympy.Expr:
    """Workgroups along ``dim``'s axis: ceil(size / tile), rounded up to a whole cluster on its axis."""
    n = sympy.ceiling(cs.resolve(dim) / cs.wg_tile[dim])
    axis = cluster_axis(cs)
    return n if axis is None or cs.wg_axis.get(dim) != axis else sympy.ceiling(n / CLUSTER_SIZE) * CLUSTER_SIZE


def multicasts(cs: ConstraintSet, row_dim: sympy.Symbol) -> bool:
    """Whether a staged tile with rows along ``row_dim`` is the cluster's shared tile: its rows follow the
    workgroup axis that is not the cluster's, so both workgroups of a cluster load the same rows."""
    axis = cluster_axis(cs)
    return axis is not None and cs.wg_axis.get(row_dim) not in (None, axis)


def _refuse(trace: Trace, cs: ConstraintSet, why: str) -> ConstraintError:
    return ConstraintError(trace.loc, message=f"SchedulingConstraint(cluster={cs.scheduling.cluster}): {why}")


def check_cluster(trace: Trace, ctx: PassContext) -> None:
    """The ``ConstraintError`` of a cluster request the kernel or target cannot take (before any rewrite)."""
    cs = ctx.constraints
    if cluster_axis(cs) is None:
        return
    if not ctx.target.has_tma or cs.group_waves == 1:
        raise _refuse(
            trace, cs, f"clusters multicast TMA fills of wgmma kernels on sm_90a (target {ctx.target.name!r})"
        )
    if cs.scheduling.persistent or cs.scheduling.reverse_axis0:
        raise _refuse(trace, cs, "not combined with persistent=True or reverse_axis0=True")
    if cs.scheduling.async_copy in ("cp.async", "tma-barrier"):
        raise _refuse(
            trace, cs, f"needs TMA stages released by empty mbarriers, not async_copy={cs.scheduling.async_copy!r}"
        )
    axis = cluster_axis(cs)
    if axis not in cs.wg_axis.values():
        raise _refuse(trace, cs, f"the kernel has no workgroup axis {axis}")
    if axis == 1 and cs.group_size > 1:
        raise _refuse(trace, cs, "a cluster along axis 1 needs group_size = 1 (the grouped order runs along x)")
    if axis == 0 and cs.group_size % CLUSTER_SIZE and cs.group_size > 1:  # a pair would straddle two columns
        raise _refuse(trace, cs, f"the grouped order needs an even group_size, not {cs.group_size}")


def cluster_launch(trace: Trace, ctx: PassContext) -> None:
    cs = ctx.constraints
    axis = cluster_axis(cs)
    if axis is None:
        return
    check_cluster(trace, ctx)
    inits = [n for n in trace.graph.nodes if n.meta.get("op") is MBarrierInit]
    if len(inits) != 1 or not inits[0].kwargs.get("empty_arrivals") or not inits[0].kwargs.get("cluster"):
        raise _refuse(
            trace,
            cs,
            "needs exactly one K loop pipelined with TMA and empty mbarriers (a Hopper wgmma GEMM on sm_90a "
            f"with 128-byte-swizzled operand tiles, num_stages >= 2); found {len(inits)} TMA pipeline(s)",
        )
    by_axis = {a: d for d, a in cs.wg_axis.items() if a is not None}
    tiles = sympy.ceiling(cs.resolve(by_axis[axis]) / cs.wg_tile[by_axis[axis]])
    if tiles.is_Integer and int(tiles) % CLUSTER_SIZE:  # a padding workgroup, and stores proved in bounds
        raise _refuse(trace, cs, f"{by_axis[axis]}'s {tiles} workgroup tiles do not fill whole clusters")
    if ctx.grid_override is None:  # the grouped order (reorder_workgroups) already padded its x extent
        grid = list(cs.grid({}))
        grid[axis] = cluster_tiles(cs, by_axis[axis])
        ctx.grid_override = (grid[0], grid[1], grid[2])
    ctx.cluster = (CLUSTER_SIZE, 1, 1) if axis == 0 else (1, CLUSTER_SIZE, 1)
