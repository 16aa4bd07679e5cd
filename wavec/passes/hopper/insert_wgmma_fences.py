"""insert_wgmma_fences: turn warpgroup MMAs into ``wgmma`` ops and place the fences and groups that
order them (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate").

Requires: ``coarsen_loads``, ``pipeline_loops``, ``insert_barriers``.  Guarantees: descriptor reads become
``MatrixDescriptor`` and mmas ``WarpgroupMMA``; a ``ProxyFence`` before each barrier publishing generic
shared writes; a GEMM-like body gets one fence / commit / wait per iteration (copies after the commit,
``pending=1`` with a group in flight, accumulators carried in wgmma form), any other body a fence before
each wgmma whose registers were written since the last and a commit + wait before each non-wgmma reader
(with empty mbarriers, each stage group's wait before its first reader, its release after the wait retiring
its last).
Full contract: docs/hopper.md, "Module contracts".
"""

from __future__ import annotations

import torch.fx as fx

from ...frontend.ops import (
    MMA,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    GetResult,
    Iterate,
    Op,
    Permute,
    Read,
    Write,
)
from ...frontend.ops_hopper import (
    MatrixDescriptor,
    MBarrierArrive,
    MBarrierWait,
    ProxyFence,
    TmaFill,
    WarpgroupMMA,
    WgmmaAccumulator,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from ...frontend.tracing import Trace, arg_node, arg_nodes, placeholders
from ...frontend.types import AddressSpace
from ..context import PassContext
from ..loop_shape import accumulators, chains_only
from ..schema import op_node


def _node(g: fx.Graph, op: type[Op], where: fx.Node, before: bool, **kwargs) -> fx.Node:
    return op_node(g, op, (), kwargs, op.name, where.meta.get("loc"), **{"before" if before else "after": where})


def _retarget(node: fx.Node, op: type) -> None:
    node.target = op
    node.meta["op"] = op


def _publishes_shared(n: fx.Node) -> bool:
    """A generic-proxy shared write becomes visible here (a plain store, or copies retired by a wait)."""
    if n.meta.get("op") is AsyncWait:
        return True
    return n.meta.get("op") is Write and arg_node(n, 1).meta["type"].address_space == AddressSpace.SHARED


def _fence_barriers(g: fx.Graph) -> None:
    dirty = False
    for n in list(g.nodes):
        if n.meta.get("op") is Barrier:
            if dirty:
                _node(g, ProxyFence, n, before=True)
            dirty = False
        else:
            dirty |= _publishes_shared(n)


def _operands(n: fx.Node) -> list[fx.Node]:
    out: list[fx.Node] = []
    fx.node.map_arg((n.args, n.kwargs), out.append)
    return out


def _chain_after(node: fx.Node, nodes: list[fx.Node]) -> fx.Node:
    """Move ``nodes`` right after ``node``, in order; returns the last of them (``node`` when none)."""
    for n in nodes:
        node.append(n)
        node = n
    return node


def _copies(g: fx.Graph) -> list[fx.Node]:
    """The next tiles' copies (or TMA fill): issued while the tensor cores work."""
    return [n for n in g.nodes if n.meta.get("op") in (AsyncCopy, AsyncCommit, TmaFill)]


def _general_body(g: fx.Graph) -> None:
    """Groups, fences and waits for any body: a ``wgmma_fence`` before a wgmma when none was issued since
    the last wait or its accumulator/A registers were written by other instructions since the last fence;
    ``wgmma_commit`` + ``wgmma_wait(0)`` before the first non-wgmma reader of an in-flight result (retiring
    the results that anything but a wgmma reads) and at the end of the body."""
    pos = {n: i for i, n in enumerate(g.nodes)}
    fence_at, issued, uncommitted, first_commit = None, list[fx.Node](), False, None

    def settle(before: fx.Node) -> None:
        nonlocal issued, uncommitted, fence_at, first_commit
        if uncommitted:
            commit = _node(g, WgmmaCommit, before, before=True)
            first_commit = first_commit or commit
        retire = tuple(x for x in issued if any(u.meta.get("op") is not WarpgroupMMA for u in x.users))
        _node(g, WgmmaWait, before, before=True, pending=0, retire=retire)
        issued, uncommitted, fence_at = [], False, None

    for n in list(g.nodes):
        if n.meta.get("op") is WarpgroupMMA:
            regs = [n.args[2]] + ([n.args[0]] if n.meta.get("a_in_registers") else [])
            if fence_at is None or any(x.meta.get("op") is not WarpgroupMMA and pos[x] > fence_at for x in regs):
                _node(g, WgmmaFence, n, before=True)
                fence_at = pos[n]
            issued.append(n)
            uncommitted = True
        elif n.op == "output" or any(x in issued for x in _operands(n)):
            if issued:
                settle(n)
    if first_commit is not None:
        _chain_after(first_commit, _copies(g))
    _place_stage_groups(g)


def _place_stage_groups(g: fx.Graph) -> None:
    """Empty mbarriers in a general body (attention's K and V stage groups): each group's full wait goes
    right before the first wgmma reading its tiles (V's before P·V, behind the softmax), its release right
    after the wait that retires the last such wgmma (K's after S's wait, V's after P·V's)."""
    nodes = list(g.nodes)
    for n in [n for n in nodes if n.meta.get("op") in (MBarrierWait, MBarrierArrive) and "tiles" in n.meta]:
        readers = [m for m in nodes if m.meta.get("op") is WarpgroupMMA and _reads(m, n.meta["tiles"])]
        if not readers:
            continue
        if n.meta["op"] is MBarrierWait:
            first = readers[0]
            before = first.prev if first.prev.meta.get("op") is WgmmaFence else first
            before.prepend(n)
        else:
            pos = nodes.index(readers[-1])
            next(m for m in nodes[pos:] if m.meta.get("op") is WgmmaWait).append(n)
        nodes = list(g.nodes)


def _reads(mma: fx.Node, tiles: tuple) -> bool:
    """Whether a wgmma reads one of ``tiles`` (through a matrix descriptor of it, V's through a permute)."""
    for x in mma.all_input_nodes:
        while x.meta.get("op") is Permute:
            x = arg_node(x, 0)
        if x.meta.get("op") is MatrixDescriptor and arg_node(x, 0) in tiles:
            return True
    return False


def _wgmma_body(g: fx.Graph, in_flight: int) -> list[fx.Node]:
    """Rewrite one body; returns its accumulator iter_args when a group stays in flight (else [])."""
    mmas = [n for n in g.nodes if n.meta.get("op") is MMA]
    for n in g.nodes:
        if n.meta.get("op") is Read and n.meta.get("access") == "descriptor":
            _retarget(n, MatrixDescriptor)
    for n in mmas:
        _retarget(n, WarpgroupMMA)
    _fence_barriers(g)
    if not chains_only(g):  # cp.async, or TMA released by the barrier (pipeline_loops: async_copy="tma")
        _general_body(g)
        return []
    _node(g, WgmmaFence, mmas[0], before=True)
    last = _chain_after(_node(g, WgmmaCommit, mmas[-1], before=False), _copies(g))
    if in_flight:
        _release_after(g, _node(g, WgmmaWait, last, before=False, pending=1, retire=()))
        return accumulators(g, mmas)  # (retargeted: the body's WarpgroupMMAs)
    ends = tuple(n for n in mmas if any(u.meta.get("op") is not WarpgroupMMA for u in n.users))
    _release_after(g, _node(g, WgmmaWait, last, before=False, pending=0, retire=ends))
    return []


def _release_after(g: fx.Graph, wait: fx.Node) -> None:
    """TMA with empty mbarriers: the warps release the stage of the group this wait retired, then the
    next fill (which waits for that release) is issued."""
    arrive = next((n for n in g.nodes if n.meta.get("op") is MBarrierArrive), None)
    if arrive is not None:
        _chain_after(wait, [arrive, *(n for n in g.nodes if n.meta.get("op") is TmaFill)])


def _carry_in_flight(root: fx.Graph, iterate: fx.Node, body: fx.Graph, accs: list[fx.Node]) -> None:
    """The loop carries the accumulators in wgmma register form; a wait(0) after the loop retires them."""
    iter_args = placeholders(body, "iter_arg")
    inits = list(arg_nodes(iterate, 0))
    slots = [iter_args.index(p) for p in accs]
    for j in slots:
        acc = op_node(root, WgmmaAccumulator, (inits[j],), {}, WgmmaAccumulator.name, None, before=iterate)
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
