"""Padded instruction tiles (issue #20 item 2): a wave tile smaller than an MMA instruction tile along a dim
(and dividing it) runs the whole instruction; the instruction's elements past the wave's tile are padding.

An element's place in its instruction tile is the lane-dependent part of its coordinate (the rest is the
tile's start: workgroup, wave and loop offsets; an MMA layout puts lane 0 at the tile's origin).  Along M
and N padding rows are independent of the real ones (a product's row i reads row i of A only), so reads
wrap them onto the wave's tile (``wrap``: in-bounds addresses, duplicate values) and writes skip them
(``codegen/padding.py``); along K they would add to every product, so the mma zeroes them first.
"""

from __future__ import annotations

import functools

import sympy
import torch.fx as fx

from .layout import Layout
from .symbols import LANE


def padded_dims(cs, node: fx.Node, layout: Layout | None = None) -> dict:
    """Dim -> the wave's extent, for each dim of ``node``'s layout whose instruction tile is larger than
    the wave's tile (``infer_indices.check_tiles`` admits this only for MMA layouts, whose lanes spread
    over the tile); empty for workgroup-wide values (copies are never padded)."""
    layout = layout if layout is not None else node.meta.get("layout")
    if layout is None or "workgroup" in (node.meta.get("distribute"), node.meta.get("index_scope")):
        return {}
    out = {}
    for d, seq, tile in zip(layout.dims, layout.seqs, layout.tile):
        ext = cs.wave_extent(d)
        # a staged copy's layout (spread over THREAD) covers the workgroup's tile, never a wave's
        if isinstance(ext, int) and ext < tile and LANE in seq.start.free_symbols:
            out[d] = ext
    return out


def tile_origin(layout: Layout, dim) -> sympy.Expr:
    """The first coordinate of ``layout``'s instruction tile along ``dim`` (lane 0's first element)."""
    return layout.seq(dim).start.subs(LANE, 0)


def place(layout: Layout, dim, coord) -> sympy.Expr:
    """Where in its instruction tile along ``dim`` the coordinate ``coord`` of ``layout`` lies."""
    return sympy.expand(sympy.sympify(coord) - tile_origin(layout, dim))


class Wrap(sympy.Function):
    """``a mod b`` of a non-negative index expression, kept opaque (lowered to ``arith.remui``): sympy's
    ``Mod`` rewrites nested lane terms wrongly (``Mod(2*Mod(l, 4), 8)`` to ``2*Mod(Mod(l, 4)**2, 4)``)."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        return None


@functools.cache
def wrapped_place(where: sympy.Expr, ext: int, lanes: int) -> sympy.Expr:
    """``where mod ext`` for a place that depends on the lane only: where every lane's place falls in one
    stretch [j * ext, (j + 1) * ext) (an mma fragment's second half along K), the place less j * ext."""
    f = sympy.lambdify(LANE, where, "math")
    stretches = {int(f(lane)) // ext for lane in range(lanes)}
    if len(stretches) == 1:
        return sympy.expand(where - ext * stretches.pop())
    return Wrap(where, ext)


def wrap(coords: dict, pads: dict, layout: Layout, lanes: int) -> dict:
    """``coords`` (of elements of ``layout``) with each padded dim's place taken modulo the wave's extent:
    padding addresses the wave's own tile."""
    out = dict(coords)
    for d, ext in pads.items():
        if d in out and isinstance(out[d], (int, sympy.Expr)):  # index values (gathered dims): not padded
            out[d] = tile_origin(layout, d) + wrapped_place(place(layout, d, out[d]), ext, lanes)
    return out
