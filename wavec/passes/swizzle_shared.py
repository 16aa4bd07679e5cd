"""swizzle_shared: pad shared-memory rows so the consumers' accesses are bank-conflict free.

Requires: ``promote_to_shared`` (``allocate`` nodes).  Guarantees: every ``allocate`` has
``kwargs["pad"]``, extra elements per row.  Rows are padded by 16 bytes whenever a row is a multiple of
128 bytes or the tile is read with 16-byte accesses (``ldmatrix``, vector loads): 8 consecutive rows
then start in 8 different groups of 4 banks, so an ``ldmatrix`` phase (8 rows x 16 bytes) and a warp's
row-wise 16-byte stores are conflict free.  (An XOR swizzle would save the padding bytes; padding keeps
the address arithmetic affine, which the emulator's race checker and ldmatrix addressing rely on.)
"""

from __future__ import annotations

from ..frontend.ops import Allocate
from ..frontend.tracing import Trace
from .context import PassContext

BANK_GROUP_BYTES = 16


def swizzle_shared(trace: Trace, ctx: PassContext) -> None:
    for g in trace.graphs():
        for node in g.nodes:
            if node.meta.get("op") is not Allocate:
                continue
            dtype = node.meta["type"].dtype
            row = list(node.kwargs["tile"].values())[-1] * dtype.bytes
            pad = BANK_GROUP_BYTES // dtype.bytes if row >= BANK_GROUP_BYTES and row % BANK_GROUP_BYTES == 0 else 0
            node.kwargs = {**node.kwargs, "pad": pad}
