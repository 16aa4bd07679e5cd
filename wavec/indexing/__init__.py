"""Index expressions, ``IndexSeq``, layouts and MMA operand layouts (no dependencies on the rest)."""

from .indexseq import IndexSeq
from .layout import Layout, broadcast_positions
from .mma import MMASpec, MMAType, mma_layout
from .symbols import LANE, THREAD, WAVE, WORKGROUP, induction_symbol, shape_symbol

__all__ = [
    "IndexSeq",
    "Layout",
    "broadcast_positions",
    "MMASpec",
    "MMAType",
    "mma_layout",
    "LANE",
    "THREAD",
    "WAVE",
    "WORKGROUP",
    "induction_symbol",
    "shape_symbol",
]
