"""insert_wgmma_fences: turn warpgroup MMAs into ``wgmma`` ops and place the fences and groups that
order them (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate").

Requires: ``coarsen_loads`` (operand reads marked ``access = "descriptor"``), ``pipeline_loops``
(stages) and ``insert_barriers`` (the barriers that publish shared writes).  Applies to graphs with
mmas of a warpgroup MMA type.  Guarantees, per such graph (a loop body):
- every descriptor read becomes a ``MatrixDescriptor`` (keeping its layout and stage) and every mma a
  ``WarpgroupMMA`` on the two descriptors and the accumulator;
- a ``ProxyFence`` (``fence.proxy.async.shared::cta``) right before each barrier that follows, since
  the previous barrier, a generic-proxy shared write (a ``write`` to shared memory, or the completion of
  ``cp.async`` copies at an ``async_wait``): every writing thread fences its own writes, then the
  barrier lets the warpgroups' wgmmas (async proxy) read them;
- one ``WgmmaFence`` right before the first ``WarpgroupMMA`` (the accumulator registers were written by
  other instructions: its initialisation, or the previous iteration's wait), one ``WgmmaCommit`` right
  after the last (all wgmmas of the body form one group);
- the body's ``async_copy`` nodes and their ``async_commit`` move right after the ``WgmmaCommit``: the
  copies for iteration ``i + S - 1`` are issued while the tensor cores run iteration ``i``.  They write
  the stage iteration ``i - 1`` read, whose wgmmas every warpgroup waited for before this iteration's
  barrier, and never the stage iteration ``i`` reads (S >= 2);
- a ``WgmmaWait(pending=0)`` right after that, the last node before the yield: the accumulator is complete
  before anything else reads it, and no stage is still being read when the next barrier lets copies
  overwrite it.
"""

from __future__ import annotations

import torch.fx as fx

from ..frontend.ops import MMA, AsyncCommit, AsyncCopy, AsyncWait, Barrier, Read, Write
from ..frontend.ops_hopper import MatrixDescriptor, ProxyFence, WarpgroupMMA, WgmmaCommit, WgmmaFence, WgmmaWait
from ..frontend.tracing import Trace
from ..frontend.types import AddressSpace
from .context import PassContext


def _node(g: fx.Graph, op: type, where: fx.Node, before: bool, **kwargs) -> fx.Node:
    with (g.inserting_before(where) if before else g.inserting_after(where)):
        n = g.create_node("call_function", op, (), kwargs, name=op.name)
    n.meta.update(op=op, type=None, loc=where.meta.get("loc"))
    return n


def _retarget(node: fx.Node, op: type) -> None:
    node.target = op
    node.meta["op"] = op


def _publishes_shared(n: fx.Node) -> bool:
    """A generic-proxy shared write becomes visible here (a plain store, or copies retired by a wait)."""
    if n.meta.get("op") is AsyncWait:
        return True
    return n.meta.get("op") is Write and n.args[1].meta["type"].address_space == AddressSpace.SHARED


def _fence_barriers(g: fx.Graph) -> None:
    dirty = False
    for n in list(g.nodes):
        if n.meta.get("op") is Barrier:
            if dirty:
                _node(g, ProxyFence, n, before=True)
            dirty = False
        else:
            dirty |= _publishes_shared(n)


def _wgmma_graph(g: fx.Graph) -> None:
    mmas = [n for n in g.nodes if n.meta.get("op") is MMA]
    for n in g.nodes:
        if n.meta.get("op") is Read and n.meta.get("access") == "descriptor":
            _retarget(n, MatrixDescriptor)
    for n in mmas:
        _retarget(n, WarpgroupMMA)
    _fence_barriers(g)
    _node(g, WgmmaFence, mmas[0], before=True)
    last = _node(g, WgmmaCommit, mmas[-1], before=False)
    for n in [n for n in g.nodes if n.meta.get("op") in (AsyncCopy, AsyncCommit)]:
        last.append(n)  # issue the next tiles' copies while the tensor cores work
        last = n
    _node(g, WgmmaWait, last, before=False, pending=0)


def insert_wgmma_fences(trace: Trace, ctx: PassContext) -> None:
    mma_type = ctx.constraints.mma_type
    if mma_type is None or mma_type.spec.group_waves == 1:
        return
    for g in trace.graphs():
        if any(n.meta.get("op") is MMA for n in g.nodes):
            _wgmma_graph(g)
