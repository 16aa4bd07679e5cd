"""Matrix-instruction descriptions and their operand layouts (the anchors of index inference).

Layouts follow the PTX ISA (``mma.sync.m16n8k16``, ``.m16n8k32`` for 8-bit integers, ``.m16n8k8`` for tf32;
``wgmma.mma_async.m64nNk16`` / ``k32`` / ``k8``) and the CDNA3 ISA (``v_mfma_f32_16x16x16_f16``,
``v_mfma_f32_32x32x8_f16``, ``v_mfma_i32_16x16x32_i8``).  The three NVIDIA shapes are one layout in bytes:
a 32-bit register holds ``p = 4 / element bytes`` neighbouring K elements (2 f16, 4 i8, 1 tf32), so the
instruction's K spans 32 bytes and ``ldmatrix`` (8 x 16-byte rows) serves all three.  Roles: A is [M, K],
B is [N, K] (wavec computes ``A @ B.T``), C/D is [M, N]; ``order`` maps the register tile onto the fragment vector.
Warpgroup types (``group_waves = 4``, Hopper ``wgmma``): the layout unit is the warpgroup (``$LANE`` over
its 128 threads, wave symbols counting warpgroups); an A/B read is one matrix descriptor per instruction
tile (no per-lane levels) except A in registers (``a_in_registers``: per warp the m16n8k16 A fragment
of its 16 rows); the instruction's N is the wave tile's (``instruction_n``).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
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
    """Names read ``[NV_[WGMMA_]]<accumulator>_<M>x<N>x<K>_<operands>``.  ``TF32`` types take f32 operands
    and multiply them as tf32 (10 mantissa bits; ``docs/dsl_reference.md``, "Matrix products"); ``I8``
    ones take signed 8-bit integers and accumulate exactly in i32."""

    NV_F32_16x8x16_F16 = MMASpec(16, 8, 16, "f16", "f32", 32, "nvidia", (4, 2), (2, 2), (2, 2))
    NV_F32_16x8x16_BF16 = MMASpec(16, 8, 16, "bf16", "f32", 32, "nvidia", (4, 2), (2, 2), (2, 2))
    # mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32 and m16n8k8.row.col.f32.tf32.tf32.f32
    NV_I32_16x8x32_I8 = MMASpec(16, 8, 32, "i8", "i32", 32, "nvidia", (4, 4), (2, 4), (2, 2))
    NV_F32_16x8x8_TF32 = MMASpec(16, 8, 8, "f32", "f32", 32, "nvidia", (4, 1), (2, 1), (2, 2))
    F32_16x16x16_F16 = MMASpec(16, 16, 16, "f16", "f32", 64, "amd", (4,), (4,), (4,))
    # wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}: N is 8..256 in steps of 8 (n is the maximum)
    NV_WGMMA_F32_64xNx16_F16 = MMASpec(64, 256, 16, "f16", "f32", 32, "nvidia", (), (), (), 4)
    NV_WGMMA_F32_64xNx16_BF16 = MMASpec(64, 256, 16, "bf16", "f32", 32, "nvidia", (), (), (), 4)
    # wgmma .m64nNk32.s32.s8.s8 and .m64nNk8.f32.tf32.tf32 (both operands K-major in shared memory)
    NV_WGMMA_I32_64xNx32_I8 = MMASpec(64, 256, 32, "i8", "i32", 32, "nvidia", (), (), (), 4)
    NV_WGMMA_F32_64xNx8_TF32 = MMASpec(64, 256, 8, "f32", "f32", 32, "nvidia", (), (), (), 4)
    F32_32x32x8_F16 = MMASpec(32, 32, 8, "f16", "f32", 64, "amd", (4,), (4,), (16,))
    # v_mfma_i32_16x16x32_i8 (CDNA3, gfx942): eight i8 of A and of B per lane
    I32_16x16x32_I8 = MMASpec(16, 16, 32, "i8", "i32", 64, "amd", (8,), (8,), (4,))

    @property
    def spec(self) -> MMASpec:
        return self.value

    @property
    def per_register(self) -> int:
        """Operand elements per 32-bit register (NVIDIA fragments): 2 for f16/bf16, 4 for 8-bit, 1 for tf32."""
        return {"i8": 4, "f32": 1}.get(self.spec.in_dtype, 2)


def _nv_16x8(role: str, d0: Dim, d1: Dim, p: int) -> Layout:
    """m16n8k(8p), ``p`` elements per register: A reg r = A[g + 8(r%2), pt + 4p(r//2) + e], B reg r =
    B[k = pt + 4pr + e, n = g] (e < p), C reg r = C[g + 8r, 2t + e] (PTX ISA, "Matrix Fragments for
    mma.m16n8k16 / m16n8k32 / m16n8k8")."""
    g, t = sympy.floor(LANE / 4), sympy.Mod(LANE, 4)
    k = IndexSeq(p * t, ((p, 1), (2, 4 * p)))
    kl = 1 if p > 1 else 0  # the level index of K's register pairs (a level of count 1 is dropped)
    inner = ((d1, 0),) if p > 1 else ()
    if role == "a":
        return Layout.make((d0, d1), (IndexSeq(g, ((2, 8),)), k), (16, 8 * p), ((d1, kl), (d0, 0), *inner))
    if role == "b":
        return Layout.make((d0, d1), (IndexSeq(g), k), (8, 8 * p), ((d1, kl), *inner))
    return Layout.make((d0, d1), (IndexSeq(g, ((2, 8),)), IndexSeq(2 * t, ((2, 1),))), (16, 8), ((d0, 0), (d1, 0)))


def _amd_16x16(role: str, d0: Dim, d1: Dim, k: int) -> Layout:
    kl = k // 4  # K elements per lane: 4 (16x16x16 f16), 8 (16x16x32 i8)
    row, blk = sympy.Mod(LANE, 16), kl * sympy.floor(LANE / 16)
    if role in ("a", "b"):  # A[i = l%16, k = kl(l//16) + j]; B[k = kl(l//16) + j, n = l%16]
        return Layout.make((d0, d1), (IndexSeq(row), IndexSeq(blk, ((kl, 1),))), (16, k))
    row, blk = sympy.Mod(LANE, 16), 4 * sympy.floor(LANE / 16)
    # C[m = 4(l//16) + j, n = l%16]
    return Layout.make((d0, d1), (IndexSeq(blk, ((4, 1),)), IndexSeq(row)), (16, 16))


def _amd_32x32x8(role: str, d0: Dim, d1: Dim) -> Layout:
    row, blk = sympy.Mod(LANE, 32), 4 * sympy.floor(LANE / 32)
    if role in ("a", "b"):  # A[i = l%32, k = 4(l//32) + j]
        return Layout.make((d0, d1), (IndexSeq(row), IndexSeq(blk, ((4, 1),))), (32, 8))
    # C[m = 8(j//4) + 4(l//32) + j%4, n = l%32]
    return Layout.make((d0, d1), (IndexSeq(blk, ((4, 1), (4, 8))), IndexSeq(row)), (32, 32), ((d0, 1), (d0, 0)))


def _nv_wgmma_a_registers(d0: Dim, d1: Dim, p: int) -> Layout:
    """A of m64nNk(8p) in registers (PTX ISA, "Register Fragments", wgmma A): warp w of the group holds
    rows 16w..16w+15 as the m16n8k(8p) A fragment: reg 2h + r holds A[16w + g + 8r, pt + 4ph + e]."""
    warp, g, t = sympy.floor(LANE / 32), sympy.Mod(sympy.floor(LANE / 4), 8), sympy.Mod(LANE, 4)
    kl, inner = (1, ((d1, 0),)) if p > 1 else (0, ())
    return Layout.make(
        (d0, d1),
        (IndexSeq(16 * warp + g, ((2, 8),)), IndexSeq(p * t, ((p, 1), (2, 4 * p)))),
        (64, 8 * p),
        ((d1, kl), (d0, 0), *inner),
    )


def _nv_wgmma(role: str, d0: Dim, d1: Dim, n: int, k: int) -> Layout:
    if role in ("a", "b"):  # one matrix descriptor per 64 x k (A) or n x k (B) tile of shared memory
        return Layout.make((d0, d1), (IndexSeq(0), IndexSeq(0)), (64 if role == "a" else n, k))
    # D of m64nNk*: warp w of the group holds rows 16w..16w+15; per n8 block j the m16n8 C fragment:
    # reg 4j + 2r + e = D[16w + g + 8r, 8j + 2t + e]
    warp, g, t = sympy.floor(LANE / 32), sympy.Mod(sympy.floor(LANE / 4), 8), sympy.Mod(LANE, 4)
    return Layout.make(
        (d0, d1),
        (IndexSeq(16 * warp + g, ((2, 8),)), IndexSeq(2 * t, ((2, 1), (n // 8, 8)))),
        (64, n),
        ((d1, 1), (d0, 0), (d1, 0)) if n > 8 else ((d0, 0), (d1, 0)),
    )


def _single_wave(mma: MMAType) -> Callable[[str, Dim, Dim], Layout]:
    if mma.spec.vendor == "nvidia":
        return functools.partial(_nv_16x8, p=mma.per_register)
    if mma.spec.m == 16:
        return functools.partial(_amd_16x16, k=mma.spec.k)
    return _amd_32x32x8


# the layout function of each one-wave type (tests swap lanes in it to check that the emulator notices)
_LAYOUTS = {t: _single_wave(t) for t in MMAType if t.spec.group_waves == 1}


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
            return _nv_wgmma_a_registers(d0, d1, mma.per_register)
        return _nv_wgmma(role, d0, d1, n, mma.spec.k)
    return _LAYOUTS[mma](role, d0, d1)
