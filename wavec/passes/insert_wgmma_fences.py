"""insert_wgmma_fences: turn warpgroup MMAs into ``wgmma`` ops and place the fences and groups that
order them (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate").

Requires: ``coarsen_loads`` (operand reads marked ``access = "descriptor"``), ``pipeline_loops``
(stages, ``iterate.meta["wgmma_groups_in_flight"]``) and ``insert_barriers`` (the barriers that publish
shared writes).  Applies to loop bodies with mmas of a warpgroup MMA type.  Guarantees, per body:
- every descriptor read becomes a ``MatrixDescriptor`` (keeping its layout and stage) and every mma a
  ``WarpgroupMMA`` on the two descriptors and the accumulator;
- a ``ProxyFence`` (``fence.proxy.async.shared::cta``) right before each barrier that follows, since
  the previous barrier, a generic-proxy shared write (a ``write`` to shared memory, or the completion of
  ``cp.async`` copies at an ``async_wait``): every writing thread fences its own writes, then the
  barrier lets the warpgroups' wgmmas (async proxy) read them;
- one ``WgmmaFence`` right before the first ``WarpgroupMMA`` (the accumulator registers were written by
  other instructions: its initialisation, or a wait), one ``WgmmaCommit`` right after the last (all
  wgmmas of the body form one group);
- the body's ``async_copy`` nodes and their ``async_commit`` (or its ``tma_fill``) move right after the
  ``WgmmaCommit``: the copies are issued while the tensor cores run this iteration's group.  They write stage
  ``(i + D) % S``, which no group still in flight reads (``pipeline_loops`` chose the prefetch distance
  D = S - 1, or S - 2 with one group in flight);
- then a ``WgmmaWait`` (below); with TMA stages released through empty mbarriers, the ``mbarrier_arrive``
  and then the ``tma_fill`` follow it (the fill may wait for the release of the group this wait retired):
  - one group in flight (``wgmma_groups_in_flight = 1``, S >= 3, and nothing but wgmmas and the yield
    use the accumulators): ``pending=1``.  Group ``i - 1`` is complete in this warpgroup, so after the
    next barrier no warpgroup reads stage ``(i - 1) % S`` any more, which is the stage the next
    iteration's copies (distance S - 2) overwrite.  The loop carries the accumulators in wgmma form
    (``WgmmaAccumulator`` of each init before the loop) and a ``WgmmaWait(pending=0, retire=results)``
    right after the loop's last ``get_result`` makes them ordinary values;
  - otherwise ``pending=0`` with ``retire`` = the wgmmas whose results leave the chain: the accumulator
    is complete before anything else reads it, and no stage is read any more when the next barrier
    lets the copies overwrite it.
"""

from __future__ import annotations

import torch.fx as fx

from ..frontend.ops import MMA, AsyncCommit, AsyncCopy, AsyncWait, Barrier, GetResult, Iterate, Read, Write
from ..frontend.ops_hopper import (
    MatrixDescriptor,
    MBarrierArrive,
    ProxyFence,
    TmaFill,
    WarpgroupMMA,
    WgmmaAccumulator,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
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


def _wgmma_body(g: fx.Graph, in_flight: int) -> list[fx.Node]:
    """Rewrite one body; returns its accumulator iter_args when a group stays in flight (else [])."""
    mmas = [n for n in g.nodes if n.meta.get("op") is MMA]
    for n in g.nodes:
        if n.meta.get("op") is Read and n.meta.get("access") == "descriptor":
            _retarget(n, MatrixDescriptor)
    for n in mmas:
        _retarget(n, WarpgroupMMA)
    _fence_barriers(g)
    _node(g, WgmmaFence, mmas[0], before=True)
    last = _node(g, WgmmaCommit, mmas[-1], before=False)
    for n in [n for n in g.nodes if n.meta.get("op") in (AsyncCopy, AsyncCommit, TmaFill)]:
        last.append(n)  # issue the next tiles' copies while the tensor cores work
        last = n
    accs = [p for p in g.nodes if p.op == "placeholder" and p.meta.get("role") == "iter_arg"
            and any(u.meta.get("op") is WarpgroupMMA and u.args[2] is p for u in p.users)]
    # a group may stay in flight only if nothing but the next wgmma (and the yield) reads its accumulator
    pure = all(u.meta.get("op") in (WarpgroupMMA, None) for n in accs + mmas for u in n.users)
    if in_flight and pure:
        _release_after(g, _node(g, WgmmaWait, last, before=False, pending=1, retire=()))
        return accs
    ends = tuple(n for n in mmas if any(u.meta.get("op") is not WarpgroupMMA for u in n.users))
    _release_after(g, _node(g, WgmmaWait, last, before=False, pending=0, retire=ends))
    return []


def _release_after(g: fx.Graph, wait: fx.Node) -> None:
    """TMA with empty mbarriers: the warps release the stage of the group this wait retired, then the
    next fill (which waits for that release) is issued."""
    arrive = next((n for n in g.nodes if n.meta.get("op") is MBarrierArrive), None)
    if arrive is None:
        return
    wait.append(arrive)
    for n in [n for n in g.nodes if n.meta.get("op") is TmaFill]:
        arrive.append(n)
        arrive = n


def _carry_in_flight(root: fx.Graph, iterate: fx.Node, body: fx.Graph, accs: list[fx.Node]) -> None:
    """The loop carries the accumulators in wgmma register form; a wait(0) after the loop retires them."""
    iter_args = [p for p in body.nodes if p.op == "placeholder" and p.meta.get("role") == "iter_arg"]
    inits = list(iterate.args[0])
    slots = [iter_args.index(p) for p in accs]
    for j in slots:
        with root.inserting_before(iterate):
            acc = root.create_node("call_function", WgmmaAccumulator, (inits[j],), {}, name=WgmmaAccumulator.name)
        acc.meta.update(inits[j].meta, op=WgmmaAccumulator)
        inits[j] = acc
    iterate.args = (tuple(inits),) + tuple(iterate.args[1:])
    results = [u for u in iterate.users if u.meta.get("op") is GetResult and u.kwargs["index"] in slots]
    after = max(results, key=lambda r: list(root.nodes).index(r)) if results else iterate
    _node(root, WgmmaWait, after, before=False, pending=0, retire=tuple(results))


def insert_wgmma_fences(trace: Trace, ctx: PassContext) -> None:
    mma_type = ctx.constraints.mma_type
    if mma_type is None or mma_type.spec.group_waves == 1:
        return
    for it in [n for n in trace.graph.nodes if n.meta.get("op") is Iterate]:
        body = trace.subgraphs[it.kwargs["subgraph"]]
        if any(n.meta.get("op") is MMA for n in body.nodes):
            accs = _wgmma_body(body, it.meta.get("wgmma_groups_in_flight", 0))
            if accs:
                _carry_in_flight(trace.graph, it, body, accs)
