"""infer_types: check that every value node of the trace carries a symbolic type.

Requires: a trace from ``trace_kernel`` (shape rules ran at trace time, pointing at the kernel line).
Guarantees: every value node has ``meta["type"]`` whose shape symbols are kernel-argument dims or bound in
``subs``.
"""

from __future__ import annotations

from ..errors import ShapeError
from ..frontend.tracing import Trace
from .context import PassContext


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
