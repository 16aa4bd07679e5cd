"""schedule_loops: order each loop body so operand fetches sit next to the matrix work that uses them.

Requires: ``expand`` and ``coarsen_loads`` (per-thread ops, K steps of mma clones in order).
Guarantees: inside every ``iterate`` body, the register reads feeding the mmas of one K step are
placed right before the first mma of that step (in first-use order), so a thread holds the fragments
of one K step at a time instead of all of them: fewer live registers, and the next step's fetches can
overlap this step's mmas.  Data dependences are preserved (a read only moves later, never before its
memory operand's last write, since writes to its tile precede the first mma of the body).
"""

from __future__ import annotations

import torch.fx as fx

from ..frontend.ops import MMA, Iterate, Read
from ..frontend.tracing import Trace
from .context import PassContext


def _k_step(mma: fx.Node) -> int:
    return mma.meta["key"][-1][1]


def _schedule(body: fx.Graph) -> None:
    mmas = [n for n in body.nodes if n.meta.get("op") is MMA]
    placed: set = set()
    anchor, step = None, None
    for mma in mmas:
        if _k_step(mma) != step:
            anchor, step = mma, _k_step(mma)
        for operand in mma.args[:2]:
            if operand.meta.get("op") is Read and operand not in placed and operand.graph is body:
                anchor.prepend(operand)
                placed.add(operand)


def schedule_loops(trace: Trace, ctx: PassContext) -> None:
    for node in trace.graph.nodes:
        if node.meta.get("op") is Iterate:
            _schedule(trace.subgraphs[node.kwargs["subgraph"]])
