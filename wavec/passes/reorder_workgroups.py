"""reorder_workgroups: launch workgroups in groups along axis 0 for L2 reuse ("grouped" order).

Requires: workgroup axes 0 and 1.  Applies when ``group_size = G > 1``.  Guarantees: a grid of ``n0 *
n1`` workgroups along x (``ctx.grid_override``; axis 2, when present, keeps its extent along z) whose
linear id ``$PID`` ``ctx.workgroup_remap`` maps to the axis 0 and 1 ids so that consecutive workgroups
walk G rows of tiles column by column, every tile once.
``reverse_axis0``: ``WORKGROUP[0] = n0 - 1 - block id x`` (heaviest causal tiles first).
"""

from __future__ import annotations

import sympy

from ..errors import ConstraintError
from ..frontend.tracing import Trace
from ..indexing.symbols import PID, WORKGROUP
from .context import PassContext
from .hopper.cluster_launch import cluster_tiles


def reorder_workgroups(trace: Trace, ctx: PassContext) -> None:
    cs = ctx.constraints
    g = cs.group_size
    by_axis = {axis: d for d, axis in cs.wg_axis.items()}
    if cs.scheduling.reverse_axis0:
        if g > 1 or 0 not in by_axis:
            raise ConstraintError(
                trace.loc,
                message="SchedulingConstraint(reverse_axis0=True) needs a workgroup axis 0 and group_size = 1",
            )
        n0 = sympy.ceiling(cs.resolve(by_axis[0]) / cs.wg_tile[by_axis[0]])
        ctx.workgroup_remap = {WORKGROUP[0]: n0 - 1 - PID}  # PID = the hardware block id along x
        return
    if g <= 1 or 0 not in by_axis or 1 not in by_axis:
        return
    d0, d1 = by_axis[0], by_axis[1]
    n0, n1 = cluster_tiles(cs, d0), cluster_tiles(cs, d1)  # a 2-workgroup cluster: whole clusters along x
    width = g * n1
    first = sympy.floor(PID / width) * g
    size = sympy.Min(n0 - first, g)
    ctx.workgroup_remap = {
        WORKGROUP[0]: first + sympy.Mod(PID, size),
        WORKGROUP[1]: sympy.floor(sympy.Mod(PID, width) / size),
    }
    # axis 2 (a batch or split-K axis) keeps its own extent: the remap only linearises axes 0 and 1
    ctx.grid_override = (n0 * n1, sympy.Integer(1), cs.grid({})[2])
