"""promote_to_shared: stage MMA operands (or reads of ``Memory[..., "shared"]`` arguments) through
shared memory.

Requires: a typed trace.  Guarantees: each promoted ``read(x)`` in an ``iterate`` body becomes ``g =
read(x)`` (``distribute="workgroup"``: spread over the whole workgroup) and ``write(g, tile)`` at the top
of the body, then ``read(tile)``; ``tile`` is a root-graph ``allocate`` (captured into the loop) covering
the workgroup's tile of every dim.  Barriers, padding and stages come later (``insert_barriers``,
``swizzle_shared``, ``pipeline_loops``).  Every ``wc.allocate`` buffer gets its ``tile`` (``distributed_shape``
or the dims' workgroup extents), ``base`` (the workgroup's tile start of a workgroup-tiled dim, the loop
tile's start of a loop-tiled one, else 0), ``stages = 1`` and ``pad = 0``.
"""

from __future__ import annotations

from typing import cast

import torch.fx as fx

from ..errors import ConstraintError
from ..frontend.ops import MMA, Allocate, Iterate, Permute, Read, Write
from ..frontend.tracing import Trace, arg_node, capture_root
from ..frontend.types import AddressSpace, TensorType
from .context import PassContext
from .schema import capture_into, op_node


def _wants_promotion(read: fx.Node, ctx: PassContext) -> bool:
    mem = capture_root(arg_node(read, 0))
    if mem.meta.get("promote"):
        return True
    if not ctx.constraints.scheduling.promote_operands:
        return False
    # an operand read in the other dimension order (B stored [K, N]) reaches the mma through a permute
    users = [w for u in read.users for w in (u.users if u.meta.get("op") is Permute else (u,))]
    operands = [read] + [u for u in read.users if u.meta.get("op") is Permute]
    return any(u.meta.get("op") is MMA and any(x in u.args[:2] for x in operands) for u in users)


def _body_inputs(read: fx.Node) -> list[fx.Node]:
    """The body nodes a read's index values are computed from, in program order."""
    seen: set[fx.Node] = set()
    stack = [a for a in read.args[1:] if isinstance(a, fx.Node)]
    while stack:
        n = stack.pop()
        if n.op == "call_function" and n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return [n for n in read.graph.nodes if n in seen]


def _promote(trace: Trace, ctx: PassContext, iterate: fx.Node, sub: fx.Graph, read: fx.Node) -> None:
    cs = ctx.constraints
    mem = arg_node(read, 0)
    ttype: TensorType = read.meta["type"]  # the held dims (batch and mapped dims are not staged)
    tile = {}
    for d in ttype.dims:
        extent = cs.workgroup_extent(d)
        if extent is None:
            return  # not tiled: nothing bounded to stage
        tile[d] = extent
    base = {d: cs.base_offset(d, ctx.in_loop(sub, d), per_wave=False) for d in ttype.dims}
    kwargs, shared = {"tile": tile, "base": base, "stages": 1, "pad": 0}, AddressSpace.SHARED
    name, loc = f"shared_{capture_root(mem).name}", read.meta.get("loc")
    alloc = op_node(
        trace.graph, Allocate, (), kwargs, name, loc, before=iterate, type=TensorType(ttype.shape, ttype.dtype, shared)
    )
    tile_ph = capture_into(sub, iterate, alloc)
    # Copies go to the top of the body, after earlier copies: all global loads are in flight before the
    # first shared read, and one barrier separates every shared write from every shared read.
    inputs = _body_inputs(read)  # a gather's index values, computed in the body: ahead of its copy
    anchor = next(n for n in sub.nodes if n.op != "placeholder" and not n.meta.get("staging") and n not in inputs)
    # Inputs already above the anchor stay: an earlier copy (K of a paged read) may share them.
    order = {n: i for i, n in enumerate(sub.nodes)}
    for n in inputs:
        if order[n] > order[anchor]:
            anchor.prepend(n)
    with sub.inserting_before(anchor):
        g = sub.create_node("call_function", Read, tuple(read.args), dict(read.kwargs), name=f"{read.name}_global")
        g.meta.update(read.meta, distribute="workgroup", staging=True)
        op_node(sub, Write, (g, tile_ph), {}, f"{read.name}_to_shared", read.meta.get("loc"), staging=True)
    read.args = (tile_ph,)  # the shared tile holds the gathered rows: no index values from here on
    read.kwargs = {k: v for k, v in read.kwargs.items() if k != "dynamic"}


def _size_user_buffer(ctx: PassContext, alloc: fx.Node) -> None:
    cs, dims = ctx.constraints, alloc.meta["type"].shape
    given = cast("tuple | None", alloc.kwargs.get("distributed_shape"))  # verify_trace: a tuple of Expr
    tile, base = {}, {}
    for i, d in enumerate(dims):
        extent = cs.resolve_int(given[i], f"allocate extent of {d}") if given else cs.workgroup_extent(d)
        if extent is None:
            raise ConstraintError(
                alloc.meta.get("loc"),
                message=f"allocate: dimension {d} has no tile: give distributed_shape or a constraint that tiles {d}",
            )
        tile[d] = extent
        base[d] = cs.base_offset(d, d in cs.loop_tile and d not in cs.wg_tile, per_wave=False)
    alloc.kwargs = {**alloc.kwargs, "tile": tile, "base": base, "stages": 1, "pad": 0}


def promote_to_shared(trace: Trace, ctx: PassContext) -> None:
    for alloc in [n for n in trace.graph.nodes if n.meta.get("op") is Allocate and n.kwargs.get("user")]:
        _size_user_buffer(ctx, alloc)
    for iterate in [n for n in trace.graph.nodes if n.meta.get("op") is Iterate]:
        sub = trace.subgraphs[iterate.kwargs["subgraph"]]
        for read in [n for n in sub.nodes if n.meta.get("op") is Read]:
            if capture_root(read.args[0]).meta.get("role") == "memory" and _wants_promotion(read, ctx):
                _promote(trace, ctx, iterate, sub, read)
