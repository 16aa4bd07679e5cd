"""intra_warpgroup_overlap: rotate an attention-shaped wgmma loop so that the next tile's scores are on the
tensor cores while this tile's softmax runs (FlashAttention-3 §3.2, "intra-warpgroup pipelining").

Applies with ``SchedulingConstraint(intra_wg_overlap=True)`` to every loop whose body, after
``insert_wgmma_fences``, is: the stage's ``mbarrier_wait`` and barrier, a wgmma chain ``S = Q Kᵀ`` from a
zero accumulator whose operands are loop-invariant registers and shared tiles of the stage, its commit,
the TMA fill, ``wgmma_wait(0)`` retiring S, then ordinary instructions reading S and a second wgmma chain
(``O += P V``) retired at the end of the body.

Requires: ``insert_wgmma_fences`` (general body placement); TMA staging released by the workgroup barrier
(``war="barrier"``, no empty mbarriers, no warp specialization); at least 3 stages.  Guarantees, per such
loop over ``[lo, stop)`` (tile ``i`` in stage ``$STAGE``):

- before the loop: the wait for tile ``lo`` (skipped when the loop runs no iteration), a barrier, the S
  chain of tile ``lo`` (stage ``stage_start``), its commit and ``wgmma_wait(0)``; its result is the init of a
  new iter_arg;
- iteration ``i``: the wait for tile ``i + 1`` in stage ``($STAGE + 1) % S`` (skipped when ``i + 1 >=
  stop``), the barrier, the S chain of tile ``i + 1``, its commit, the fill of tile ``i + 2`` (``S - 1``
  ahead, as before), then the body's other nodes reading tile ``i``'s scores from the iter_arg, the P V
  chain, and the body's last ``wgmma_wait(0)``, which now retires both chains; the next scores are yielded.
  The last iteration computes scores of a stale stage that nothing reads (one extra S chain per loop).
- Stage reuse stays safe: the fill in iteration ``i`` overwrites the stage of tile ``i - 1``, whose K was
  read in iteration ``i - 2`` and whose V in ``i - 1``, both retired before iteration ``i``'s barrier; hence
  3 stages (with 2, the next tile's K would share a stage with the V still being read).

Why a pass and not a rotated kernel body: docs/attention.md, "Intra-warpgroup overlap".
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch.fx as fx

from ...errors import ConstraintError
from ...frontend.ops import Barrier, Iterate, RegisterInit
from ...frontend.ops_hopper import (
    MatrixDescriptor,
    MBarrierArrive,
    MBarrierWait,
    TmaFill,
    WarpgroupMMA,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from ...frontend.tracing import Trace, arg_nodes, placeholders
from ...indexing import induction_symbol
from ...indexing.symbols import stage_symbol
from ..context import PassContext
from ..schema import Kwargs, loop_body, loop_dim, op_node

MIN_STAGES = 3


@dataclass
class _Scores:
    """The nodes of a body's score part: wait, barrier, the chain's operand nodes, fence, chain, commit."""

    wait: fx.Node
    barrier: fx.Node
    part: list[fx.Node]  # everything moved to the top, in program order (wait and barrier first)
    last: fx.Node  # the chain's last wgmma: S
    retire: fx.Node  # the wgmma_wait(0) that retired S
    fill: fx.Node
    end: fx.Node  # the wgmma_wait(0) before the yield


def _op(n: fx.Node):
    return n.meta.get("op")


def _chain(first: fx.Node) -> list[fx.Node]:
    """``first`` and the wgmmas that accumulate onto it, in order."""
    chain = [first]
    while nxt := [u for u in chain[-1].users if _op(u) is WarpgroupMMA and u.args[2] is chain[-1]]:
        chain.append(nxt[0])
    return chain


def _scores(body: fx.Graph) -> _Scores | str:
    """The score part of an attention-shaped body, or why the body is not one."""
    nodes = list(body.nodes)
    waits = [n for n in nodes if _op(n) is MBarrierWait]
    fills = [n for n in nodes if _op(n) is TmaFill]
    if len(waits) != 1 or len(fills) != 1 or any(_op(n) is MBarrierArrive for n in nodes):
        return "needs a TMA-staged loop whose stages the workgroup barrier releases (one mbarrier wait, one fill)"
    wait = waits[0]
    barrier = nodes[nodes.index(wait) + 1]
    firsts = [n for n in nodes if _op(n) is WarpgroupMMA and _zero(n.args[2])]
    if _op(barrier) is not Barrier or len(firsts) != 1:
        return "needs one score chain (a wgmma from a zero accumulator) after the stage wait and barrier"
    chain = _chain(firsts[0])
    last = chain[-1]
    retire = next((u for u in last.users if _op(u) is WgmmaWait and last in Kwargs(u).retire), None)
    if retire is None or retire.kwargs["pending"] != 0 or any(_op(u) is WarpgroupMMA for u in last.users):
        return "the score chain must be retired by a wgmma_wait(0) and read by ordinary instructions"
    operands = _closure(chain)
    if any(n.op == "placeholder" and n.meta.get("role") == "iter_arg" for n in operands):
        return "the score chain reads a loop-carried value"
    inner = [n for n in operands if n.op != "placeholder"]
    if any(u not in set(inner) | set(chain) for n in inner for u in n.users):
        return "the score chain's operands are read by other nodes"
    at = nodes.index(chain[0])
    fence, commit = nodes[at - 1], next((n for n in nodes[at:] if _op(n) is WgmmaCommit), None)
    if _op(fence) is not WgmmaFence or commit is None or nodes.index(commit) > nodes.index(retire):
        return "the score chain must be fenced and committed before its wait"
    end = nodes[-2]  # before the output
    if _op(end) is not WgmmaWait or end.kwargs["pending"] != 0 or end is retire:
        return "the body must end in a wgmma_wait(0) of its own (after P V)"
    part = [wait, barrier] + [n for n in nodes if n in set(inner)] + [fence, *chain, commit]
    return _Scores(wait, barrier, part, last, retire, fills[0], end)


def _zero(n) -> bool:
    """A fresh all-zero register tile (the scores' accumulator: wgmma's scale-d = 0 form)."""
    return isinstance(n, fx.Node) and _op(n) is RegisterInit and Kwargs(n).value == 0.0


def _closure(chain: list[fx.Node]) -> set[fx.Node]:
    """The nodes the chain's operands are computed from (placeholders included), chain excluded."""
    seen: set[fx.Node] = set()
    todo = [a for m in chain for a in arg_nodes(m) if a not in chain]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(a for a in n.all_input_nodes if n.op != "placeholder")
    return seen


def _shift(n: fx.Node, subs: dict) -> None:
    """Substitute ``subs`` into what indexes ``n``: its layout, stage, prefetched iteration and (the stage
    wait) its stage and parity."""
    if n.meta.get("layout") is not None:
        n.meta["layout"] = n.meta["layout"].subs(subs)
    if "stage" in n.meta:
        n.meta["stage"] = sympy.sympify(n.meta["stage"]).subs(subs)
    if _op(n) is MatrixDescriptor:
        iv_subs = n.meta.get("iv_subs") or {}
        n.meta["iv_subs"] = {**{k: sympy.sympify(v).subs(subs) for k, v in iv_subs.items()}, **subs}
    if _op(n) is MBarrierWait:
        kw = dict(n.kwargs)
        kw.update({k: sympy.sympify(kw[k]).subs(subs) for k in ("stage", "parity", "iteration") if k in kw})
        n.kwargs = kw


def _prologue(trace: Trace, iterate: fx.Node, sc: _Scores, subs: dict, guard: dict) -> fx.Node:
    """The score part for the loop's first tile, before the loop; returns its (retired) S."""
    g, outer = trace.graph, {p: p.meta["capture_of"] for p in placeholders(loop_body(trace, iterate), "capture")}
    clones: dict[fx.Node, fx.Node] = {}
    with g.inserting_before(iterate):
        for n in sc.part:
            c = g.node_copy(n, lambda a: clones.get(a, outer.get(a, a)))
            c.meta = dict(n.meta)
            clones[n] = c
            _shift(c, subs)
    clones[sc.wait].kwargs = {**clones[sc.wait].kwargs, **guard}
    s = clones[sc.last]
    loc = iterate.meta.get("loc")
    op_node(g, WgmmaWait, (), {"pending": 0, "retire": (s,)}, "wgmma_wait_scores_first", loc, before=iterate)
    return s


def _rotate(trace: Trace, ctx: PassContext, iterate: fx.Node) -> None:
    body, dim = loop_body(trace, iterate), loop_dim(iterate)
    sc = _scores(body)
    if isinstance(sc, str):
        raise ConstraintError(iterate.meta.get("loc"), message=f"intra_wg_overlap: {sc}")
    stages = ctx.loop_stages.get(dim, 1)
    if stages < MIN_STAGES:
        raise ConstraintError(
            iterate.meta.get("loc"),
            message=f"intra_wg_overlap needs num_stages >= {MIN_STAGES} (the next tile's K must not share a "
            f"stage with the V still being read), got {stages}",
        )
    iv, stage = induction_symbol(dim), stage_symbol(dim)
    lo, stop = ctx.constraints.loop_bounds(dim, iterate.kwargs.get("start"), iterate.kwargs.get("end"))
    start_stage = sympy.sympify(ctx.stage_start.get(dim, 0))
    first = _prologue(trace, iterate, sc, {iv: lo, stage: start_stage}, {"iteration": lo, "stop": stop})
    # the body: tile i's scores arrive as an iter_arg, tile i + 1's are computed first and yielded
    args = placeholders(body, "iter_arg")
    with body.inserting_after(args[-1]):
        carried = body.placeholder(f"scores_{sc.last.name}")
    carried.meta.update(
        type=sc.last.meta["type"], layout=sc.last.meta["layout"], loc=sc.last.meta.get("loc"), role="iter_arg",
        index=len(args),
    )  # fmt: skip
    readers = [u for u in sc.last.users if u is not sc.retire and _op(u) is not WarpgroupMMA]
    for u in readers:
        u.replace_input_with(sc.last, carried)
    cursor = [n for n in body.nodes if n.op == "placeholder"][-1]
    for n in sc.part:
        cursor.append(n)
        cursor = n
        _shift(n, {iv: iv + 1, stage: sympy.Mod(stage + 1, stages)})
    sc.wait.kwargs = {**sc.wait.kwargs, "iteration": iv + 1, "stop": stop}
    sc.part[-1].append(sc.fill)
    body.erase_node(sc.retire)
    out = next(n for n in body.nodes if n.op == "output")
    sc.end.kwargs = {**sc.end.kwargs, "retire": (*Kwargs(sc.end).retire, sc.last)}
    out.args = (tuple(out.args[0]) + (sc.last,),)
    iterate.args = (arg_nodes(iterate, 0) + (first,), iterate.args[1])


def intra_warpgroup_overlap(trace: Trace, ctx: PassContext) -> None:
    cs = ctx.constraints
    if not cs.scheduling.intra_wg_overlap:
        return
    if cs.mma_type is None or cs.mma_type.spec.group_waves == 1:
        raise ConstraintError(cs.scheduling.loc, message="intra_wg_overlap needs warpgroup MMA (wgmma, sm_90a)")
    for node in [n for n in trace.graph.nodes if _op(n) is Iterate]:
        _rotate(trace, ctx, node)
