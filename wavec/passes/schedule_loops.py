"""schedule_loops: order each loop body so the matrix units start early and the copies hide behind them.

Requires: ``expand``, ``coarsen_loads``, ``pipeline_loops``.  Guarantees, per ``iterate`` body: the reads
feeding K step ``s`` sit right before its first mma; a later stage's copies and their ``async_commit``
right before the second K step's first mma (in a GEMM of three or more K steps half move on to the
third); data dependences preserved.  Measurements: docs/design.md, "Module contracts".
"""

from __future__ import annotations

import torch.fx as fx

from ..frontend.ops import MMA, AsyncCommit, AsyncCopy, Iterate, Read
from ..frontend.tracing import Trace, arg_node
from .context import PassContext
from .loop_shape import chains_only


def k_steps(body: fx.Graph) -> list[list[fx.Node]]:
    """The body's mmas grouped by K step, in program order."""
    steps: list[list[fx.Node]] = []
    for n in body.nodes:
        if n.meta.get("op") is MMA:
            if not steps or steps[-1][0].meta["key"][-1][1] != n.meta["key"][-1][1]:
                steps.append([])
            steps[-1].append(n)
    return steps


def _movable(read: fx.Node, before: fx.Node, order: dict[fx.Node, float]) -> bool:
    """Whether ``read`` can stand right before ``before``: its operands come earlier, its users later (a
    ``wc.debug_log`` write of an mma operand, say, stays after the read it logs)."""
    at = order[before]
    inputs = [a for a in read.all_input_nodes if a.graph is read.graph]
    return all(order[a] < at for a in inputs) and all(order[u] >= at for u in read.users if u.graph is read.graph)


def _schedule(body: fx.Graph) -> None:
    steps = k_steps(body)
    if not steps:
        return
    placed: set = set()
    order: dict[fx.Node, float] = {n: i for i, n in enumerate(body.nodes)}
    for step in steps:
        for mma in step:
            for operand in (arg_node(mma, 0), arg_node(mma, 1)):
                if operand.meta.get("op") is Read and operand not in placed and operand.graph is body:
                    if _movable(operand, step[0], order):
                        step[0].prepend(operand)
                        # the others keep their order: the moved read takes a key between its new neighbours
                        order[operand] = (order.get(operand.prev, order[step[0]] - 1) + order[step[0]]) / 2
                    placed.add(operand)
    copies = [n for n in body.nodes if n.meta.get("op") is AsyncCopy]
    commit = next((n for n in body.nodes if n.meta.get("op") is AsyncCommit), None)
    if not copies or commit is None:
        return
    anchor = steps[min(1, len(steps) - 1)][0]
    half = len(copies) // 2 if len(steps) >= 3 and chains_only(body) else len(copies)
    for c in copies[:half]:
        anchor.prepend(c)
    if half < len(copies):
        anchor = steps[2][0]
        for c in copies[half:]:
            anchor.prepend(c)
    anchor.prepend(commit)


def schedule_loops(trace: Trace, ctx: PassContext) -> None:
    for node in trace.graph.nodes:
        if node.meta.get("op") is Iterate:
            _schedule(trace.subgraphs[node.kwargs["subgraph"]])
