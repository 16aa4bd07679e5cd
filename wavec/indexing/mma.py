"""Matrix-instruction descriptions and their operand layouts (the anchors of index inference).

Layouts follow the PTX ISA (``mma.sync.m16n8k16``) and the CDNA3 ISA (``v_mfma_f32_16x16x16_f16``,
``v_mfma_f32_32x32x8_f16``).  Operands are named by role: A is [M, K], B is [N, K] (wavec computes
``A @ B.T``), C/D is [M, N].  ``order`` maps the register tile onto the fragment vector.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import sympy

from .indexseq import IndexSeq
from .layout import Dim, Layout
from .symbols import LANE


@dataclass(frozen=True, slots=True)
class MMASpec:
    m: int
    n: int
    k: int
    in_dtype: str
    acc_dtype: str
    threads: int
    vendor: str  # "nvidia" | "amd"
    a_shape: tuple[int, ...]  # the instruction's vector type shapes
    b_shape: tuple[int, ...]
    c_shape: tuple[int, ...]


class MMAType(enum.Enum):
    NV_F32_16x8x16_F16 = MMASpec(16, 8, 16, "f16", "f32", 32, "nvidia", (4, 2), (2, 2), (2, 2))
    NV_F32_16x8x16_BF16 = MMASpec(16, 8, 16, "bf16", "f32", 32, "nvidia", (4, 2), (2, 2), (2, 2))
    F32_16x16x16_F16 = MMASpec(16, 16, 16, "f16", "f32", 64, "amd", (4,), (4,), (4,))
    F32_32x32x8_F16 = MMASpec(32, 32, 8, "f16", "f32", 64, "amd", (4,), (4,), (16,))

    @property
    def spec(self) -> MMASpec:
        return self.value


def _nv_16x8x16(role: str, d0: Dim, d1: Dim) -> Layout:
    g, t = sympy.floor(LANE / 4), sympy.Mod(LANE, 4)
    k = IndexSeq(2 * t, ((2, 1), (2, 8)))
    if role == "a":  # A[M, K]: reg r = A[g + 8*(r%2), 2t + 8*(r//2) + e]
        return Layout.make((d0, d1), (IndexSeq(g, ((2, 8),)), k), (16, 16), ((d1, 1), (d0, 0), (d1, 0)))
    if role == "b":  # B[N, K]: reg r = B[k = 2t + 8r + e, n = g]
        return Layout.make((d0, d1), (IndexSeq(g), k), (8, 16), ((d1, 1), (d1, 0)))
    # C[M, N]: reg r = C[g + 8r, 2t + e]
    return Layout.make((d0, d1), (IndexSeq(g, ((2, 8),)), IndexSeq(2 * t, ((2, 1),))), (16, 8),
                       ((d0, 0), (d1, 0)))


def _amd_16x16x16(role: str, d0: Dim, d1: Dim) -> Layout:
    row, blk = sympy.Mod(LANE, 16), 4 * sympy.floor(LANE / 16)
    if role in ("a", "b"):  # A[i = l%16, k = 4(l//16) + j]; B[k = 4(l//16) + j, n = l%16]
        return Layout.make((d0, d1), (IndexSeq(row), IndexSeq(blk, ((4, 1),))), (16, 16))
    # C[m = 4(l//16) + j, n = l%16]
    return Layout.make((d0, d1), (IndexSeq(blk, ((4, 1),)), IndexSeq(row)), (16, 16))


def _amd_32x32x8(role: str, d0: Dim, d1: Dim) -> Layout:
    row, blk = sympy.Mod(LANE, 32), 4 * sympy.floor(LANE / 32)
    if role in ("a", "b"):  # A[i = l%32, k = 4(l//32) + j]
        return Layout.make((d0, d1), (IndexSeq(row), IndexSeq(blk, ((4, 1),))), (32, 8))
    # C[m = 8(j//4) + 4(l//32) + j%4, n = l%32]
    return Layout.make((d0, d1), (IndexSeq(blk, ((4, 1), (4, 8))), IndexSeq(row)), (32, 32),
                       ((d0, 1), (d0, 0)))


_LAYOUTS = {
    MMAType.NV_F32_16x8x16_F16: _nv_16x8x16,
    MMAType.NV_F32_16x8x16_BF16: _nv_16x8x16,
    MMAType.F32_16x16x16_F16: _amd_16x16x16,
    MMAType.F32_32x32x8_F16: _amd_32x32x8,
}


def mma_layout(mma: MMAType, role: str, d0: Dim, d1: Dim) -> Layout:
    """The layout of operand ``role`` ("a" [M,K], "b" [N,K], "c" [M,N]) over dims ``(d0, d1)``."""
    if role not in ("a", "b", "c"):
        raise ValueError(f"mma operand role must be a, b or c, not {role!r}")
    return _LAYOUTS[mma](role, d0, d1)
