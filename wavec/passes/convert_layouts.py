"""convert_layouts: explicit layout conversions where an MMA result feeds another MMA as an operand.

Requires: a typed trace (before ``infer_indices``).  Guarantees: an A or B operand computed from an
``mma`` result reads it through a ``convert_layout``, so inference anchors both sides independently;
``kwargs["via"]`` is ``"registers"`` when every lane already holds what it needs (``m16n8k16``,
``wgmma``; a transposed MFMA accumulator), else ``"shared"`` (AMD MFMA, a transposed NVIDIA accumulator),
judged from the producing mma's accumulator in the operand's dim order.  Details: docs/design.md,
"Module contracts".
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import sympy
import torch.fx as fx

from ..frontend.ops import MMA, ConvertLayout
from ..frontend.tracing import Trace
from ..indexing import LANE, Layout, mma_layout
from .context import PassContext
from .schema import op_node

# ops whose result holds its operand's elements in one layout (their record's index flow)
_PASS_THROUGH = ("elementwise", "permute")


def _from_accumulator(node, memo: dict) -> fx.Node | None:
    """The ``mma`` whose result ``node`` is, or is computed from elementwise or by permutes (same dims, same
    graph); None if there is none."""
    if not isinstance(node, fx.Node):
        return None
    if node not in memo:
        memo[node] = None  # cycles cannot happen in a graph, but keep the walk finite
        op = node.meta.get("op")
        if op is MMA:
            memo[node] = node
        elif getattr(op, "index_flow", None) in _PASS_THROUGH:
            dims = set(node.meta["type"].dims)
            sources = (
                _from_accumulator(a, memo)
                for a in node.args
                if isinstance(a, fx.Node) and a.graph is node.graph and set(a.meta["type"].dims) == dims
            )
            memo[node] = next((s for s in sources if s is not None), None)
    return memo[node]


@functools.lru_cache(maxsize=1024)
def _per_lane(expr: sympy.Expr, threads: int) -> tuple[int, ...]:
    """``expr`` (a function of the lane only) at every lane, by one ``lambdify``: sympy substitution per
    lane and position cost ~20 s on attention's 32 wgmma conversions."""
    f = sympy.lambdify(LANE, expr, "math")
    return tuple(int(f(lane)) for lane in range(threads))


_KEY_BITS = 24  # a coordinate packed per dim into one int key; coordinates are far below 2**23 in magnitude


def _lane_keys(layout: Layout, threads: int) -> np.ndarray:
    """[lane, register position] -> the element's coordinates packed into one int64 key.  A start is a
    lane expression plus a constant (the tile's offset): the lane part is evaluated once per distinct
    expression for all lanes (``_per_lane``), the rest is integer array arithmetic."""
    parts = [sympy.sympify(layout.seq(d).start).as_coeff_Add() for d in layout.dims]
    offsets = np.array([[off[d] for d in layout.dims] for off in layout.positions()], dtype=np.int64)
    keys = np.zeros((threads, len(offsets)), dtype=np.int64)
    for i, (const, rest) in enumerate(parts):
        lane = np.array(_per_lane(rest, threads), dtype=np.int64)
        coord = int(const) + lane[:, None] + offsets[None, :, i]
        keys = (keys << _KEY_BITS) + coord + (1 << (_KEY_BITS - 1))
    return keys


def source_tiles(src: Layout, dst: Layout) -> list[dict]:
    """Offsets (per dim) of the source instruction tiles that cover one destination tile."""
    ranges = []
    for d in dst.dims:
        s, t = src.tile_of(d), dst.tile_of(d)
        ranges.append([i * s for i in range(max(1, t // s))])
    return [dict(zip(dst.dims, offs)) for offs in itertools.product(*ranges)]


@functools.lru_cache(maxsize=256)
def register_mapping(src: Layout, dst: Layout, threads: int) -> tuple[tuple[int, int], ...] | None:
    """For each destination position, (source tile, position) holding the same element in the same lane —
    one mapping valid for every lane — or None when the values must move between lanes.  Memoised: the
    pass and codegen ask for the same pairs."""
    if any(dst.tile_of(d) % src.tile_of(d) and src.tile_of(d) % dst.tile_of(d) for d in dst.dims):
        return None  # a destination tile is neither whole source tiles nor inside one
    tiles = source_tiles(src, dst)
    zero = {s: 0 for lay in (src, dst) for q in lay.seqs for s in q.start.free_symbols if s != LANE}
    src, dst = src.subs(zero), dst.subs(zero)
    per_tile = [_lane_keys(src.offset(off), threads) for off in tiles]
    src_keys = np.concatenate(per_tile, axis=1).tolist()
    dst_keys = _lane_keys(dst, threads).tolist()
    where = [(ti, q) for ti, keys in enumerate(per_tile) for q in range(keys.shape[1])][::-1]
    mapping = None
    for lane in range(threads):
        have = dict(zip(src_keys[lane][::-1], where))  # reversed: the first (tile, position) of a key wins
        try:
            lane_map = tuple(map(have.__getitem__, dst_keys[lane]))
        except KeyError:
            return None
        if mapping is None:
            mapping = lane_map
        elif lane_map != mapping:
            return None
    return mapping


def _choose(ctx: PassContext, mma: fx.Node, source: fx.Node, dims: tuple[sympy.Symbol, sympy.Symbol], role: str) -> str:
    """``registers`` when every destination tile (each sub-tile of a larger source tile: the wgmma
    accumulator is 64 x N, its register-A tiles 64 x 16) has a lane-independent register mapping.  The
    source is ``source``'s accumulator seen in the operand's dim order: a permuted accumulator (attention
    backward's ``P^T``) holds the transpose of what the operand needs, which no register mapping gives."""
    cs = ctx.constraints
    m, n, _k = MMA.dims(source)
    src = mma_layout(ctx.mma, "c", m, n, n=ctx.instruction_n(n)).permute(dims)
    dst = mma_layout(
        ctx.mma, role, *dims, n=ctx.instruction_n(MMA.dims(mma)[1]), a_in_registers=bool(mma.meta.get("a_in_registers"))
    )
    subs = [range(0, max(1, src.tile_of(d) // dst.tile_of(d))) for d in dims]
    for idx in itertools.product(*subs):
        moved = dst.offset({d: i * dst.tile_of(d) for d, i in zip(dims, idx)})
        if register_mapping(src, moved, cs.lanes) is None:
            return "shared"
    return "registers"


def convert_layouts(trace: Trace, ctx: PassContext) -> None:
    memo: dict = {}
    count = 0
    for g in trace.graphs():
        for mma in [n for n in g.nodes if n.meta.get("op") is MMA]:
            for pos, role in ((0, "a"), (1, "b")):
                x = mma.args[pos]
                source = _from_accumulator(x, memo)
                if source is None or ctx.constraints.mma_type is None:
                    continue
                dims = x.meta["type"].dims
                via = {"via": _choose(ctx, mma, source, dims, role)}
                loc, t = mma.meta.get("loc"), x.meta["type"]
                conv = op_node(g, ConvertLayout, (x,), via, "convert_layout", loc, before=mma, type=t, convert_id=count)
                count += 1
                args = list(mma.args)
                args[pos] = conv
                mma.args = tuple(args)


def wave_origin(ctx: PassContext, graph: fx.Graph, dims) -> dict:
    """The coordinates of the current wave's tile origin (what shared conversions index relative to)."""
    return {d: ctx.constraints.base_offset(d, ctx.in_loop(graph, d)) for d in dims}
