"""swizzle_shared: lay out shared-memory tiles so the consumers' accesses are bank-conflict free.

Requires: ``coarsen_loads`` (every shared access has its ``access`` kind or its ``accesses`` runs) and
``promote_to_shared`` (``allocate`` nodes).  Guarantees: every ``allocate`` has ``kwargs["pad"]``, extra
elements per row; tiles that ``layout_wgmma_operands`` gave a ``smem_layout`` keep theirs (pad 0).

- **XOR swizzle** (``SchedulingConstraint.operand_swizzle`` "auto", the default, or a named width): a
  tile that only ``ldmatrix`` reads and only 16-byte staging writes fill (the mma.sync operand tiles),
  whose rows are whole 32-, 64- or 128-byte swizzle rows and whose row count is a multiple of 8, gets
  the named ``SharedLayout`` swizzle where its rows are whole multiples of it, else the widest that fits
  (pad 0): the 16-byte chunk ``c`` of row ``r`` sits at ``c ^ phase(r)``, so the 8 rows of an
  ``ldmatrix`` phase and the 8 chunks of a copy phase both land in 8 different groups of 4 banks, and no
  row starts inside a 32-byte sector.  Padded rows (below) start every other row 16 bytes into one: on
  an H100 the copies of a 128x256 mma.sync GEMM then moved 1.55x the bytes from L2 that Triton's
  swizzled tiles move (``docs/performance.md``).
- **Padded rows** otherwise (and with ``operand_swizzle="none"``): rows of at least 16 bytes (and a
  multiple of 16) are padded by 16 bytes: 8 consecutive rows then start in 8 different groups of 4 banks,
  so every ``ldmatrix`` phase (8 rows x 16 bytes) is conflict free, and so are the copies' row-wise
  16-byte stores when a row is at least 128 bytes.  Shorter rows leave those stores 2-way conflicting.
"""

from __future__ import annotations

import torch.fx as fx

from ..frontend.ops import Allocate, Read, Write
from ..frontend.tracing import Trace, capture_root
from ..indexing.shared_layout import CORE_BYTES, CORE_ROWS, SharedLayout, SharedLayoutKind
from .context import PassContext

BANK_GROUP_BYTES = 16
_WIDEST_FIRST = (SharedLayoutKind.SWIZZLE_128B, SharedLayoutKind.SWIZZLE_64B, SharedLayoutKind.SWIZZLE_32B)
_NAMED = dict(zip(("128B", "64B", "32B"), _WIDEST_FIRST))


def swizzle_shared(trace: Trace, ctx: PassContext) -> None:
    accesses = _accesses_by_tile(trace)
    for g in trace.graphs():
        for node in g.nodes:
            if node.meta.get("op") is not Allocate or node.kwargs.get("smem_layout") is not None:
                continue  # tiles with a layout of their own (wgmma operands) are laid out already
            dtype = node.meta["type"].dtype
            tile = tuple(node.kwargs["tile"].values())
            layout = _xor_layout(ctx, tile, dtype.bytes, accesses.get(node, []))
            if layout is not None:
                node.kwargs = {**node.kwargs, "smem_layout": layout, "pad": 0}
                continue
            row = tile[-1] * dtype.bytes
            pad = BANK_GROUP_BYTES // dtype.bytes if row >= BANK_GROUP_BYTES and row % BANK_GROUP_BYTES == 0 else 0
            node.kwargs = {**node.kwargs, "pad": pad}


def _accesses_by_tile(trace: Trace) -> dict[fx.Node, list[fx.Node]]:
    """The reads and writes of every shared tile, in all graphs."""
    found: dict[fx.Node, list[fx.Node]] = {}
    for g in trace.graphs():
        for node in g.nodes:
            op = node.meta.get("op")
            if op in (Read, Write):
                mem = node.args[1] if op is Write else node.args[0]
                found.setdefault(capture_root(mem), []).append(node)
    return found


def _xor_layout(ctx: PassContext, tile: tuple, elem_bytes: int, accesses: list[fx.Node]) -> SharedLayout | None:
    """The widest XOR swizzle for a 2-D tile read only by ``ldmatrix`` and written only in aligned 16-byte
    runs (a run that crossed a 16-byte chunk would no longer be contiguous), or None."""
    if ctx.constraints.scheduling.operand_swizzle == "none" or len(tile) != 2 or tile[0] % CORE_ROWS:
        return None
    reads = [a for a in accesses if a.meta.get("op") is Read]
    writes = [a for a in accesses if a.meta.get("op") is Write]
    if not reads or not writes or any(r.meta.get("access") != "ldmatrix" for r in reads):
        return None
    for w in writes:
        runs, aligns = w.meta.get("accesses"), w.meta.get("alignments")
        if not runs or any(n * elem_bytes != CORE_BYTES for _first, n, _off in runs) \
                or any(a % CORE_BYTES for a in aligns):
            return None
    named = _NAMED.get(ctx.constraints.scheduling.operand_swizzle)
    for kind in ((named,) if named else ()) + _WIDEST_FIRST:
        layout = SharedLayout(kind, elem_bytes)
        if layout.check(tile) is None:
            return layout
    return None
