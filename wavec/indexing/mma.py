"""Matrix-instruction descriptions and their operand layouts (the anchors of index inference).

Layouts follow the PTX ISA (``mma.sync.m16n8k16``, ``wgmma.mma_async.m64nNk16``) and the CDNA3 ISA
(``v_mfma_f32_16x16x16_f16``, ``v_mfma_f32_32x32x8_f16``).  Roles: A is [M, K], B is [N, K] (wavec
computes ``A @ B.T``), C/D is [M, N]; ``order`` maps the register tile onto the fragment vector.
Warpgroup types (``group_waves = 4``, Hopper ``wgmma``): the layout unit is the warpgroup (``$LANE`` over
its 128 threads, wave symbols counting warpgroups); an A/B read is one matrix descriptor per instruction
tile (no per-lane levels) except A in registers (``a_in_registers``: per warp the m16n8k16 A fragment
of its 16 rows); the instruction's N is the wave tile's (``instruction_n``).
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
    group_waves: int = 1  # waves issuing one instruction together (4: a Hopper warpgroup)

    def instruction_n(self, wave_n: int) -> int | None:
        """The instruction's N for a wave tile ``wave_n`` wide, or None when no legal N tiles it.

        Fixed-shape types have ``n``; warpgroup types take the widest legal N (a multiple of 8 up to
        ``n`` = 256) that divides the wave tile, so one instruction covers as much of it as it can."""
        if self.group_waves == 1:
            return self.n if wave_n % self.n == 0 else None
        return next((n for n in range(min(self.n, wave_n) // 8 * 8, 0, -8) if wave_n % n == 0), None)


class MMAType(enum.Enum):
    NV_F32_16x8x16_F16 = MMASpec(16, 8, 16, "f16", "f32", 32, "nvidia", (4, 2), (2, 2), (2, 2))
    NV_F32_16x8x16_BF16 = MMASpec(16, 8, 16, "bf16", "f32", 32, "nvidia", (4, 2), (2, 2), (2, 2))
    F32_16x16x16_F16 = MMASpec(16, 16, 16, "f16", "f32", 64, "amd", (4,), (4,), (4,))
    # wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}: N is 8..256 in steps of 8 (n is the maximum)
    NV_WGMMA_F32_64xNx16_F16 = MMASpec(64, 256, 16, "f16", "f32", 32, "nvidia", (), (), (), 4)
    NV_WGMMA_F32_64xNx16_BF16 = MMASpec(64, 256, 16, "bf16", "f32", 32, "nvidia", (), (), (), 4)
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
    return Layout.make((d0, d1), (IndexSeq(g, ((2, 8),)), IndexSeq(2 * t, ((2, 1),))), (16, 8), ((d0, 0), (d1, 0)))


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
    return Layout.make((d0, d1), (IndexSeq(blk, ((4, 1), (4, 8))), IndexSeq(row)), (32, 32), ((d0, 1), (d0, 0)))


def _nv_wgmma_a_registers(d0: Dim, d1: Dim) -> Layout:
    """A of m64nNk16 in registers (PTX ISA, "Register Fragments", wgmma .m64nNk16 A): warp w of the group
    holds rows 16w..16w+15 as the m16n8k16 A fragment: reg 4h + 2r + e = A[16w + g + 8r, 2t + 8h + e]."""
    warp, g, t = sympy.floor(LANE / 32), sympy.Mod(sympy.floor(LANE / 4), 8), sympy.Mod(LANE, 4)
    return Layout.make(
        (d0, d1),
        (IndexSeq(16 * warp + g, ((2, 8),)), IndexSeq(2 * t, ((2, 1), (2, 8)))),
        (64, 16),
        ((d1, 1), (d0, 0), (d1, 0)),
    )


def _nv_wgmma(role: str, d0: Dim, d1: Dim, n: int) -> Layout:
    if role in ("a", "b"):  # one matrix descriptor per 64 x 16 (A) or n x 16 (B) tile of shared memory
        return Layout.make((d0, d1), (IndexSeq(0), IndexSeq(0)), (64 if role == "a" else n, 16))
    # D of m64nNk16: warp w of the group holds rows 16w..16w+15; per n8 block j the m16n8 C fragment:
    # reg 4j + 2r + e = D[16w + g + 8r, 8j + 2t + e]
    warp, g, t = sympy.floor(LANE / 32), sympy.Mod(sympy.floor(LANE / 4), 8), sympy.Mod(LANE, 4)
    return Layout.make(
        (d0, d1),
        (IndexSeq(16 * warp + g, ((2, 8),)), IndexSeq(2 * t, ((2, 1), (n // 8, 8)))),
        (64, n),
        ((d1, 1), (d0, 0), (d1, 0)) if n > 8 else ((d0, 0), (d1, 0)),
    )


_LAYOUTS = {
    MMAType.NV_F32_16x8x16_F16: _nv_16x8x16,
    MMAType.NV_F32_16x8x16_BF16: _nv_16x8x16,
    MMAType.F32_16x16x16_F16: _amd_16x16x16,
    MMAType.F32_32x32x8_F16: _amd_32x32x8,
}


def mma_layout(mma: MMAType, role: str, d0: Dim, d1: Dim, n: int | None = None, a_in_registers: bool = False) -> Layout:
    """The layout of operand ``role`` ("a" [M,K], "b" [N,K], "c" [M,N]) over dims ``(d0, d1)``.

    Warpgroup types need ``n``, the instruction's N (``MMASpec.instruction_n`` of the wave tile);
    ``a_in_registers`` gives their register form of A (else one descriptor per tile)."""
    if role not in ("a", "b", "c"):
        raise ValueError(f"mma operand role must be a, b or c, not {role!r}")
    if mma.spec.group_waves > 1:
        if n is None or n % 8 or not 8 <= n <= mma.spec.n:
            raise ValueError(f"{mma.name} needs an instruction N that is a multiple of 8 in [8, {mma.spec.n}], got {n}")
        if role == "a" and a_in_registers:
            return _nv_wgmma_a_registers(d0, d1)
        return _nv_wgmma(role, d0, d1, n)
    return _LAYOUTS[mma](role, d0, d1)
