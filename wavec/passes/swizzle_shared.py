"""swizzle_shared: lay out shared-memory tiles so the consumers' accesses are bank-conflict free.

Requires: ``coarsen_loads`` and ``promote_to_shared``.  Guarantees: every ``allocate`` has
``kwargs["pad"]``; tiles with a ``smem_layout`` keep it (pad 0); an ``ldmatrix``-read tile filled by
16-byte stores gets an XOR swizzle (``operand_swizzle``) where its rows allow, other tiles rows padded by
16 bytes.  Bank arithmetic and measurements: docs/design.md, "Module contracts".
"""

from __future__ import annotations

import torch.fx as fx

from ..frontend.mapping import memory_operand
from ..frontend.ops import Allocate, Read, Write
from ..frontend.tracing import Trace, capture_root
from ..indexing.shared_layout import CORE_BYTES, CORE_ROWS, SWIZZLE_NAMES, SharedLayout
from .context import PassContext

BANK_GROUP_BYTES = 16


def swizzle_shared(trace: Trace, ctx: PassContext) -> None:
    accesses = _accesses_by_tile(trace)
    for g in trace.graphs():
        for node in g.nodes:
            if node.meta.get("op") is not Allocate or node.kwargs.get("smem_layout") is not None:
                continue  # tiles with a layout of their own (wgmma operands) are laid out already
            if node.kwargs.get("user"):
                continue  # a wc.allocate buffer keeps the dense layout its accesses index
            dtype = node.meta["type"].dtype
            tile = tuple(node.kwargs["tile"].values())
            layout = _xor_layout(ctx, tile, dtype.bytes, accesses.get(node, []))
            if layout is not None:
                node.kwargs = {**node.kwargs, "smem_layout": layout, "pad": 0}
                continue
            node.kwargs = {**node.kwargs, "pad": row_pad(tile[-1], dtype.bytes)}


def row_pad(last: int, elem_bytes: int) -> int:
    """Elements of padding per row of ``last`` elements: 16 bytes where rows are whole 16-byte chunks."""
    row = last * elem_bytes
    return BANK_GROUP_BYTES // elem_bytes if row >= BANK_GROUP_BYTES and row % BANK_GROUP_BYTES == 0 else 0


def xor_swizzle(tile: tuple, elem_bytes: int, operand_swizzle: str) -> SharedLayout | None:
    """The XOR swizzle ``operand_swizzle`` asks for on a tile whose accesses allow one: the named width
    where the tile's rows are whole multiples of it, else the widest that fits; None for "none", a tile
    that is not 2-D or whose rows are not in groups of 8, or rows no swizzle width divides."""
    if operand_swizzle == "none" or len(tile) != 2 or tile[0] % CORE_ROWS:
        return None
    named = SWIZZLE_NAMES.get(operand_swizzle)
    for kind in ((named,) if named else ()) + tuple(SWIZZLE_NAMES.values()):
        layout = SharedLayout(kind, elem_bytes)
        if layout.check(tile) is None:
            return layout
    return None


def _accesses_by_tile(trace: Trace) -> dict[fx.Node, list[fx.Node]]:
    """The reads and writes of every shared tile, in all graphs."""
    found: dict[fx.Node, list[fx.Node]] = {}
    for g in trace.graphs():
        for node in g.nodes:
            if node.meta.get("op") in (Read, Write):
                found.setdefault(capture_root(memory_operand(node)), []).append(node)
    return found


def _xor_layout(ctx: PassContext, tile: tuple, elem_bytes: int, accesses: list[fx.Node]) -> SharedLayout | None:
    """``xor_swizzle`` for a tile read only by ``ldmatrix`` and written only in aligned 16-byte runs (a
    run that crossed a 16-byte chunk would no longer be contiguous), else None."""
    reads = [a for a in accesses if a.meta.get("op") is Read]
    writes = [a for a in accesses if a.meta.get("op") is Write]
    if not reads or not writes or any(r.meta.get("access") != "ldmatrix" for r in reads):
        return None
    for w in writes:
        runs, aligns = w.meta.get("accesses"), w.meta.get("alignments") or ()
        if not runs or any(n * elem_bytes != CORE_BYTES for _f, n, _o in runs) or any(a % CORE_BYTES for a in aligns):
            return None
    return xor_swizzle(tile, elem_bytes, ctx.constraints.scheduling.operand_swizzle)
