"""infer_types: check that every value node of the trace carries a symbolic type.

Requires: a trace from ``trace_kernel`` (shape rules ran at trace time, pointing at the kernel line).
Guarantees: every value node has ``meta["type"]`` whose shape symbols are kernel-argument dims or bound in
``subs``; no reduction or top-k runs along a dimension that a ``WorkgroupConstraint`` provably splits
over several workgroups (each workgroup would write its own partial result to the same place).
"""

from __future__ import annotations

from ..errors import ShapeError
from ..frontend.ops_reduce import Reduce, TopK
from ..frontend.tracing import Trace
from .context import PassContext

_ALONG_A_DIM = (Reduce, TopK)  # ops whose result drops ``kwargs["dim"]``: one value per split row


def infer_types(trace: Trace, ctx: PassContext) -> None:
    known = {d for a in trace.args for d in a.type.dims}
    for g in trace.graphs():
        for n in g.nodes:
            op = n.meta.get("op")
            if n.op == "output" or not getattr(op, "has_result", True):
                continue
            t = n.meta.get("type")
            if t is None:
                raise ShapeError(n.meta.get("loc"), op=n.name, message="value has no type (internal error)")
            for d in t.dims:
                if d not in known and d not in ctx.constraints.subs:
                    raise ShapeError(
                        n.meta.get("loc"), op=n.name, message=f"dimension {d} is not a dimension of any kernel argument"
                    )
            if op in _ALONG_A_DIM:
                _check_not_split(n, ctx)


def _check_not_split(n, ctx: PassContext) -> None:
    """A statically sized dim longer than its workgroup tile is split over workgroups, whose partial results
    never meet (a dynamic size is the caller's to keep within the tile)."""
    cs, dim = ctx.constraints, n.kwargs.get("dim")
    if dim not in cs.wg_axis:
        return
    size, tile = cs.resolve(dim), cs.wg_tile[dim]
    if size.is_Integer and int(size) > tile:
        raise ShapeError(
            n.meta.get("loc"),
            op=n.name,
            message=f"combines along {dim} = {int(size)}, which WorkgroupConstraint({dim}, {tile}) splits over "
            f"{-(-int(size) // tile)} workgroups whose partial results never meet; make the workgroup tile cover "
            f"{dim} (a tile loop, TilingConstraint, can walk a longer row)",
        )
