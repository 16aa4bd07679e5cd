"""prefetch_fragments: the first K step's mma.sync fragments of iteration i + 1 are read during iteration i.

Requires: ``pipeline_loops`` (a ``cp.async`` body) and ``schedule_loops``.  Applies with
``SchedulingConstraint.prefetch_fragments`` to ``mma.sync`` GEMM chains.  Guarantees: K step 0's fragment
reads become loop-carried (read for iteration ``start`` before the loop, for ``i + 1`` from stage
``($STAGE + 1) % S`` at the end of the body); the body's ``async_wait`` moves before the last K step's
first mma, whose mmas cover the ``ldmatrix`` latency (CUTLASS's multistage mainloop).  Hazards and why:
docs/design.md, "Module contracts".
"""

from __future__ import annotations

import sympy
import torch.fx as fx

from ..frontend.ops import AsyncCommit, AsyncWait, Barrier, Iterate, Read
from ..frontend.tracing import Trace, arg_node, arg_nodes, placeholders
from ..indexing import induction_symbol
from ..indexing.symbols import stage_symbol
from .context import PassContext
from .loop_shape import chains_only
from .schedule_loops import k_steps
from .schema import loop_body, loop_dim, op_node


def _step0_reads(steps: list[list[fx.Node]], body: fx.Graph) -> list[fx.Node]:
    """The shared reads feeding K step 0's mmas and nothing else, in program order."""
    step0 = set(steps[0])
    operands = [arg_node(m, i) for m in steps[0] for i in (0, 1)]
    wanted = {a for a in operands if a.meta.get("op") is Read and a.graph is body}
    for r in list(wanted):  # an ldmatrix.x4 pair travels together
        wanted |= {p for p in (r.meta.get("pair_with"), r.meta.get("paired_by")) if p is not None}
    if any(u not in step0 for r in wanted for u in r.users):
        return []
    return [n for n in body.nodes if n in wanted]


def _clone_reads(g: fx.Graph, reads: list[fx.Node], before: fx.Node, mem_of, subs: dict, **meta) -> list[fx.Node]:
    """Copies of ``reads`` inserted before ``before`` with their memory operand mapped by ``mem_of``,
    ``subs`` substituted into their layouts and ``meta`` replacing theirs; ldmatrix pairs kept."""
    clones = {}
    with g.inserting_before(before):
        for r in reads:
            c = g.create_node("call_function", r.target, (mem_of(r.args[0]),), dict(r.kwargs), name=f"{r.name}_first")
            c.meta.update(r.meta)
            c.meta.update(layout=r.meta["layout"].subs(subs), **meta)
            clones[r] = c
    for c in clones.values():
        for k in ("pair_with", "paired_by"):
            if c.meta.get(k) is not None:
                c.meta[k] = clones[c.meta[k]]
    return list(clones.values())


def _prefetch(trace: Trace, ctx: PassContext, iterate: fx.Node) -> None:
    body, dim = loop_body(trace, iterate), loop_dim(iterate)
    stages = ctx.loop_stages.get(dim)
    wait = next((n for n in body.nodes if n.meta.get("op") is AsyncWait), None)
    commit = next((n for n in body.nodes if n.meta.get("op") is AsyncCommit), None)
    steps = k_steps(body)
    if not stages or wait is None or commit is None or not steps or not chains_only(body):
        return
    reads = _step0_reads(steps, body)
    if not reads:
        return
    iv, stage = induction_symbol(dim), stage_symbol(dim)
    lo, _stop = ctx.constraints.loop_bounds(dim, iterate.kwargs.get("start"), iterate.kwargs.get("end"))
    loc = iterate.meta.get("loc")
    # before the loop: stage 0 (the carried stage's start) landed and published, then its step-0 reads
    g = trace.graph
    op_node(g, AsyncWait, (), {"pending": wait.kwargs["pending"]}, "async_wait_first", loc, before=iterate)
    op_node(g, Barrier, (), {}, "barrier_first", loc, before=iterate)
    outer = {p: p.meta["capture_of"] for p in placeholders(body, "capture")}
    firsts = _clone_reads(
        g,
        reads,
        iterate,
        outer.__getitem__,
        {iv: lo},
        stage=sympy.sympify(ctx.stage_start.get(dim, 0)),
        iv_subs={iv: lo},
    )
    # the loop's values: step-0 fragments enter as iter_args and leave as next-iteration reads
    args = placeholders(body, "iter_arg")
    anchor = args[-1]
    for index, r in enumerate(reads, start=len(args)):
        with body.inserting_after(anchor):
            ph = body.placeholder(f"frag_{r.name}")
        ph.meta.update(
            type=r.meta["type"], layout=r.meta["layout"], loc=r.meta.get("loc"), role="iter_arg", index=index
        )
        r.replace_all_uses_with(ph)
        anchor = ph
    last_first = steps[-1][0]
    last_first.prepend(wait)
    for r in reads:
        last_first.prepend(r)
        r.meta.update(
            stage=sympy.Mod(stage + 1, stages), iv_subs={iv: iv + 1}, layout=r.meta["layout"].subs({iv: iv + 1})
        )
    out = next(n for n in body.nodes if n.op == "output")
    out.args = (tuple(out.args[0]) + tuple(reads),)
    iterate.args = (arg_nodes(iterate, 0) + tuple(firsts), iterate.args[1])


def prefetch_fragments(trace: Trace, ctx: PassContext) -> None:
    cs = ctx.constraints
    if not cs.scheduling.prefetch_fragments or cs.mma_type is None or cs.group_waves > 1:
        return
    for node in list(trace.graph.nodes):
        if node.meta.get("op") is Iterate:
            _prefetch(trace, ctx, node)
