"""Predicates on the shape of an ``iterate`` body that several passes decide by (``pipeline_loops``,
``schedule_loops``, ``prefetch_fragments``, ``mask_bounds``, ``insert_wgmma_fences``): one definition,
imported by each."""

from __future__ import annotations

import torch.fx as fx

from ..frontend.ops import MMA
from ..frontend.ops_hopper import WarpgroupMMA
from ..frontend.tracing import placeholders


def chains_only(g: fx.Graph) -> bool:
    """Whether the body's mma results feed nothing but the next mma's accumulator and the loop's yield
    (a GEMM): a wgmma group may stay in flight across iterations, fragments may be prefetched across the
    back edge, and rows past the bound only reach accumulator rows that the masked store drops."""
    mmas = [n for n in g.nodes if n.meta.get("op") in (MMA, WarpgroupMMA)]
    return all(
        u.op == "output" or (u in mmas and u.args[2] is x and u.args[0] is not x and u.args[1] is not x)
        for x in accumulators(g, mmas) + mmas
        for u in x.users
    )


def accumulators(g: fx.Graph, mmas: list[fx.Node]) -> list[fx.Node]:
    """The body's iter_args that one of ``mmas`` takes as its accumulator."""
    return [p for p in placeholders(g, "iter_arg") if any(u in mmas and u.args[2] is p for u in p.users)]
