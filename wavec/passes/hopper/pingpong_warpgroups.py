"""pingpong_warpgroups: FlashAttention-3's inter-warpgroup ping-pong for a warp-specialized attention body.

Applies when ``SchedulingConstraint(pingpong=True)``.  Requires: ``warp_specialize`` ran (a
``WarpSpecialize`` node; 2 consumer warpgroups), the loops after it are general bodies fenced by
``insert_wgmma_fences`` (each wgmma chain a ``wgmma_fence``, its wgmmas, a ``wgmma_commit``).  Else a
``ConstraintError`` naming ``pingpong``.

Guarantees: every wgmma chain of those loops (from its fence to its commit) is preceded by a
``named_barrier(sync, mine)`` and followed by a ``named_barrier(arrive, other)``, so the two consumer
warpgroups issue their chains in turn (warpgroup 0's S, 1's S, 0's P·V, 1's P·V, ...) and one's softmax runs
while the tensor cores work on the other's (FA3 §3.1).  The stage waits stay before the sync (a warpgroup
does not hold its turn while its tiles land).  Right after the split warpgroup 1 arrives once on warpgroup 0's
barrier (0 goes first); after the last loop warpgroup 0 syncs once more, so that every phase of both
barriers completes.  Barrier ids 1 + w (0 is the workgroup barrier), 256 threads each.  Data never passes
between the warpgroups: the barriers order issue only.
"""

from __future__ import annotations

import torch.fx as fx

from ...errors import ConstraintError
from ...frontend.ops import Iterate
from ...frontend.ops_hopper import NamedBarrier, WarpSpecialize, WgmmaCommit, WgmmaFence
from ...frontend.tracing import Trace
from ..context import PassContext
from ..loop_shape import chains_only
from ..schema import loop_body, op_node

PAIR = 256  # threads of the two consumer warpgroups that meet at one named barrier


def _refuse(trace: Trace, why: str) -> ConstraintError:
    return ConstraintError(trace.loc, message=f"SchedulingConstraint(pingpong=True): {why}")


def _barrier(g: fx.Graph, action: str, turn: str, loc, only: int | None = None, **where) -> fx.Node:
    kw = {"action": action, "turn": turn, "threads": PAIR, **({"only": only} if only is not None else {})}
    return op_node(g, NamedBarrier, (), kw, f"named_barrier_{action}", loc, **where)


def _chains(body: fx.Graph) -> list[tuple[fx.Node, fx.Node]]:
    """(fence, commit) of each wgmma chain, in order (a fence inside a chain belongs to it)."""
    chains, start = [], None
    for n in body.nodes:
        op = n.meta.get("op")
        if op is WgmmaFence and start is None:
            start = n
        elif op is WgmmaCommit and start is not None:
            chains.append((start, n))
            start = None
    return chains


def pingpong_warpgroups(trace: Trace, ctx: PassContext) -> None:
    cs = ctx.constraints
    if not cs.scheduling.pingpong:
        return
    root = trace.graph
    split = next((n for n in root.nodes if n.meta.get("op") is WarpSpecialize), None)
    if split is None or cs.threads != PAIR:
        raise _refuse(trace, f"needs warp_specialize=True and 2 consumer warpgroups ({cs.threads} threads)")
    loops = [n for n in root.nodes if n.meta.get("op") is Iterate]
    bodies = [loop_body(trace, it) for it in loops]
    if not loops or any(chains_only(b) or not _chains(b) for b in bodies):
        raise _refuse(trace, "needs an attention-shaped body (wgmma results read by the softmax)")
    for body in bodies:
        for fence, commit in _chains(body):
            loc = fence.meta.get("loc")
            _barrier(body, "sync", "mine", loc, before=fence)
            _barrier(body, "arrive", "other", loc, after=commit)
    loc = loops[0].meta.get("loc")
    _barrier(root, "arrive", "other", loc, only=1, after=split)  # warpgroup 0 issues first
    _barrier(root, "sync", "mine", loc, only=0, after=loops[-1])  # takes warpgroup 1's last arrival
