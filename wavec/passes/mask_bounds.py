"""mask_bounds: bounds masks for the dimensions a tile may overrun, only where not provably divisible.

Requires: ``coarsen_loads`` (each global access is a list of runs) and ``pipeline_loops``.
Guarantees: every access of global memory has ``meta["mask_dims"]``: the memory dimensions whose size is
not provably a multiple of the extent the kernel tiles it by (a dynamic size, or a static one the tile
does not divide).  Codegen guards each run of such an access with ``coord < size`` for each masked dim:
masked loads read zeros, masked stores are skipped, masked ``cp.async`` copies zero-fill.  A run never
straddles the bound because ``ctx.requirements`` makes every contiguous (last) dimension a multiple of the
run length: rows stay 16-byte aligned, which the vector accesses need anyway.  Loops over a masked
dimension run ``ceil(size / tile)`` iterations (``ctx.masked_loops``).
"""

from __future__ import annotations

import sympy

from ..frontend.ops import AsyncCopy, Iterate, Read, Write, memory_operand
from ..frontend.tracing import Trace
from ..frontend.types import AddressSpace
from .context import PassContext


def _divisible(ctx: PassContext, dim) -> bool:
    size = ctx.constraints.resolve(dim)
    extent = ctx.constraints.workgroup_extent(dim)
    return bool(size.is_Integer) and (extent is None or int(size) % extent == 0)


def mask_bounds(trace: Trace, ctx: PassContext) -> None:
    for g in trace.graphs():
        for node in g.nodes:
            if node.meta.get("op") not in (Read, Write, AsyncCopy):
                continue
            mem = memory_operand(node)
            mtype = mem.meta["type"]
            if mtype.address_space == AddressSpace.SHARED:
                continue
            held = node.meta["layout"].dims  # batch and mapped dims: in range by the grid's construction
            node.meta["mask_dims"] = tuple(d for d in mtype.shape if d in held and not _divisible(ctx, d))
            runs = node.meta.get("accesses") or []
            longest = max((n for _f, n, _o in runs), default=1)
            last = mtype.shape[-1]
            if longest > 1:
                ctx.requirements[last] = int(sympy.ilcm(ctx.requirements.get(last, 1), longest))
    for node in trace.graph.nodes:
        if node.meta.get("op") is Iterate and not _divisible(ctx, node.kwargs["dim"]):
            ctx.masked_loops.add(node.kwargs["dim"])
