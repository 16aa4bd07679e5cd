"""Padded instruction tiles in codegen (``indexing/padding.py``): a store skips the padding of its value
(``pad_guard``), an mma zeroes its operands' padding along K (``zero_k_padding``), a reduction along a
padded dim replaces the padding by its identity (``fill_padding``); reads wrap their addresses onto the
wave's tile (``padding.wrap``, at the read rules).  Nothing here is emitted for a
kernel whose wave tiles are whole instruction tiles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, vector

from ..indexing import Layout
from ..indexing.padding import padded_dims, place
from .lowering import splat, vec_type

if TYPE_CHECKING:
    from .lowering import FunctionBuilder


def _inside(fb: FunctionBuilder, place: sympy.Expr, ext: int) -> ir.Value:
    """``place < ext`` (cached and hoisted: it depends on the lane only)."""
    return fb.derived(
        ("pad", place, ext), (place,), lambda: arith.cmpi(arith.CmpIPredicate.ult, fb.index(place), fb.index(ext))
    )


def pad_guard(fb: FunctionBuilder, node: fx.Node, coords: dict) -> ir.Value | None:
    """True where the run at ``coords`` lies in the wave's tile along every padded dim of ``node`` (None:
    nothing padded).  A run never straddles the tile's end (``check_tiles``: runs divide the extent)."""
    cond = None
    layout: Layout = node.meta["layout"]
    for d, ext in padded_dims(fb.cs, node).items():
        c = _inside(fb, place(layout, d, coords[d]), ext)
        cond = c if cond is None else arith.andi(cond, c)
    return cond


def keep_mask(fb: FunctionBuilder, node: fx.Node, dim) -> ir.Value | None:
    """The i1 vector, in ``node``'s register order, true at the elements inside the wave's tile along
    ``dim`` (None when ``dim`` is not padded); built once per kernel: it depends on the lane only."""
    ext = padded_dims(fb.cs, node).get(dim)
    if ext is None:
        return None
    layout: Layout = node.meta["layout"]
    first = place(layout, dim, layout.seq(dim).start)
    offsets = tuple(pos[dim] for pos in layout.positions())
    i1 = ir.IntegerType.get_signless(1)

    def build() -> ir.Value:
        # place + offset < ext, i.e. place < ext - offset (never when the offset alone passes the tile)
        flags = [_inside(fb, first, ext - off) if off < ext else arith.constant(i1, 0) for off in offsets]
        return vector.from_elements(ir.VectorType.get([len(flags)], i1), flags)

    return fb.derived(("pad_keep", first, ext, offsets), (first,), build)


def fill_padding(fb: FunctionBuilder, node: fx.Node, dim, value: ir.Value, dtype, fill) -> ir.Value:
    """``value`` (``node``'s registers, of ``dtype``) with its padding along ``dim`` replaced by ``fill``."""
    keep = keep_mask(fb, node, dim)
    if keep is None:
        return value
    return arith.select(keep, value, splat(vec_type(node.meta["layout"].size, dtype), dtype, fill))


def zero_k_padding(fb: FunctionBuilder, operand: fx.Node, k_dim, value: ir.Value) -> ir.Value:
    """An mma operand with its elements past the wave's tile of K set to zero (``value`` unchanged when K is
    not padded): they would otherwise add products of whatever the registers hold to every result."""
    return fill_padding(fb, operand, k_dim, value, operand.meta["type"].dtype, 0)
