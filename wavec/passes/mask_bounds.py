"""mask_bounds: bounds masks for the dimensions a tile may overrun, only where not provably divisible.

Requires: ``coarsen_loads`` and ``pipeline_loops``.  Guarantees: every global access has
``meta["mask_dims"]`` (dims not provably a multiple of their tiling extent: codegen guards each run with
``coord < size``); ``ctx.requirements`` keeps runs from straddling the bound (``ctx.arg_runs``: per
argument, the lcm of its runs, a strided variant's row pitch multiple); loops over a masked dim run
``ceil(size / tile)`` iterations (``ctx.masked_loops``); accesses of ``wc.allocate`` buffers through
index values are masked along the values' dims.  Copies into tiles that only feed a GEMM loop's
MMA operands clamp instead (``meta["clamp_dims"]``).  Full contract: docs/design.md, "Module contracts".
"""

from __future__ import annotations

import sympy

from ..frontend.mapping import access_dims, index_operands, memory_operand
from ..frontend.ops import MMA, AsyncCopy, Cast, GetResult, Iterate, Read, Write
from ..frontend.ops_atomic import Atomic
from ..frontend.tracing import Trace, capture_root
from ..frontend.types import AddressSpace
from .context import PassContext
from .loop_shape import chains_only


def _divisible(ctx: PassContext, dim) -> bool:
    size = ctx.constraints.resolve(dim)
    extent = ctx.constraints.workgroup_extent(dim)
    return bool(size.is_Integer) and (extent is None or int(size) % extent == 0)


def _only_written(iterate) -> bool:
    """Whether the loop's results reach nothing but global writes (through casts)."""

    def ok(n) -> bool:
        return n.meta.get("op") is Write or (n.meta.get("op") is Cast and all(ok(u) for u in n.users))

    return all(r.meta.get("op") is GetResult and all(ok(u) for u in r.users) for r in iterate.users)


def _feeds_mma(read) -> bool:
    """Whether a shared read is an mma fragment that only mmas read (prefetch_fragments' first reads feed
    the loop as inits, its next ones the yield)."""
    return read.meta.get("mma_dims") is not None and all(
        u.op == "output" or u.meta.get("op") in (MMA, Iterate) for u in read.users
    )


def _clampable(trace: Trace) -> dict:
    """Shared tile (its ``allocate``) -> the dims its copies may clamp (see the module docstring)."""
    readers: dict = {}
    for g in trace.graphs():
        for n in g.nodes:
            if n.meta.get("op") is Read and n.args[0].meta["type"].address_space == AddressSpace.SHARED:
                readers.setdefault(capture_root(n.args[0]), []).append(n)
    out = {}
    for it in trace.graph.nodes:
        if it.meta.get("op") is not Iterate:
            continue
        body = trace.subgraphs[it.kwargs["subgraph"]]
        if not chains_only(body) or not _only_written(it):
            continue
        for alloc in it.args[1]:
            rs = readers.get(alloc, [])
            if alloc.meta["type"].address_space != AddressSpace.SHARED or not rs or not all(map(_feeds_mma, rs)):
                continue
            reduced = {r.meta["mma_dims"][1] for r in rs} | {it.kwargs["dim"]}
            out[alloc] = set(alloc.meta["type"].shape) - reduced
    return out


def mask_bounds(trace: Trace, ctx: PassContext) -> None:
    clampable = _clampable(trace)
    for g in trace.graphs():
        for node in g.nodes:
            if node.meta.get("op") not in (Read, Write, AsyncCopy, Atomic):
                continue
            mem = memory_operand(node)
            mtype = mem.meta["type"]
            user = mtype.address_space == AddressSpace.SHARED and capture_root(mem).kwargs.get("user")
            if mtype.address_space == AddressSpace.SHARED and not user:
                continue
            # batch and statically mapped dims: in range by the grid's construction; a gathered dim: by the
            # index values (their own reads are masked), its register dims masked like held ones; a
            # wc.allocate buffer's own dims span its tile, the dims of values indexing it are masked
            dims = tuple(d for d in access_dims(node) if not user or d not in mtype.shape)
            masked = tuple(d for d in dims if not _divisible(ctx, d))
            if node.meta.get("op") is AsyncCopy:
                gathered = {x for i in index_operands(node).values() for x in i.meta["type"].dims}
                clamp = clampable.get(capture_root(node.args[1]), set()) - gathered
                node.meta["clamp_dims"] = tuple(d for d in masked if d in clamp)
                masked = tuple(d for d in masked if d not in clamp)
            node.meta["mask_dims"] = masked
            runs = node.meta.get("accesses") or []
            longest = max((n for _f, n, _o in runs), default=1)
            last = mtype.shape[-1]
            if longest > 1 and not user:
                ctx.requirements[last] = int(sympy.ilcm(ctx.requirements.get(last, 1), longest))
            if mtype.address_space == AddressSpace.GLOBAL:  # a strided binding's row pitch: whole runs
                name = capture_root(mem).name
                ctx.arg_runs[name] = int(sympy.ilcm(ctx.arg_runs.get(name, 1), longest))
    for node in trace.graph.nodes:
        if node.meta.get("op") is Iterate and not _divisible(ctx, node.kwargs["dim"]):
            ctx.masked_loops.add(node.kwargs["dim"])
