"""infer_types: check that every value node of the trace carries a symbolic type.

Requires: a trace from ``trace_kernel`` (shape rules ran at trace time, pointing at the kernel line).
Guarantees: every value node has ``meta["type"]`` whose shape symbols are kernel-argument dims or bound in
``subs``; no reduction or top-k runs along a dimension that a ``WorkgroupConstraint`` provably splits
over several workgroups (each workgroup would write its own partial result to the same place); every
``wc.tile_start(d)`` an op uses names a dim a ``WorkgroupConstraint`` tiles.
"""

from __future__ import annotations

import sympy

from ..errors import ConstraintError, ShapeError
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
    for g in trace.graphs():
        for n in g.nodes:
            _check_tile_starts(n, (n.args, dict(n.kwargs)), ctx)


_TILE_START = "$TILE_START_"


def _check_tile_starts(n, arg, ctx: PassContext) -> None:
    """``wc.tile_start(d)`` in an op's operands (index mappings, loop bounds, index arithmetic) needs a
    workgroup tile of ``d``; otherwise codegen would find the symbol without a value."""
    if isinstance(arg, (tuple, list)):
        for a in arg:
            _check_tile_starts(n, a, ctx)
    elif isinstance(arg, dict):
        for a in arg.values():
            _check_tile_starts(n, a, ctx)
    elif isinstance(arg, sympy.Basic):
        for s in arg.free_symbols:
            dim = s.name[len(_TILE_START) :] if s.name.startswith(_TILE_START) else None
            if dim is not None and dim not in {d.name for d in ctx.constraints.wg_tile}:
                raise ConstraintError(
                    n.meta.get("loc"),
                    message=f"wc.tile_start({dim}): no WorkgroupConstraint gives {dim} a workgroup tile to start",
                )


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
            message=f"combines along {dim} = {int(size)}, which {cs.explain(dim, per_wave=False)} splits over "
            f"{-(-int(size) // tile)} workgroups whose partial results never meet; make the workgroup tile cover "
            f"{dim} (a tile loop, TilingConstraint, can walk a longer row)",
        )
