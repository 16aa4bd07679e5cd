"""warp_specialize: split a TMA-pipelined wgmma loop between a producer warpgroup and the consumers.

Applies when ``SchedulingConstraint(warp_specialize=True)``.  Requires: the root-graph loops that
``pipeline_loops`` gave TMA with one set of empty mbarriers (a GEMM's K loop, or attention's key loops, which
count stages over the loops), their ``mbarrier_arrive`` placed.  Guarantees: each loop's ``TmaFill`` nodes
move into a ``producer_<n>`` region (``kwargs["loops"]``, in order) run by an extra warpgroup after a
``WarpSpecialize`` node; later root nodes run in the consumers only; ``ctx.producer_threads = 128``;
``kwargs["regs"]`` from :func:`register_split`; no barrier after the split.  Full contract: docs/hopper.md.
"""

from __future__ import annotations

import sympy
import torch.fx as fx

from ...errors import ConstraintError
from ...frontend.ops import Allocate, Barrier, Iterate
from ...frontend.ops_hopper import MBarrierInit, TmaFill, WarpSpecialize
from ...frontend.tracing import Trace, arg_node, capture_root
from ...indexing import induction_symbol
from ..context import PassContext
from ..loop_shape import chains_only
from ..schema import loop_body, loop_dim, op_node
from .pipeline_tma import _fill_kwargs, k_base

WARPGROUP = 128
REGISTER_FILE = 65536  # 32-bit registers per SM (and the most one CTA can hold)
MAX_LAUNCH_REGS = 255  # per thread
PRODUCER_REGS = 40  # the producer keeps a few addresses and a loop counter
MAX_CONSUMER_REGS = 240


def register_split(consumer_threads: int, producer: int = PRODUCER_REGS) -> tuple[int, int]:
    """(producer, consumer) ``setmaxnreg`` counts.  ptxas gives a kernel with ``setmaxnreg`` the most
    registers per thread its block size allows (65536 / threads, a multiple of 8: 168 for 384 threads);
    that pool is what the CTA holds.  The producer gives back down to ``PRODUCER_REGS``; the consumers
    take what that frees, a multiple of 8, at most ``MAX_CONSUMER_REGS``: 2 consumer warpgroups
    40 / 232 (128 x 40 + 256 x 232 = 64512), 1: 40 / 240, 4: 40 / 104; attention's producer (``producer``
    24, FlashAttention-3's) leaves 2 consumer warpgroups 240."""
    total = consumer_threads + WARPGROUP
    launch = min(MAX_LAUNCH_REGS, REGISTER_FILE // total) // 8 * 8
    consumer = (launch * total - WARPGROUP * producer) // consumer_threads // 8 * 8
    return producer, min(MAX_CONSUMER_REGS, consumer)


def _producer_region(
    trace: Trace, init: fx.Node, body_fills: list[fx.Node], lo, stop, stages: int, base=0
) -> tuple[str, list]:
    """A new subgraph with the loop's TmaFills (one per stage group: K, then V) of iteration ``$ARG_<dim>``;
    returns (its name, captured root nodes)."""
    g = fx.Graph()
    args = [capture_root(arg_node(f, i)) for f in body_fills for i in range(len(f.args))]
    roots = list(dict.fromkeys(args))
    caps = {}
    for r in roots:
        p = g.placeholder(f"capture_{r.name}")
        p.meta.update(role="capture", capture_of=r, type=r.meta.get("type"))
        caps[r] = p
    iv = induction_symbol(loop_dim(init))
    kw = _fill_kwargs(iv, stages, lo, stop, "mbarrier", base)  # base: earlier tiles' or loops' iterations
    kw["stop"] = None  # the producer's loop runs exactly the loop's iterations
    for f in body_fills:
        fill_args = tuple(caps[capture_root(arg_node(f, i))] for i in range(len(f.args)))
        bar = {"bar_offset": f.kwargs["bar_offset"]} if "bar_offset" in f.kwargs else {}
        n = g.create_node("call_function", TmaFill, fill_args, {**kw, **bar}, name="tma_fill")
        n.meta.update(f.meta, iv_subs={})  # the body fill's maps and mbarriers, of the producer's iteration
    g.output(())
    name = f"producer_{sum(k.startswith('producer_') for k in trace.subgraphs)}"
    trace.subgraphs[name] = g
    return name, roots


def _hoist_setup(root: fx.Graph, init: fx.Node) -> None:
    """A general body (attention): the shared tiles and the ``MBarrierInit`` first, so that the split
    precedes what the consumers compute before their loops (Q's fragment): those registers are then not
    live across the producer's ``setmaxnreg.dec`` (ptxas spilled 80 bytes with Q loaded before it)."""
    anchor = [n for n in root.nodes if n.op == "placeholder"][-1]
    for n in [n for n in root.nodes if n.meta.get("op") is Allocate and not n.all_input_nodes] + [init]:
        anchor.append(n)
        anchor = n


def _split_point(root: fx.Graph, init: fx.Node, captured: list) -> fx.Node:
    """The last of the MBarrierInit, the allocations and the captured nodes: the split goes after it."""
    order = {n: i for i, n in enumerate(root.nodes)}
    before = [init, *captured, *(n for n in root.nodes if n.meta.get("op") is Allocate)]
    return max(before, key=order.__getitem__)


def _check_no_barrier_after(trace: Trace, split: fx.Node, subs: list[fx.Graph]) -> None:
    after, seen = [], False
    for n in trace.graph.nodes:
        after += [n] if seen else []
        seen |= n is split
    for n in after + [n for sub in subs for n in sub.nodes]:
        if n.meta.get("op") is Barrier:
            raise ConstraintError(
                n.meta.get("loc"),
                message="SchedulingConstraint(warp_specialize=True): a "
                f"workgroup barrier (%{n.name}) after the producer/consumer split would wait "
                "for the producer warpgroup, which never reaches it",
            )


def _loops(trace: Trace, init: fx.Node) -> list[fx.Node]:
    """The loops pipelined on ``init`` (one for a GEMM; attention's full and masked loops share it), in order."""
    dim = init.kwargs["dim"]
    its = [n for n in trace.graph.nodes if n.meta.get("op") is Iterate and n.kwargs["dim"] == dim]
    fills = {it: [n for n in loop_body(trace, it).nodes if n.meta.get("op") is TmaFill] for it in its}
    return [it for it in its if any(f.meta.get("mbarriers") is init for f in fills[it])]


def warp_specialize(trace: Trace, ctx: PassContext) -> None:
    cs = ctx.constraints
    if not cs.scheduling.warp_specialize:
        return
    root = trace.graph
    inits = [n for n in root.nodes if n.meta.get("op") is MBarrierInit]
    if len(inits) != 1 or not inits[0].kwargs.get("empty_arrivals"):
        raise ConstraintError(
            trace.loc,
            message="SchedulingConstraint(warp_specialize=True) needs the kernel's "
            f"TMA loops on one set of empty mbarriers at its top level ({len(inits)} sets found)",
        )
    init = inits[0]
    dim = init.kwargs["dim"]
    loops = _loops(trace, init)
    if len(loops) > 1 and cs.scheduling.persistent:
        raise ConstraintError(
            trace.loc, message="SchedulingConstraint(warp_specialize=True, persistent=True) takes one TMA loop"
        )
    if not all(chains_only(loop_body(trace, it)) for it in loops):
        _hoist_setup(root, init)
    regions, captured = [], []
    chained = sympy.Integer(0)  # the earlier loops' iterations: stages and parities run on over the loops
    for iterate in loops:
        sub = loop_body(trace, iterate)
        lo, stop = cs.loop_bounds(dim, iterate.kwargs.get("start"), iterate.kwargs.get("end"))
        body_fills = [n for n in sub.nodes if n.meta.get("op") is TmaFill]
        base = k_base(ctx, lo, stop) + chained
        name, caps = _producer_region(trace, init, body_fills, lo, stop, cs.num_stages, base)
        for f in body_fills:
            sub.erase_node(f)
        regions.append((name, sympy.sympify(lo), stop))
        captured += [c for c in caps if c not in captured]
        chained += sympy.Max(0, stop - lo)
    for n in [n for n in root.nodes if n.meta.get("op") is TmaFill and n.meta.get("mbarriers") is init]:
        root.erase_node(n)
    init.kwargs = {**init.kwargs, "fence_maps": False}
    (name, lo, stop), loc = regions[0], loops[0].meta.get("loc")
    kw = {"dim": dim, "subgraph": name, "start": lo, "stop": stop, "consumers": cs.threads}
    kw.update({"loops": tuple(regions)} if len(regions) > 1 else {})  # (one loop: subgraph, start, stop)
    kw["regs"] = register_split(cs.threads, cs.scheduling.producer_regs or PRODUCER_REGS)
    split = _split_point(root, init, captured)
    ws = op_node(root, WarpSpecialize, tuple(captured), kw, "warp_specialize", loc, after=split, mbarriers=init)
    _check_no_barrier_after(trace, ws, [loop_body(trace, it) for it in loops])
    ctx.producer_threads = WARPGROUP
