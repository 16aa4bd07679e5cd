"""share_shared_buffers: loops that run one after the other stage their tiles in the same shared memory.

Requires: ``pipeline_loops`` (final ``stages``; prologue copies in the root graph before their loop).
Guarantees: a root-graph ``allocate`` used by exactly one ``iterate`` is replaced by an equal one (type,
tile, origin, stages, padding, layout) of an earlier loop, at most once per buffer and loop; before the
first use of a reused buffer the root graph gets ``async_wait(pending=0, drain=True)`` and a ``barrier``
(the earlier loop's copies landed and were read).  Attention's two loops (full tiles, masked edge) then
need the shared memory of one.
"""

from __future__ import annotations

from typing import cast

import torch.fx as fx

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


def _drain(g: fx.Graph, before: fx.Node) -> None:
    loc = before.meta.get("loc")
    op_node(g, AsyncWait, (), {"pending": 0, "drain": True}, "async_wait_drain", loc, before=before)
    op_node(g, Barrier, (), {}, "barrier", loc, before=before)


def share_shared_buffers(trace: Trace, ctx: PassContext) -> None:
    g = trace.graph
    loops = [n for n in g.nodes if n.meta.get("op") is Iterate]
    order = {n: i for i, n in enumerate(g.nodes)}
    owners = {}
    for a in (n for n in g.nodes if n.meta.get("op") is Allocate):
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
    order = {n: i for i, n in enumerate(g.nodes)}
    for loop, bufs in reused.items():
        after = max(order[owners[b]] for b in bufs)  # the earlier loops' prologues also use the buffers
        first = next(
            n
            for n in g.nodes
            if order[n] > after and (n is loop or any(x in bufs for x in n.args if isinstance(x, fx.Node)))
        )
        _drain(g, first)
