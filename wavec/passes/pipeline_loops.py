"""pipeline_loops: software pipelining of ``iterate`` with ``num_stages = S`` (DESIGN §5.7).

Requires: ``expand``, ``coarsen_loads``, ``swizzle_shared``.  Applies where S >= 2, the target has
``cp.async`` and the body copies global tiles to shared memory in runs of at least 4 bytes.  Guarantees:
each global ``read`` + shared ``write`` becomes an ``async_copy`` of iteration ``min(i + D, n - 1)`` into
stage ``(i + D) % S`` (``D = S - 1``, or ``S - 2`` with a wgmma group in flight); shared reads take the
carried stage ``$STAGE_<dim>``; the body begins with ``async_wait(pending=D - 1)``; a prologue issues
iterations ``0 .. D - 1``.  Index values computed in the body from the step (a paged read's block) are
recomputed for the iteration copied: their chain's layouts shift ``D`` ahead and the prologue gets clones
of the chain; a copy whose indices cannot be recomputed keeps the loop synchronous.  On sm_90a,
128-byte-swizzled wgmma operand tiles take TMA (``pipeline_tma.py``)
unless ``async_copy`` says otherwise.  Full contract: docs/design.md, "Module contracts".
"""

from __future__ import annotations

import sympy
import torch.fx as fx

from ..errors import ConstraintError
from ..frontend.mapping import index_operands
from ..frontend.ops import AsyncCommit, AsyncCopy, AsyncWait, Iterate, Read, Write
from ..frontend.tracing import Trace, arg_node, capture_root, placeholders
from ..frontend.types import AddressSpace
from ..indexing import Layout, induction_symbol
from ..indexing.symbols import stage_symbol
from .context import PassContext
from .hopper.pipeline_tma import choose_war, pipeline_tma, tma_plan
from .loop_shape import chains_only
from .schema import loop_body, loop_dim, op_node

Pair = tuple[fx.Node, fx.Node]  # a tile copy: (global read, shared write)


def _copy_pairs(sub: fx.Graph) -> list[Pair]:
    pairs = []
    for w in sub.nodes:
        shared = w.meta.get("op") is Write and w.args[1].meta["type"].address_space == AddressSpace.SHARED
        if shared and not capture_root(w.args[1]).kwargs.get("user"):  # a wc.allocate buffer: the user's stores
            src = w.args[0]
            if src.meta.get("op") is Read and len(src.users) == 1:
                pairs.append((src, w))
    return pairs


def _step_chain(read: fx.Node) -> list[fx.Node] | None:
    """The body nodes that compute ``read``'s index values from the loop's step (a paged read's block
    and row: ``wc.index``, arithmetic, index-tensor reads of global memory, captures as leaves), in graph
    order; None when a value cannot be recomputed for another iteration (a loop-carried value, a shared
    read, a non per-tile op) or also feeds something else (``index_chains`` gives each access its own)."""
    chain: set[fx.Node] = set()
    stack = [i for i in index_operands(read).values() if i.meta.get("role") != "capture"]
    while stack:
        n = stack.pop()
        if n in chain or n.meta.get("role") == "capture":
            continue
        op = n.meta.get("op")
        in_global = op is not Read or arg_node(n, 0).meta["type"].address_space != AddressSpace.SHARED
        if n.op != "call_function" or getattr(op, "expansion", None) != "per_tile" or not in_global:
            return None
        chain.add(n)
        stack.extend(n.all_input_nodes)
    if any(u not in chain and u is not read for n in chain for u in n.users):
        return None
    return [n for n in read.graph.nodes if n in chain]


def _pipeline(trace: Trace, ctx: PassContext, iterate: fx.Node, stages: int) -> None:
    cs = ctx.constraints
    dim, sub = loop_dim(iterate), loop_body(trace, iterate)
    pairs = _copy_pairs(sub)
    # A copy issued iterations ahead needs that iteration's addresses: an index computed in the body from
    # the step (a paged read's block) is recomputed for the iteration copied (``_step_chain``); a body
    # whose indices cannot be keeps synchronous copies.
    chains = {r: _step_chain(r) for r, _w in pairs}
    if any(c is None for c in chains.values()):
        return
    # cp.async moves 4, 8 or 16 bytes: a tile whose copy runs are shorter stays synchronous
    if not pairs or any(n * r.meta["type"].dtype.bytes < 4 for r, _w in pairs for _f, n, _o in r.meta["accesses"]):
        return
    # and its source's innermost stride must be 1 (an inner-strided argument of a strided variant is not)
    if any(ctx.inner_strided(capture_root(arg_node(r, 0)).name) for r, _w in pairs):
        return
    ctx.loop_stages[dim] = stages
    # (both rewrites) every staged tile gets S buffers; shared reads take the carried stage (= i % S)
    outer = {p: p.meta["capture_of"] for p in placeholders(sub, "capture")}
    for alloc in {outer[arg_node(w, 1)] for _r, w in pairs}:
        alloc.kwargs = {**alloc.kwargs, "stages": stages}
    for n in sub.nodes:
        staged = n.meta.get("op") is Read and n.args[0].meta["type"].address_space == AddressSpace.SHARED
        if staged and not capture_root(n.args[0]).kwargs.get("user"):
            n.meta["stage"] = stage_symbol(dim)
    # A warpgroup MMA (wgmma) that keeps one group in flight across iterations still reads the stage of
    # iteration i - 1 during iteration i: copies then run one iteration less ahead (insert_wgmma_fences).
    lag = 1 if cs.group_waves > 1 and stages >= 3 and chains_only(sub) else 0
    iterate.meta["wgmma_groups_in_flight"] = lag
    if _tma(trace, ctx, iterate, pairs, stages, lag):
        return
    lo, stop = cs.loop_bounds(dim, iterate.kwargs.get("start"), iterate.kwargs.get("end"))
    iv, loc, distance, last = induction_symbol(dim), iterate.meta.get("loc"), stages - 1 - lag, stop - 1
    body_chains = [n for c in chains.values() for n in c or ()]
    step_layouts = {n: n.meta["layout"] for n in body_chains}
    copies = _async_copies(sub, pairs, dim, stages, distance, last, loc)
    for n in body_chains:  # the body's index chains now address the iteration its copies fill
        n.meta["layout"] = step_layouts[n].subs({iv: sympy.Min(iv + distance, last)})
    # the prologue: iterations lo .. lo + distance - 1 into stages 0 .. distance - 1, one commit each
    for s in range(distance):
        it = sympy.Min(lo + s, last)  # once per stage: building a Min costs ~7 ms of sympy simplification
        values = _prologue_chains(trace.graph, iterate, step_layouts, outer, {iv: it})
        for c, layout in copies:
            op_node(
                trace.graph,
                AsyncCopy,
                (outer[arg_node(c, 0)], outer[arg_node(c, 1)], *(values[i] for i in index_operands(c).values())),
                dict(c.kwargs),
                f"{c.name}_prologue{s}",
                c.meta.get("loc"),
                before=iterate,
                layout=layout.subs({iv: it}),
                accesses=c.meta["accesses"],
                stage=sympy.Integer(s),
                key=c.meta.get("key"),
                iv_subs={iv: it},
                mapping=c.meta.get("mapping"),
            )
        op_node(trace.graph, AsyncCommit, (), {}, f"async_commit_prologue{s}", loc, before=iterate)


def _prologue_chains(graph: fx.Graph, iterate: fx.Node, step_layouts: dict, outer: dict, at: dict) -> dict:
    """Body node -> the value a prologue copy takes for it: a capture its outer node, a node of an index
    chain (``step_layouts``: node -> its layout at the loop's own step) a clone before the loop with the
    induction variable substituted by ``at``."""
    values = dict(outer)
    with graph.inserting_before(iterate):
        for n, layout in step_layouts.items():
            clone = graph.node_copy(n, lambda a: values[a])
            clone.meta["layout"] = layout.subs(at)
            values[n] = clone
    return values


def _tma(trace: Trace, ctx: PassContext, iterate: fx.Node, pairs: list[Pair], stages: int, lag: int) -> bool:
    """Pipeline the loop through TMA where allowed (True); where TMA was asked for and cannot, say why."""
    want, ws = ctx.constraints.scheduling.async_copy, ctx.constraints.scheduling.warp_specialize
    sub = loop_body(trace, iterate)
    if ws and want in ("cp.async", "tma-barrier"):
        raise ConstraintError(
            iterate.meta.get("loc"),
            message="SchedulingConstraint(warp_specialize=True): the "
            f"producer warpgroup issues TMA fills released through empty mbarriers, not "
            f"async_copy={want!r}",
        )
    if want == "cp.async":
        return False
    specs, why = tma_plan(trace, ctx, pairs)
    if specs is not None:
        war = {"tma-barrier": "barrier", "tma-mbarrier": "mbarrier"}.get(want) or choose_war(stages, lag)
        # a general body (attention) releases its stage after its last wgmma wait, at the iteration's end:
        # the barrier unless empty mbarriers are asked for (or a producer needs them)
        war = war if chains_only(sub) or want == "tma-mbarrier" else "barrier"
        # a producer or a cluster peer refills a stage only on the consumers' release: empty mbarriers
        clustered = ctx.constraints.scheduling.cluster != (1, 1) and chains_only(sub)
        pipeline_tma(trace, ctx, iterate, stages, lag, pairs, specs, "mbarrier" if ws or clustered else war)
        return True
    if ws:
        raise ConstraintError(
            iterate.meta.get("loc"), message=f"SchedulingConstraint(warp_specialize=True) needs a TMA loop: {why}"
        )
    if want != "auto":
        raise ConstraintError(iterate.meta.get("loc"), message=f"SchedulingConstraint(async_copy='tma'): {why}")
    return False


def _async_copies(
    sub: fx.Graph, pairs: list[Pair], dim: sympy.Symbol, stages: int, distance: int, last, loc
) -> list[tuple[fx.Node, Layout]]:
    """The body's copy pairs as ``async_copy``s ``distance`` iterations ahead, each with its read's layout."""
    iv, stage = induction_symbol(dim), stage_symbol(dim)  # stage == iv % stages, carried by the loop
    ahead = sympy.Min(iv + distance, last)
    copies = []  # (async copy node, layout of iteration $ARG_K)
    for read, write in pairs:
        c = op_node(
            sub,
            AsyncCopy,
            (arg_node(read, 0), arg_node(write, 1), *index_operands(read).values()),
            {"dynamic": read.kwargs["dynamic"]} if "dynamic" in read.kwargs else {},
            f"{read.name}_async",
            read.meta.get("loc"),
            before=write,
            layout=read.meta["layout"].subs({iv: ahead}),
            accesses=read.meta["accesses"],
            stage=sympy.Mod(stage + distance, stages),
            key=read.meta.get("key"),
            iv_subs={iv: ahead},
            mapping=read.kwargs.get("mapping"),
        )
        copies.append((c, read.meta["layout"]))
        sub.erase_node(write)
        sub.erase_node(read)
    op_node(sub, AsyncCommit, (), {}, "async_commit", loc, before=copies[-1][0].next)
    first = next(n for n in sub.nodes if n.op != "placeholder")
    op_node(sub, AsyncWait, (), {"pending": distance - 1}, "async_wait", loc, before=first)
    return copies


def pipeline_loops(trace: Trace, ctx: PassContext) -> None:
    stages = ctx.constraints.num_stages
    mma = ctx.constraints.mma_type
    async_ok = mma is None or mma.spec.vendor == "nvidia"
    if ctx.constraints.scheduling.warp_specialize and (
        stages < 2 or not ctx.target.has_tma or ctx.constraints.group_waves == 1
    ):
        raise ConstraintError(
            trace.loc,
            message="SchedulingConstraint(warp_specialize=True): a producer warpgroup "
            f"feeds wgmma loops of num_stages >= 2 through TMA on sm_90a (num_stages={stages}, "
            f"target {ctx.target.name!r}, mma {mma.name if mma else None})",
        )
    if stages < 2 or not async_ok or not ctx.target.has_cp_async:
        want = ctx.constraints.scheduling.async_copy
        if want.startswith("tma"):  # asked for explicitly: say why there is none
            raise ConstraintError(
                trace.loc,
                message=f"SchedulingConstraint(async_copy={want!r}): TMA pipelines "
                f"loops of num_stages >= 2 on sm_90a (num_stages={stages}, target {ctx.target.name!r})",
            )
        return
    for node in list(trace.graph.nodes):
        if node.meta.get("op") is Iterate:
            _pipeline(trace, ctx, node, stages)
