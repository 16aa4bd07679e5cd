"""share_shared_buffers: loops that run one after the other stage their tiles in the same shared memory.

Requires: ``pipeline_loops`` (final ``stages``; prologue copies in the root graph before their loop).
Guarantees: a root-graph ``allocate`` used by exactly one ``iterate`` is replaced by an equal one (type,
tile, origin, stages, padding, layout) of an earlier loop, at most once per buffer and loop; before the
first use of a reused buffer the root graph gets ``async_wait(pending=0, drain=True)`` (targets with
``cp.async``) and a ``barrier`` (the earlier loops' copies landed and were read).  Attention's loops
(full tiles, masked edges) then need the shared memory of one; warp-specialized loops share one set of
mbarriers, which orders the reuse (no drain).  ``wc.allocate`` buffers are never
shared (they live for the whole kernel).  Finally, in a kernel with ``wc.allocate`` buffers, its shared
tiles (staged ones included) must fit ``target.max_shared_bytes``, else a ``ConstraintError`` lists
them (``tuning.legality`` checks kernels of staged tiles only).
"""

from __future__ import annotations

from typing import cast

import sympy
import torch.fx as fx

from ..errors import ConstraintError
from ..frontend.ops import Allocate, AsyncWait, Barrier, Iterate
from ..frontend.tracing import Trace
from .context import PassContext
from .schema import op_node, tile_extents


def _key(alloc: fx.Node) -> tuple:
    kw, base = alloc.kwargs, cast(dict, alloc.kwargs["base"])  # verify_trace: SharedArgs.base, a dict
    return (
        str(alloc.meta["type"]),
        tuple(tile_extents(alloc).items()),
        tuple((str(d), str(b)) for d, b in base.items()),
        kw["stages"],
        kw["pad"],
        kw.get("smem_layout"),
    )


def _drain(g: fx.Graph, before: fx.Node, async_copies: bool) -> None:
    loc = before.meta.get("loc")
    if async_copies:  # (no cp.async on the target, gfx942: the copies were synchronous)
        op_node(g, AsyncWait, (), {"pending": 0, "drain": True}, "async_wait_drain", loc, before=before)
    op_node(g, Barrier, (), {}, "barrier", loc, before=before)


def share_shared_buffers(trace: Trace, ctx: PassContext) -> None:
    g = trace.graph
    loops = [n for n in g.nodes if n.meta.get("op") is Iterate]
    order = {n: i for i, n in enumerate(g.nodes)}
    owners = {}
    for a in (n for n in g.nodes if n.meta.get("op") is Allocate and not n.kwargs.get("user")):
        users = [it for it in loops if a in it.args[1]]
        if len(users) == 1:
            owners[a] = users[0]
    pool: dict[tuple, list[fx.Node]] = {}
    reused: dict[fx.Node, list[fx.Node]] = {}  # loop -> buffers it takes over
    for a, loop in sorted(owners.items(), key=lambda kv: order[kv[0]]):
        free = [b for b in pool.get(_key(a), []) if order[owners[b]] < order[loop] and b not in reused.get(loop, [])]
        if not free:
            pool.setdefault(_key(a), []).append(a)
            continue
        b = free[0]
        for p in trace.subgraphs[loop.kwargs["subgraph"]].nodes:
            if p.op == "placeholder" and p.meta.get("capture_of") is a:
                p.meta["capture_of"] = b
        a.replace_all_uses_with(b)
        g.erase_node(a)
        reused.setdefault(loop, []).append(b)
    # warp specialization: one producer fills every loop's stages on the empty mbarriers' releases (and
    # no workgroup barrier may follow its split): no drain
    for loop, bufs in () if ctx.constraints.scheduling.warp_specialize else reused.items():
        order = {n: i for i, n in enumerate(g.nodes)}  # with the drains inserted so far
        # after the last earlier loop on these buffers (a third loop follows the second, which took them
        # over from the first); the earlier loops' prologues also use the buffers
        after = max(order[it] for it in loops if order[it] < order[loop] and any(b in it.args[1] for b in bufs))
        first = next(
            n
            for n in g.nodes
            if order[n] > after and (n is loop or any(x in bufs for x in n.args if isinstance(x, fx.Node)))
        )
        _drain(g, first, ctx.target.has_cp_async)
    _check_budget(trace, ctx)


def tile_bytes(alloc: fx.Node) -> int:
    """Bytes of a shared tile: its stages of (padded) tiles, or its own layout's footprint."""
    kw, dtype = alloc.kwargs, alloc.meta["type"].dtype
    tile = list(tile_extents(alloc).values())
    if kw.get("smem_layout") is not None:
        return int(sympy.prod(tile)) * dtype.bytes * cast(int, kw["stages"])
    tile[-1] += cast(int, kw["pad"])
    return int(sympy.prod(tile)) * dtype.bytes * cast(int, kw["stages"])


def _check_budget(trace: Trace, ctx: PassContext) -> None:
    allocs = [n for n in trace.graph.nodes if n.meta.get("op") is Allocate]
    if not any(a.kwargs.get("user") for a in allocs):
        return  # staged tiles only: tuning.legality checks them (with the mbarriers, stage by stage)
    total = sum(tile_bytes(a) for a in allocs)
    if total > ctx.target.max_shared_bytes:
        parts = ", ".join(f"%{a.name} {a.meta['type']} {tile_bytes(a)} B" for a in allocs)
        loc = next((a.meta.get("loc") for a in allocs if a.kwargs.get("user")), None)
        raise ConstraintError(
            loc,
            message=f"shared memory: {total} bytes exceed the {ctx.target.max_shared_bytes} bytes of "
            f"{ctx.target.name} ({parts}); use smaller tiles or distributed_shape",
        )
