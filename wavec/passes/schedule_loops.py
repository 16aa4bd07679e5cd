"""schedule_loops: order each loop body so the matrix units start early and the copies hide behind them.

Requires: ``expand``, ``coarsen_loads`` (per-thread ops, K steps of mma clones in order) and
``pipeline_loops`` (the body's ``async_copy`` nodes and their ``async_commit``, if pipelined).
Guarantees, inside every ``iterate`` body:
- the register reads feeding the mmas of K step ``s`` sit right before that step's first mma (first-use
  order), so a thread holds the fragments of about one K step at a time;
- the asynchronous global->shared copies of a later stage, then their ``async_commit``, sit after the
  fragment reads of the second K step (the first, if there is only one), right before its first mma:
  a warp's first mma no longer waits behind the issue of every copy after the barrier, and the copies
  still leave early enough to land.  (Measured on an H200 at 4096^3 f16, 128x128x64 tiles: 307 -> 332
  TFLOP/s; spreading the copies over all K steps raised the register count to 255 and spilled.)  In a
  GEMM body (mma results feed only mmas and the yield) of three or more K steps, the second half of the
  copies and the commit move on to the third K step: two bursts of copy issue between mmas instead of
  one.  (H100, 4096^3 / 8192^3 f16 with fragment prefetch, ``benchmarks/mma_sync_schedules.py``:
  128x256 376 -> 389 and 389 -> 408 TFLOP/s, 256x128 366 -> 387; same registers.)
Data dependences are preserved: a fragment read only moves later, never before its memory operand's
last write (writes to its tile precede the first mma); an ``async_copy`` writes a stage no read of this
iteration touches, and stays after the body's ``async_wait`` (and the barrier placed after it).
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


def _schedule(body: fx.Graph) -> None:
    steps = k_steps(body)
    if not steps:
        return
    placed: set = set()
    for step in steps:
        for mma in step:
            for operand in (arg_node(mma, 0), arg_node(mma, 1)):
                if operand.meta.get("op") is Read and operand not in placed and operand.graph is body:
                    step[0].prepend(operand)
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
