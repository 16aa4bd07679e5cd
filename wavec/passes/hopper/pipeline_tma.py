"""The TMA variant of ``pipeline_loops`` (Hopper ``cp.async.bulk.tensor`` completing on mbarriers).

Not a pass: ``pipeline_loops`` calls :func:`tma_plan` per loop and, given a plan, :func:`pipeline_tma`.
Requires (else ``tma_plan`` returns why): ``sm_90a``, a warpgroup MMA, kernel arguments staged into
128-byte-swizzled tiles of whole rows, rows of 16-byte multiples.  Guarantees: one ``TmaFill`` per
iteration ``i + D`` behind a prologue and an ``MBarrierInit``; the body waits on the stage's full mbarrier
for parity ``(i // S) % 2``; stages released by a barrier or by ``MBarrierArrive``; one
``TensorMapRequest`` per (argument, box); persistent grids count from :func:`k_base`; a general body with
empty mbarriers gets one fill, wait and release per stage group (:func:`_groups`: attention's K and V); with
warp specialization later loops share the first one's mbarriers (:func:`_chain_init`).  Full contract:
docs/hopper.md, "Module contracts".
"""

from __future__ import annotations

import dataclasses

import sympy
import torch.fx as fx

from ...errors import ConstraintError
from ...frontend.ops import MMA, Read
from ...frontend.ops_hopper import MBarrierArrive, MBarrierInit, MBarrierWait, TmaFill
from ...frontend.tracing import Trace, arg_node, capture_root, placeholders
from ...indexing import induction_symbol
from ...indexing.shared_layout import SharedLayout, SharedLayoutKind
from ...indexing.symbols import TILE_COUNT, stage_symbol
from ..coarsen_loads import run_cap
from ..context import PassContext, TensorMapRequest
from ..loop_shape import chains_only
from ..schema import loop_body, loop_dim, op_node, tile_extents
from .cluster_launch import CLUSTER_SIZE, cluster_axis, multicasts

SWIZZLE_BYTES = 128
MAX_BOX = 256  # elements per box dimension (PTX ISA, "Tensor-map")
MAX_RANK = 5  # cp.async.bulk.tensor.{1..5}d


def choose_war(stages: int, lag: int) -> str:
    """How "auto"/"tma" release stages.  Empty mbarriers prefetch one tile further (S - 1 instead of
    S - 1 - lag) but issue each fill later in the iteration (after the wgmma wait, behind a wait for
    every warp's release).  So: empty mbarriers while the barrier's prefetch distance would be below 2
    tiles, else the barrier (measurements: docs/hopper.md, "TMA")."""
    return "mbarrier" if stages - 1 - lag < 2 else "barrier"


def _node(g: fx.Graph, op: type, args: tuple, kwargs: dict, name: str, before: fx.Node, **meta) -> fx.Node:
    return op_node(g, op, args, kwargs, name, before.meta.get("loc"), before=before, **meta)


def _tile_dims(alloc: fx.Node) -> tuple:
    """(row dim, contiguous dim) of a staged tile."""
    return tuple(tile_extents(alloc))


def _why_not_pair(trace: Trace, read: fx.Node, write: fx.Node) -> str | None:
    alloc, mem = capture_root(arg_node(write, 1)), capture_root(arg_node(read, 0))
    smem = alloc.kwargs.get("smem_layout")
    if not isinstance(smem, SharedLayout) or smem.kind != SharedLayoutKind.SWIZZLE_128B:
        return f"the shared tile %{alloc.name} is not a 128-byte-swizzled wgmma operand tile"
    if mem.name not in [a.name for a in trace.args]:
        return f"%{mem.name} is not a kernel argument"
    if read.kwargs.get("dynamic"):
        return f"the read of %{mem.name} is a gather (index tensor mapping): TMA boxes need affine addresses"
    shape, tile = tuple(mem.meta["type"].shape), _tile_dims(alloc)
    if not 2 <= len(shape) <= MAX_RANK or len(tile) != 2 or tile[1] != shape[-1] or tile[0] not in shape:
        return (
            f"%{mem.name} {list(shape)} is not tiled as [rows, contiguous] (tile {list(tile)}) with at most "
            f"{MAX_RANK - 2} batch dimensions"
        )
    mapping = m if isinstance(m := read.kwargs.get("mapping"), dict) else {}
    if any(d in tile for d in mapping):
        return f"the read of %{mem.name} maps a tiled dimension ({sorted(map(str, mapping))})"
    rows, cols = tile_extents(alloc).values()
    if rows > MAX_BOX or (cols * smem.elem_bytes) % SWIZZLE_BYTES:
        return f"tile {rows}x{cols} is not at most {MAX_BOX} rows of whole {SWIZZLE_BYTES}-byte rows"
    return None


def tma_box(shape: tuple, tile: dict, elem_bytes: int, parts: int = 1) -> tuple[int, ...]:
    """The box of a tile of an argument of ``shape`` (innermost first): one swizzle span along the
    contiguous dim, the tile's rows (``1 / parts`` of them: a cluster's multicast half) along its row
    dim, 1 along every other (batch or mapped) dim."""
    (row_dim, rows), _k = tile.items()
    rows //= parts
    inner = {shape[-1]: SWIZZLE_BYTES // elem_bytes, row_dim: rows}
    return tuple(inner.get(d, 1) for d in reversed(shape))


def tma_plan(trace: Trace, ctx: PassContext, pairs: list[tuple[fx.Node, fx.Node]]) -> tuple[list | None, str]:
    """(the tensor map of each distinct (argument, tile) copied, "") when TMA can replace the copies,
    else (None, why)."""
    cs = ctx.constraints
    if not ctx.target.has_tma or cs.group_waves == 1:
        return None, f"TMA is used with Hopper wgmma kernels on sm_90a (target {ctx.target.name!r})"
    maps, seen = [], set()
    for read, write in pairs:
        why = _why_not_pair(trace, read, write)
        if why:
            return None, why
        mem, alloc = capture_root(arg_node(read, 0)), capture_root(arg_node(write, 1))
        if (mem, alloc) in seen:  # the per-thread copies of one tile: one box (or two) per stage
            continue
        seen.add((mem, alloc))
        dtype = mem.meta["type"].dtype
        last = mem.meta["type"].shape[-1]
        width = ctx.arg_cap(mem.name, run_cap(ctx, last, 16 // dtype.bytes))
        if width < 16 // dtype.bytes:  # a tensor map's row stride: a 16-byte multiple (its innermost stride 1)
            return None, f"rows of %{mem.name} ({last}) are not a multiple of 16 bytes"
        row_dim, rows = next(iter(tile_extents(alloc).items()))
        parts = CLUSTER_SIZE if multicasts(cs, row_dim) else 1
        if rows % (8 * parts):  # each half a whole number of 8-row (1024-byte) swizzle atoms
            return None, f"tile rows {rows} of %{mem.name} do not split into {parts} halves of 8-row multiples"
        box = tma_box(tuple(mem.meta["type"].shape), tile_extents(alloc), dtype.bytes, parts)
        spec = TensorMapRequest([a.name for a in trace.args].index(mem.name), dtype.name, box, SWIZZLE_BYTES)
        maps.append(spec)
    return maps, ""


def _fill(g: fx.Graph, pairs: list[tuple[fx.Node, fx.Node]], kwargs: dict, name: str, before: fx.Node, **meta):
    """A ``TmaFill`` of the (global memory, shared tile) ``pairs``."""
    return _node(g, TmaFill, tuple(x for pair in pairs for x in pair), kwargs, name, before, **meta)


def _fill_kwargs(j, stages: int, lo, stop, war: str, base=0) -> dict:
    """kwargs of the fill of iteration ``j`` (into stage ``j % S``, issued while ``j < stop``); with empty
    mbarriers, the k-th refill of a stage (``j >= lo + S``) first waits for phase k - 1 of its empty
    mbarrier (every warp retired the wgmma group that read the stage's previous fill).  ``base``: K
    iterations of earlier tiles (persistent grid): stage, parity and refill count the running iteration
    ``j - lo + base`` (``refill_index``, compared with ``refill_from`` = S)."""
    g = j - lo + base
    kw = {"stage": sympy.Mod(g, stages), "iteration": j, "stop": stop}
    if war == "mbarrier":
        kw["empty_parity"] = sympy.Mod(sympy.floor(g / stages) + 1, 2)
        kw["refill_from"] = lo + stages
        if base != 0:
            kw["refill_index"], kw["refill_from"] = g, stages
    return kw


def k_base(ctx: PassContext, lo, stop):
    """The running K-iteration count at the start of the current tile: ``$TILE_COUNT`` x iterations per
    tile on a persistent grid (every tile runs the same K loop), else 0."""
    return TILE_COUNT * (stop - lo) if ctx.constraints.scheduling.persistent else sympy.Integer(0)


def wait_parity(iv, lo, base, stages: int):
    """Parity of the full-mbarrier wait of iteration ``iv``: the k-th use of a stage, counted over the
    whole persistent loop (``base``), waits for its k-th phase."""
    return sympy.Mod(sympy.floor((iv - lo + base) / stages), 2)


def _chain_init(trace: Trace, ctx: PassContext, iterate: fx.Node, dim, lo, stop) -> tuple[fx.Node | None, sympy.Expr]:
    """Warp specialization: every loop over ``dim`` shares the first one's mbarriers (no init, and so no
    workgroup barrier, between them; the producer fills the loops one after the other).  Returns (that
    ``MBarrierInit`` or None for the first loop, the iterations of the earlier loops): stages, parities and
    refills count the running iteration over the loops."""
    if not ctx.constraints.scheduling.warp_specialize:
        return None, sympy.Integer(0)
    init = next((n for n in trace.graph.nodes if n.meta.get("op") is MBarrierInit and n.kwargs["dim"] == dim), None)
    if init is None:
        return None, sympy.Integer(0)
    earlier = init.meta["iterations"]
    init.meta["iterations"] = earlier + sympy.Max(0, stop - lo)
    return init, earlier


def pipeline_tma(
    trace: Trace,
    ctx: PassContext,
    iterate: fx.Node,
    stages: int,
    lag: int,
    pairs: list[tuple[fx.Node, fx.Node]],
    specs: list[TensorMapRequest],
    war: str,
) -> None:
    """Rewrite one loop (see the module docstring); ``specs`` from :func:`tma_plan`; ``lag`` = wgmma
    groups left in flight at the end of an iteration; ``war`` = "barrier" or "mbarrier"."""
    cs = ctx.constraints
    dim, sub = loop_dim(iterate), loop_body(trace, iterate)
    lo, stop = cs.loop_bounds(dim, iterate.kwargs.get("start"), iterate.kwargs.get("end"))
    distance = stages - 1 if war == "mbarrier" else stages - 1 - lag
    maps = []
    for spec in specs:
        if spec not in ctx.tensor_maps:
            ctx.tensor_maps.append(spec)
        maps.append(ctx.tensor_maps.index(spec))
        last = trace.args[spec.arg].type.shape[-1]
        elem = trace.args[spec.arg].type.dtype.bytes
        ctx.requirements[last] = int(sympy.ilcm(ctx.requirements.get(last, 1), 16 // elem))
        name = trace.args[spec.arg].name  # a strided variant's row pitch: a 16-byte multiple as well
        ctx.arg_runs[name] = int(sympy.ilcm(ctx.arg_runs.get(name, 1), 16 // elem))
    clustered = cluster_axis(cs) is not None
    if clustered and war != "mbarrier":
        raise ConstraintError(
            iterate.meta.get("loc"),
            message=f"SchedulingConstraint(cluster={cs.scheduling.cluster}): the loop's stages are released "
            "by a workgroup barrier (a general loop body), which cannot tell the peer workgroup",
        )
    warps = cs.threads // cs.threads_per_wave if war == "mbarrier" else 0
    warps *= CLUSTER_SIZE if clustered else 1  # both workgroups' consumers release a multicast stage
    body_pairs = list(dict.fromkeys((arg_node(r, 0), arg_node(w, 1)) for r, w in pairs))  # one per tile, in order
    groups = _groups(sub, body_pairs) if war == "mbarrier" and not chains_only(sub) else [list(range(len(body_pairs)))]
    init, chained = _chain_init(trace, ctx, iterate, dim, lo, stop)
    if init is None:
        counts = {"count": stages * len(groups), "empty_arrivals": warps, "dim": dim}
        init = _node(
            trace.graph,
            MBarrierInit,
            (),
            {**counts, **({"cluster": True} if clustered else {})},
            "mbarrier_init",
            iterate,
        )
        init.meta["iterations"] = sympy.Max(0, stop - lo)
    mapping_of = {(arg_node(r, 0), arg_node(w, 1)): r.kwargs.get("mapping") for r, w in pairs}
    base = k_base(ctx, lo, stop) + chained
    if chained != 0:  # this loop's first stage: after the earlier loops' iterations
        iterate.meta["stage_start"] = sympy.Mod(chained, stages)
    elif base != 0:
        ctx.stage_start[dim] = sympy.Mod(base, stages)
    loop = _Loop(iterate, init, stages, lag, distance, war, lo, stop, base, clustered)
    for g, members in enumerate(groups):
        group = [body_pairs[i] for i in members]
        multicast = tuple(multicasts(cs, next(iter(tile_extents(capture_root(a))))) for _g, a in group)
        meta = {"maps": tuple(maps[i] for i in members), "mbarriers": init, "multicast": multicast}
        meta["mappings"] = tuple(mapping_of[p] for p in group)  # (GQA) coordinates of held dims
        _pipeline_group(trace, loop, group, g * stages if len(groups) > 1 else 0, pairs[0][1], meta)
    for read, write in pairs:
        sub.erase_node(write)
        sub.erase_node(read)


@dataclasses.dataclass(frozen=True)
class _Loop:
    """What every stage group of one pipelined loop shares."""

    iterate: fx.Node
    init: fx.Node
    stages: int
    lag: int
    distance: int
    war: str
    lo: sympy.Expr
    stop: sympy.Expr
    base: sympy.Expr
    clustered: bool


def _groups(sub: fx.Graph, body_pairs: list) -> list[list[int]]:
    """A general body with empty mbarriers (attention): the tiles grouped by the wgmma chain that reads them
    (K by S = Q Kᵀ, V by P·V), each group its own full and empty mbarriers, so that a consumer waits for V only
    before P·V and releases K as soon as S retired (FlashAttention-3's K and V pipelines)."""
    order = {n: i for i, n in enumerate(sub.nodes)}

    def first_reader(tile: fx.Node) -> int:
        reads = [u for u in tile.users if u.meta.get("op") is Read]
        return min((order[m] for r in reads for m in r.users if m.meta.get("op") is MMA), default=len(order))

    firsts = [first_reader(tile) for _mem, tile in body_pairs]
    return [[i for i, f in enumerate(firsts) if f == key] for key in sorted(set(firsts))]


def _pipeline_group(trace: Trace, loop: _Loop, group: list, offset: int, where: fx.Node, meta: dict) -> None:
    """The fill, the prologue fills, the full wait and (empty mbarriers) the release of one stage group whose
    mbarriers start at ``offset``; with empty mbarriers ``meta["tiles"]`` on the wait and the release names
    the group's tiles (``insert_wgmma_fences`` places them around the wgmmas that read them)."""
    it, stages, war, lo, stop, base = loop.iterate, loop.stages, loop.war, loop.lo, loop.stop, loop.base
    dim, sub = loop_dim(it), loop_body(trace, it)
    iv, stage = induction_symbol(dim), stage_symbol(dim)
    bar = {"bar_offset": offset} if offset else {}
    kw = {**_fill_kwargs(iv + loop.distance, stages, lo, stop, war, base), **bar}
    kw["stage"] = sympy.Mod(stage + loop.distance, stages)  # the carried stage, not a remainder of i
    _fill(sub, group, kw, "tma_fill", where, iv_subs={iv: iv + loop.distance}, **meta)
    first = next(n for n in sub.nodes if n.op != "placeholder")
    tiles = {"tiles": tuple(a for _g, a in group)} if war == "mbarrier" else {}  # (barrier: the wait stays first)
    wait = {"stage": stage, "parity": wait_parity(iv, lo, base, stages), "war": war, **bar}
    _node(sub, MBarrierWait, (), wait, "mbarrier_wait", first, mbarriers=loop.init, **tiles)
    if war == "mbarrier":  # after the wgmma wait that retires group i - lag (insert_wgmma_fences moves it there)
        lag = loop.lag
        arrive = {"stage": sympy.Mod(stage + stages - lag, stages), "iteration": iv - lag, "first": lo, **bar}
        arrive.update({"remote": True} if loop.clustered else {})
        _node(sub, MBarrierArrive, (), arrive, "mbarrier_arrive", first, mbarriers=loop.init, **tiles)
    outer = {p: p.meta["capture_of"] for p in placeholders(sub, "capture")}
    root_pairs = [(outer[g_], outer[a]) for g_, a in group]
    for s in range(loop.distance):
        kw = {**_fill_kwargs(lo + s, stages, lo, stop, war, base), **bar}
        kw["stage"] = sympy.Mod(base + s, stages) if base != 0 else sympy.Integer(s)
        _fill(trace.graph, root_pairs, kw, f"tma_fill_prologue{s}", it, iv_subs={iv: lo + s}, **meta)
