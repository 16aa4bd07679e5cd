"""swizzle_shared: pad shared-memory rows so the consumers' accesses are bank-conflict free.

Requires: ``promote_to_shared`` (``allocate`` nodes).  Guarantees: every ``allocate`` has
``kwargs["pad"]``, extra elements per row (tiles that ``layout_wgmma_operands`` gave a ``smem_layout``
keep theirs: pad 0).  Rows of at least 16 bytes (and a multiple of 16) are padded
by 16 bytes: 8 consecutive rows then start in 8 different groups of 4 banks, so every ``ldmatrix`` phase
(8 rows x 16 bytes) is conflict free, and so are the copies' row-wise 16-byte stores when a row is at
least 128 bytes.  Shorter rows (BLOCK_K = 16 or 32 in f16) leave those stores 2-way conflicting — the
right trade while each element is written once and read by several warps.  An XOR swizzle would make
both conflict free; it needs XOR in the index algebra, left for later (``docs/design.md``).
"""

from __future__ import annotations

from ..frontend.ops import Allocate
from ..frontend.tracing import Trace
from .context import PassContext

BANK_GROUP_BYTES = 16


def swizzle_shared(trace: Trace, ctx: PassContext) -> None:
    for g in trace.graphs():
        for node in g.nodes:
            if node.meta.get("op") is not Allocate or node.kwargs.get("smem_layout") is not None:
                continue  # tiles with a layout of their own (wgmma operands) are laid out already
            dtype = node.meta["type"].dtype
            row = list(node.kwargs["tile"].values())[-1] * dtype.bytes
            pad = BANK_GROUP_BYTES // dtype.bytes if row >= BANK_GROUP_BYTES and row % BANK_GROUP_BYTES == 0 else 0
            node.kwargs = {**node.kwargs, "pad": pad}
