"""insert_barriers: workgroup barriers from shared-memory hazards, no more than needed.

Requires: ``promote_to_shared`` and ``pipeline_loops``.  Guarantees, per ``iterate`` body that both writes
and reads shared memory: pipelined (an ``async_wait``, or an ``mbarrier_wait`` with TMA): one barrier right
after the wait (RAW on the stage read, WAR with the previous iteration), none when TMA stages are released
through "empty" mbarriers; otherwise a barrier at the top of the body (WAR) and one before each shared
read of a tile written since the last barrier (RAW).
"""

from __future__ import annotations

import torch.fx as fx

from ..frontend.ops import AsyncCopy, AsyncWait, Barrier, Iterate, Read, Write
from ..frontend.ops_hopper import MBarrierWait, TmaFill
from ..frontend.tracing import Trace
from ..frontend.types import AddressSpace
from .context import PassContext
from .schema import op_node


def _is_shared(node: fx.Node) -> bool:
    t = node.meta.get("type")
    return t is not None and t.address_space == AddressSpace.SHARED


def _barrier(g: fx.Graph, before: fx.Node) -> fx.Node:
    return op_node(g, Barrier, (), {}, "barrier", before.meta.get("loc"), before=before)


def _body_barriers(g: fx.Graph) -> None:
    nodes = [n for n in g.nodes if n.op != "placeholder"]
    writes = [
        n
        for n in nodes
        if (n.meta.get("op") is Write and _is_shared(n.args[1])) or n.meta.get("op") in (AsyncCopy, TmaFill)
    ]
    reads = [n for n in nodes if n.meta.get("op") is Read and _is_shared(n.args[0])]
    if not writes or not reads:
        return
    wait = next((n for n in nodes if n.meta.get("op") in (AsyncWait, MBarrierWait)), None)
    if wait is not None and wait.kwargs.get("war") == "mbarrier":
        return  # TMA with empty mbarriers: the full and empty mbarriers order both hazards
    if wait is not None:
        _barrier(g, wait.next)
        return
    _barrier(g, nodes[0])
    dirty: set = set()
    for n in nodes:
        if n in writes:
            dirty.add(n.args[1])
        elif n in reads and n.args[0] in dirty:
            _barrier(g, n)
            dirty.clear()


def insert_barriers(trace: Trace, ctx: PassContext) -> None:
    for node in trace.graph.nodes:
        if node.meta.get("op") is Iterate:
            _body_barriers(trace.subgraphs[node.kwargs["subgraph"]])
