"""infer_indices: give every register value a thread ``Layout`` (DESIGN §3).

Requires: a typed trace.  Guarantees: every register value has ``meta["layout"]`` (its first instruction
tile's, starts including workgroup, wave and loop offsets) and ``meta["layout_prio"]``.  Anchors by
priority: mma operands (3), staging copies and reduction inputs (2), written values (1), defaults (0),
each seeded in program order and propagated to a fixpoint; equal priorities with different layouts raise
``IndexConflictError`` naming both source lines.  Every dim's wave tile (workgroup tile, for workgroup-wide
copies) is whole instruction tiles of the layout, or an MMA layout's tile padded (a wave tile dividing the
instruction's, ``indexing/padding.py``), else a ``ConstraintError`` at the line of the op that fixed the
layout, naming the constraint and symbols that made the tile (``check_tiles``).
"""

from __future__ import annotations

import math
from typing import TypeGuard, cast

import sympy
import torch.fx as fx

from ..errors import ConstraintError, DTypeError, IndexConflictError, SourceLoc
from ..frontend.constraints import defined_at
from ..frontend.mapping import index_operands
from ..frontend.ops import MMA, PRIO_DEFAULT, PRIO_HARDWARE, GetResult
from ..frontend.ops_reduce import MAX_TOPK, TopKMerge
from ..frontend.tracing import Trace, arg_node, arg_nodes, capture_root, placeholders
from ..indexing import LANE, THREAD, IndexSeq, Layout, mma_layout
from ..indexing.shared_layout import core_copy_layout
from .context import PassContext
from .schema import loop_body

ACCESS_BYTES = 16


def _dims(node: fx.Node) -> tuple:
    return node.meta["type"].dims


def _is_register(node: object) -> TypeGuard[fx.Node]:
    t = node.meta.get("type") if isinstance(node, fx.Node) else None
    return t is not None and t.address_space is None


def _base(ctx: PassContext, graph, dims) -> dict:
    return {d: ctx.constraints.base_offset(d, ctx.in_loop(graph, d)) for d in dims}


def default_layout(ctx: PassContext, graph, dims: tuple, loc: SourceLoc | None = None) -> Layout:
    """Lanes spread over ``vector_shapes`` from the fastest dimension (not over ``per_thread`` dims, which
    each thread holds whole); contiguous runs per thread.  A value
    of fewer elements than the wave's lanes is replicated: the lanes past its elements wrap around and hold
    copies (``codegen/replicas.py`` lets one of them store); a wave tile smaller than ``vector_shapes``
    (and dividing it) is its own instruction tile, replicated the same way.  ``loc``: the kernel line of
    the value that needs it (errors point there and name the HardwareConstraint)."""
    cs = ctx.constraints
    hw = f"HardwareConstraint{defined_at(cs.hardware)}"
    remaining, lane_stride, seqs, tiles = cs.threads_per_wave, 1, {}, {}
    for d in reversed(dims):
        if d not in cs.vector_shapes:
            raise ConstraintError(
                loc,
                message=f"no layout anchors dimension {d} (no mma or copy decides how lanes hold it): give "
                f"{hw} vector_shapes={{{d}: ...}}",
            )
        v = cs.vector_shapes[d]
        extent = cs.wave_extent(d)
        if isinstance(extent, int) and 0 < extent < v and v % extent == 0:
            v = extent  # a wave tile smaller than the vector shape: the tile itself, its lanes replicated
        lanes = 1 if d in cs.hardware.per_thread else min(remaining, v)
        if v % lanes or remaining % lanes:
            raise ConstraintError(
                loc, message=f"vector_shapes[{d}] = {v} of {hw} does not split over the {remaining} lanes left"
            )
        ept = v // lanes
        coord = sympy.Mod(sympy.floor(LANE / lane_stride), lanes) if lanes > 1 else sympy.Integer(0)
        seqs[d] = IndexSeq(coord * ept, ((ept, 1),))
        tiles[d] = v
        remaining //= lanes
        lane_stride *= lanes
    layout = Layout.make(dims, [seqs[d] for d in dims], [tiles[d] for d in dims])
    return layout.offset(_base(ctx, graph, dims))


def copy_layout(ctx: PassContext, graph, dims: tuple, elem_bytes: int, read: fx.Node | None = None) -> Layout:
    """Every thread of the workgroup moves one run along the last dim per instruction tile; rows of the
    workgroup tile are spread over the threads (coalesced: consecutive threads, consecutive runs).  Runs
    are 16 bytes, or shorter when the tile has fewer 16-byte runs than the workgroup has threads — no
    thread may duplicate another's copy (two waves storing one shared address is a race).  ``read``: the
    staging read (errors point at its line and name its memory and the constraints that tile it)."""
    cs = ctx.constraints
    extents = [ctx.extent(d) for d in dims]
    last, total = extents[-1], math.prod(extents)
    loc = read.meta.get("loc") if read is not None else None
    tile = f"the {'x'.join(map(str, extents))} tile{_of_memory(read)}"
    if total < cs.threads:
        raise ConstraintError(
            loc,
            message=f"{'; '.join(cs.explain(d, per_wave=False) for d in dims)}: {tile} has fewer elements "
            f"than the {cs.threads} threads that copy it; use a larger tile or fewer waves",
        )
    ept = max(1, min(ACCESS_BYTES // elem_bytes, last))
    while ept > 1 and (total // ept < cs.threads or last % ept):
        ept //= 2
    per_row = last // ept
    lanes_last = min(per_row, cs.threads)
    uneven = bool(cs.threads % per_row and per_row % cs.threads)
    if uneven:  # a run count that does not divide the threads (head dim 80: 10 runs): the most threads
        lanes_last = math.gcd(per_row, cs.threads)  # dividing both share a row, each every lanes_last-th run
    rows = cs.threads // lanes_last
    seqs, tiles, stride = [], [], lanes_last
    for ext in extents[:-1]:
        n = min(rows, ext)
        seqs.append(IndexSeq(sympy.Mod(sympy.floor(THREAD / stride), n) if n > 1 else 0))
        tiles.append(n)
        stride *= n
    # ... only where the threads' rows tile the rows exactly (no thread repeats another's copy)
    if uneven and (math.prod(tiles) != rows or any(e % n for e, n in zip(extents, tiles))):
        raise ConstraintError(
            loc,
            message=f"{cs.explain(dims[-1], per_wave=False)}: {cs.threads} threads cannot split rows of {per_row} "
            f"runs of {ept} elements of {tile} evenly; make the tile of {dims[-1]} a power-of-two number of runs",
        )
    seqs.append(IndexSeq(sympy.Mod(THREAD, lanes_last) * ept, ((ept, 1),)))
    tiles.append(lanes_last * ept)
    base = {d: cs.base_offset(d, ctx.in_loop(graph, d), per_wave=False) for d in dims}
    return Layout.make(dims, seqs, tiles).offset(base)


def _of_memory(read: fx.Node | None) -> str:
    """`` of 'a'``: the memory argument a staging read copies from."""
    if read is None or not isinstance(read.args[0], fx.Node):
        return ""
    return f" of {capture_root(read.args[0]).name!r}"


def _shared_layout_copy(ctx: PassContext, graph, read: fx.Node) -> Layout:
    """The copy distribution a shared tile's layout asks for (``meta["copy_layout"]``, set by
    ``layout_wgmma_operands``): for core-matrix tiles, conflict-free 16-byte stores (``core_copy_layout``)."""
    cs, dims = ctx.constraints, _dims(read)
    tile = (ctx.extent(dims[0]), ctx.extent(dims[1]))  # a wgmma operand tile: rank 2
    layout = core_copy_layout(dims, tile, cs.threads, read.meta["type"].dtype.bytes)
    if isinstance(layout, str):
        raise ConstraintError(
            read.meta.get("loc"), message=f"copy of the {'x'.join(map(str, tile))} operand tile: {layout}"
        )
    return layout.offset({d: cs.base_offset(d, ctx.in_loop(graph, d), per_wave=False) for d in dims})


class _Solver:
    def __init__(self, trace: Trace, ctx: PassContext) -> None:
        self.trace, self.ctx = trace, ctx
        self.state: dict[fx.Node, tuple[Layout, int, fx.Node]] = {}
        self.eq: list[tuple[fx.Node, fx.Node]] = []
        self.restrict: list[tuple[fx.Node, fx.Node]] = []
        self.perm: list[tuple[fx.Node, fx.Node]] = []  # (permute, its operand): one layout seen in two orders
        self.topk: list[tuple[fx.Node, fx.Node]] = []  # (operand, topk): the result from the operand only
        self.graph_of: dict[fx.Node, fx.Graph] = {}

    def collect(self) -> None:
        for g in self.trace.graphs():
            for n in g.nodes:
                self.graph_of[n] = g
                flow = getattr(n.meta.get("op"), "index_flow", None)
                if flow is not None:
                    FLOWS[flow](self, n)

    def offer(self, node, layout: Layout, prio: int, origin) -> bool:
        cur = self.state.get(node)
        if cur is not None:
            if prio < cur[1]:
                return False
            if prio == cur[1]:
                if cur[0].equals(layout):
                    return False
                raise IndexConflictError(
                    origin.meta.get("loc"),
                    what=f"%{node.name}",
                    first_loc=cur[2].meta.get("loc"),
                    first=f"%{cur[2].name} wants {cur[0]}",
                    second_loc=origin.meta.get("loc"),
                    second=f"%{origin.name} wants {layout}",
                )
        self.state[node] = (layout, prio, origin)
        return True

    def propagate(self) -> None:
        changed = True
        while changed:
            changed = False
            for edges, permuted in ((self.eq, False), (self.perm, True)):
                for a, b in edges:
                    for x, y in ((a, b), (b, a)):
                        if x in self.state:
                            lay, prio, origin = self.state[x]
                            changed |= self.offer(y, lay.permute(_dims(y)) if permuted else lay, prio, origin)
            for big, small in self.restrict:
                if big in self.state:
                    lay, prio, origin = self.state[big]
                    changed |= self.offer(small, lay.restrict(_dims(small)).permute(_dims(small)), prio, origin)
            for x, n in self.topk:
                if x in self.state:
                    lay, prio, origin = self.state[x]
                    changed |= self.offer(n, topk_layout(self.ctx, self.graph_of[n], n, lay), prio, origin)

    def seed_anchors(self) -> None:
        """Unconditional anchors (hardware layouts, copy distributions) first, propagated together; then
        the anchors that only claim a value nothing has claimed yet, by descending priority, in program
        order, propagating after each."""
        for n in self.graph_of:  # rank-0 values (scalar arguments) hold one element in every lane
            if _is_register(n) and not n.meta["type"].shape:
                self.offer(n, Layout.make((), (), ()), PRIO_HARDWARE, n)
        anchored = [(n, op) for n in self.graph_of if (op := n.meta.get("op")) is not None and op.anchor]
        for n, op in anchored:
            if not ANCHORS[op.anchor][1]:
                ANCHORS[op.anchor][0](self, n, op.anchor_priority)
        self.propagate()
        when_free = [(n, op) for n, op in anchored if ANCHORS[op.anchor][1]]
        for prio in sorted({op.anchor_priority for _, op in when_free}, reverse=True):
            for n, op in when_free:
                if op.anchor_priority == prio and ANCHORS[op.anchor][0](self, n, prio):
                    self.propagate()

    def seed_defaults(self) -> None:
        for n, g in self.graph_of.items():
            if _is_register(n) and n not in self.state:
                self.offer(n, default_layout(self.ctx, g, _dims(n), n.meta.get("loc")), PRIO_DEFAULT, n)
                self.propagate()


# ----- index flow through an op (``Op.index_flow``): edges of the propagation -----


def _flow_elementwise(s: _Solver, n: fx.Node) -> None:
    for a in n.args:
        if _is_register(a):
            (s.eq if set(_dims(a)) == set(_dims(n)) else s.restrict).append((n, a))


def _flow_loop(s: _Solver, n: fx.Node) -> None:
    """Init, iter_arg placeholder, yielded value and result of each carried value share a layout; a
    captured register value and its placeholder too."""
    sub = loop_body(s.trace, n)
    out = arg_nodes(next(x for x in sub.nodes if x.op == "output"), 0)
    results = sorted((u for u in n.users if u.meta.get("op") is GetResult), key=lambda u: cast(int, u.kwargs["index"]))
    for init, ph, o, r in zip(arg_nodes(n, 0), placeholders(sub, "iter_arg"), out, results):
        s.eq += [(init, ph), (ph, o), (o, r)]
    s.eq += [(p.meta["capture_of"], p) for p in placeholders(sub, "capture") if _is_register(p)]


def _flow_indexed_access(s: _Solver, n: fx.Node) -> None:
    """Each index value of a dynamically mapped access takes the access's layout restricted to its dims
    (a row index per row it addresses): from the read's result, or the written value."""
    ref = n if _is_register(n) else arg_node(n, 0)
    for idx in index_operands(n).values():
        s.restrict.append((ref, idx))


def _flow_region(s: _Solver, n: fx.Node) -> None:
    """A branch's captured register values and their placeholders share a layout (the condition keeps
    its own: codegen takes the thread's one element)."""
    sub = loop_body(s.trace, n)
    s.eq += [(p.meta["capture_of"], p) for p in placeholders(sub, "capture") if _is_register(p)]


def _flow_atomic(s: _Solver, n: fx.Node) -> None:
    """An atomic's old values take the layout of the values it combines (and its index values theirs)."""
    _flow_indexed_access(s, n)
    s.eq.append((n, arg_node(n, 0)))


def topk_layout(ctx: PassContext, graph, n: fx.Node, lay: Layout) -> Layout:
    """A ``wc.topk`` result: the operand's layout with ``dim`` replaced by ``k_dim`` in place, every thread
    holding all k winners of its rows (the lanes and waves along ``dim`` hold copies), k fastest."""
    dim, k_dim = n.kwargs["dim"], n.kwargs["k_dim"]
    k = ctx.extent(k_dim)  # _flow_topk checked it
    keep = lay.restrict([d for d in lay.dims if d != dim])
    kseq = IndexSeq(_base(ctx, graph, (k_dim,))[k_dim], ((k, 1),))
    dims = tuple(k_dim if d == dim else d for d in lay.dims)
    seqs = [kseq if d == k_dim else keep.seq(d) for d in dims]
    tiles = [k if d == k_dim else keep.tile_of(d) for d in dims]
    return Layout.make(dims, seqs, tiles, keep.order + (((k_dim, 0),) if k > 1 else ()))


def _flow_topk(s: _Solver, n: fx.Node) -> None:
    """The result's layout follows the operand's (not back: the operand's lanes along dim are its own);
    k is checked here, where the constraints are resolved."""
    dim, k_dim = n.kwargs["dim"], n.kwargs["k_dim"]
    cs = s.ctx.constraints
    k, row = cs.workgroup_extent(k_dim), cs.workgroup_extent(dim)
    if k is None or k_dim in cs.wg_axis or k_dim in cs.wave_tile:
        raise ConstraintError(
            n.meta.get("loc"),
            message=f"wc.topk: the k dimension {k_dim} needs WorkgroupConstraint({k_dim}, {k_dim}, None) "
            f"with {k_dim} bound to k in subs",
        )
    # a tile's winners that only meet a carried top-k (``carry=``) may be fewer than k: the merge drops
    # the missing ones (minimum keys)
    merged = all(u.meta.get("op") is TopKMerge for u in n.users)
    if k > MAX_TOPK or (row is not None and k > row and not merged):
        raise ConstraintError(
            n.meta.get("loc"),
            message=f"wc.topk: k = {k_dim} = {k} must be at most {MAX_TOPK} and at most the workgroup's tile "
            f"of {dim} ({row}); a row walked in loop tiles takes carry=(values, indices)",
        )
    s.topk.append((arg_node(n, 0), n))


FLOWS = {
    "elementwise": _flow_elementwise,
    "broadcast": lambda s, n: s.restrict.append((n, n.args[0])),
    "permute": lambda s, n: s.perm.append((n, n.args[0])),
    "reduce": lambda s, n: s.restrict.append((n.args[0], n)),
    "loop": _flow_loop,
    "indexed_access": _flow_indexed_access,
    "region": _flow_region,
    "atomic": _flow_atomic,
    "topk": _flow_topk,
}


# ----- anchors (``Op.anchor``): each seeds layouts at the op's priority; True when it seeded -----


def _anchor_mma_operands(s: _Solver, n: fx.Node, prio: int) -> bool:
    mma_type = s.ctx.constraints.mma_type
    if mma_type is None:
        raise ConstraintError(n.meta.get("loc"), message="wc.mma needs HardwareConstraint(mma_type=...)")
    a, b, acc = (arg_node(n, i) for i in range(3))
    spec = mma_type.spec
    in_dt, acc_dt = a.meta["type"].dtype, acc.meta["type"].dtype
    if in_dt.name != spec.in_dtype or acc_dt.name != spec.acc_dtype:
        raise DTypeError(
            n.meta.get("loc"),
            op="mma",
            message=f"HardwareConstraint(mma_type={mma_type.name}){defined_at(s.ctx.constraints.hardware)} takes "
            f"{spec.in_dtype} operands and a {spec.acc_dtype} accumulator, got {in_dt} and {acc_dt}",
        )
    m, nn, k = MMA.dims(n)
    inst_n = s.ctx.instruction_n(nn)
    regs_a = bool(n.meta.get("a_in_registers"))  # wgmma register-A form (layout_wgmma_operands)
    for node, role, dims in ((a, "a", (m, k)), (b, "b", (nn, k)), (acc, "c", (m, nn)), (n, "c", (m, nn))):
        lay = mma_layout(mma_type, role, *dims, n=inst_n, a_in_registers=regs_a)
        s.offer(node, lay.offset(_base(s.ctx, s.graph_of[node], dims)), prio, n)
        node.meta.setdefault("mma_role", role)
    return True


def _anchor_copy_distribution(s: _Solver, n: fx.Node, prio: int) -> bool:
    """A read that stages a tile for the whole workgroup (``meta["distribute"]``) takes the copy layout."""
    if n.meta.get("distribute") != "workgroup":
        return False
    g = s.graph_of[n]
    layout = (
        _shared_layout_copy(s.ctx, g, n)
        if n.meta.get("copy_layout") is not None
        else copy_layout(s.ctx, g, _dims(n), n.meta["type"].dtype.bytes, n)
    )
    return s.offer(n, layout, prio, n)


def _anchor_operand_default(s: _Solver, n: fx.Node, prio: int) -> bool:
    """The value operand of a reduction (its strategy: lanes along the reduced dim) or of a write."""
    x = arg_node(n, 0)
    if x in s.state:
        return False
    s.offer(x, default_layout(s.ctx, s.graph_of[x], _dims(x), n.meta.get("loc")), prio, n)
    return True


# name -> (strategy, whether it only claims values nothing anchored yet)
ANCHORS = {
    "mma_operands": (_anchor_mma_operands, False),
    "copy_distribution": (_anchor_copy_distribution, False),
    "reduction_input": (_anchor_operand_default, True),
    "written_value": (_anchor_operand_default, True),
}


def _instruction(ctx: PassContext, origin: fx.Node, dim, tile: int) -> str:
    """What fixed a layout's instruction tile of ``dim``, in the author's terms."""
    cs = ctx.constraints
    if origin.meta.get("op") is MMA:
        m, n, k = MMA.dims(origin)
        what = {m: "rows", n: "columns", k: f"{k} elements"}.get(dim, f"{dim} elements")
        return f"the {tile} {what} of one {ctx.mma.name} mma instruction"
    if origin.meta.get("distribute") == "workgroup":
        return f"the {tile} elements of {dim} that the {cs.threads} threads copy at once"
    if cs.vector_shapes.get(dim) == tile:
        return f"vector_shapes[{dim}] = {tile} of HardwareConstraint{defined_at(cs.hardware)}"
    return f"the instruction tile {tile} of {dim} (%{origin.name})"


def check_tiles(ctx: PassContext, graph: fx.Graph, node: fx.Node, layout: Layout, origin: fx.Node) -> None:
    """Each dim's wave tile (workgroup tile, for a workgroup-wide copy) is whole instruction tiles of
    ``layout``, else a ``ConstraintError`` at the line of the op that fixed the layout, naming the
    constraint and symbols that made the tile (``expand`` steps through these tiles)."""
    cs = ctx.constraints
    per_wave = "workgroup" not in (node.meta.get("distribute"), node.meta.get("index_scope"))
    for d, tile in zip(layout.dims, layout.tile):
        extent = cs.wave_extent(d) if per_wave else cs.workgroup_extent(d)
        if extent is None or not extent % tile:
            continue
        why = _unpaddable(ctx, node, layout, origin, d, extent) if per_wave else ""
        if why is not None:
            raise ConstraintError(
                origin.meta.get("loc") or node.meta.get("loc"),
                message=f"{cs.explain(d, per_wave)}, not a multiple of {_instruction(ctx, origin, d, tile)}{why}",
            )


def _at(node: fx.Node) -> str:
    """`` at file:line`` of a node's kernel source line ("" when it has none)."""
    loc = node.meta.get("loc")
    return f" at {loc.filename}:{loc.line}" if loc is not None else ""


def _unpaddable(ctx: PassContext, node: fx.Node, layout: Layout, origin: fx.Node, dim, extent: int) -> str | None:
    """None when an MMA instruction tile may be padded to a wave tile of ``extent`` along ``dim``
    (``indexing/padding.py``), else why not ("" for layouts that are not an MMA's: they are never padded)."""
    if origin.meta.get("op") is not MMA:
        return ""
    tile = layout.tile_of(dim)
    if tile % extent:
        return " nor a divisor of it (a wave tile that divides the instruction's is padded to it)"
    if ctx.mma.spec.group_waves > 1:
        return " (warpgroup MMAs read their operands from shared memory: their tiles cannot be padded)"
    runs = [c for c, stride in layout.seq(dim).levels if stride == 1]
    if any(extent % c for c in runs):
        return f" (its runs of {max(runs)} contiguous elements would straddle the tile's end)"
    for user in node.users:
        op = user.meta.get("op")
        # (a conversion through shared memory would store padding past the wave's slice of its buffer)
        shared = op is not None and op.expansion == "regroup" and user.kwargs["via"] != "registers"
        if op is not None and (op.index_flow == "atomic" or shared):
            via = " through shared memory" * shared
            return f" (padding cannot flow into %{user.name}{_at(user)}, a {op.name}{via})"
        # (a reduction fills the padding with its identity: ``codegen/reductions.py``)
        if op is not None and op.index_flow in ("topk", "elementwise") and user.kwargs.get("dim") == dim:
            return f" (%{user.name}{_at(user)} combines elements along {dim}: padding would join them)"
    return None


def infer_indices(trace: Trace, ctx: PassContext) -> None:
    solver = _Solver(trace, ctx)
    solver.collect()
    solver.seed_anchors()
    solver.seed_defaults()
    # hardware layouts first: a tile that misses the mma instruction is the root cause of any copy misfit
    for node, (layout, _prio, origin) in sorted(solver.state.items(), key=lambda kv: -kv[1][1]):
        check_tiles(ctx, solver.graph_of[node], node, layout, origin)
    for node, (layout, prio, _origin) in solver.state.items():
        node.meta["layout"] = layout
        node.meta["layout_prio"] = prio
