"""Shared-memory tile layouts other than padded rows, and the copy distributions that fill them.

A ``SharedLayout`` maps a tile's relative coordinates ``(row, k)`` (k contiguous in global memory) to the
indices of the tile's memref and to byte offsets, and gives the strides a Hopper matrix descriptor needs.

``CORE_K_MAJOR`` is the no-swizzle K-major layout of ``wgmma`` operands (PTX ISA, "Shared Memory Matrix
Layout", swizzle mode none): the tile is cut into *core matrices* of 8 rows x 16 bytes, each stored as
128 contiguous bytes (row-major inside), core matrices adjacent along K next to each other and groups of
8 rows after each other.  As a memref: ``[rows/8, k/e, 8, e]`` with ``e`` elements per 16 bytes.
Descriptor strides: LBO (leading dimension = K, the next core matrix along K) = 128 bytes, SBO (stride
dimension = M/N, the next 8-row group) = ``k/e * 128`` bytes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import sympy

from .indexseq import IndexSeq
from .layout import Dim, Layout
from .symbols import THREAD

CORE_ROWS = 8  # rows of one core matrix
CORE_BYTES = 16  # bytes of one core-matrix row


class SharedLayoutKind(enum.Enum):
    CORE_K_MAJOR = "core_k_major"


class SwizzleMode(enum.IntEnum):
    """Matrix-descriptor bits 62-63 (PTX ISA, "Matrix Descriptor Format")."""

    NONE = 0
    B128 = 1
    B64 = 2
    B32 = 3


def split_quotient(expr: sympy.Expr, q: int) -> tuple[sympy.Expr, sympy.Expr]:
    """``(expr // q, expr % q)`` for a non-negative index expression, simplified where provable: terms
    whose coefficient is a multiple of ``q`` go to the quotient when the rest is a ``Mod(x, d)`` with
    ``d <= q`` (so it stays below ``q``).  Otherwise the plain ``floor``/``Mod`` (correct, just slower)."""
    expr = sympy.expand(expr)
    high, low = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(expr):
        coeff, _rest = term.as_coeff_Mul()
        if coeff.is_Integer and int(coeff) % q == 0:
            high += term
        else:
            low += term
    if low == 0:
        return sympy.expand(high / q), sympy.Integer(0)
    if isinstance(low, sympy.Mod) and low.args[1].is_Integer and int(low.args[1]) <= q:
        return sympy.expand(high / q), low
    return sympy.floor(expr / q), sympy.Mod(expr, q)


@dataclass(frozen=True, slots=True)
class SharedLayout:
    kind: SharedLayoutKind
    elem_bytes: int

    @property
    def elems(self) -> int:
        """Elements per 16-byte core-matrix row."""
        return CORE_BYTES // self.elem_bytes

    def check(self, tile: tuple[int, int]) -> str | None:
        """Why a ``rows x k`` tile cannot have this layout (None: it can)."""
        rows, k = tile
        if rows % CORE_ROWS or (k * self.elem_bytes) % CORE_BYTES:
            return (f"a {rows}x{k} tile of {self.elem_bytes}-byte elements is not whole core matrices "
                    f"({CORE_ROWS} rows x {CORE_BYTES} bytes)")
        return None

    def memref_shape(self, tile: tuple[int, int]) -> list[int]:
        rows, k = tile
        return [rows // CORE_ROWS, k // self.elems, CORE_ROWS, self.elems]

    def indices(self, row: sympy.Expr, k: sympy.Expr) -> list[sympy.Expr]:
        """Memref indices of relative coordinates ``(row, k)``."""
        rq, rr = split_quotient(row, CORE_ROWS)
        kq, kr = split_quotient(k, self.elems)
        return [rq, kq, rr, kr]

    def byte_offset(self, row: int, k: int, tile: tuple[int, int]) -> int:
        """Byte offset of ``(row, k)`` (a core-matrix corner) from the tile's start."""
        if row % CORE_ROWS or k % self.elems:
            raise ValueError(f"({row}, {k}) is not the corner of a core matrix")
        return (row // CORE_ROWS) * self.sbo(tile) + (k // self.elems) * self.lbo(tile)

    def lbo(self, tile: tuple[int, int]) -> int:
        return CORE_ROWS * CORE_BYTES

    def sbo(self, tile: tuple[int, int]) -> int:
        return (tile[1] // self.elems) * CORE_ROWS * CORE_BYTES

    @property
    def swizzle(self) -> SwizzleMode:
        return SwizzleMode.NONE

    def descriptor_bits(self, tile: tuple[int, int]) -> int:
        """The descriptor without its start address: LBO, SBO (both >> 4) and the swizzle mode."""
        return ((self.lbo(tile) >> 4) << 16) | ((self.sbo(tile) >> 4) << 32) | (int(self.swizzle) << 62)


def core_copy_layout(dims: tuple[Dim, Dim], tile: tuple[int, int], threads: int,
                     elem_bytes: int) -> Layout | str:
    """The copy distribution for a ``CORE_K_MAJOR`` tile: 16 bytes per thread, the 8 threads of each
    store phase on the 8 rows of one core-matrix column (8 different bank groups: conflict free), a
    warp covering 8 rows x 4 consecutive 16-byte chunks (64 contiguous bytes per row: whole sectors).
    Thread ``T``: row ``T % 8 + 8 * (T // (8 * kc))``, chunk ``(T // 8) % kc`` with ``kc`` chunks per
    instruction tile.  Returns the layout at the tile origin, or why the tile cannot be split so."""
    rows, k = tile
    e = CORE_BYTES // elem_bytes
    chunks = k // e
    if threads % CORE_ROWS or rows % CORE_ROWS or k % e:
        return f"{threads} threads cannot copy a {rows}x{k} tile in 8-row groups of 16-byte chunks"
    kc = min(chunks, threads // CORE_ROWS)
    groups = threads // (CORE_ROWS * kc)
    if chunks % kc or rows % (CORE_ROWS * groups):
        return (f"{threads} threads copy {CORE_ROWS * groups} rows x {kc * e} columns at a time, which does not "
                f"tile {rows}x{k}")
    row = sympy.Mod(THREAD, CORE_ROWS) + (CORE_ROWS * sympy.floor(THREAD / (CORE_ROWS * kc)) if groups > 1 else 0)
    col = e * sympy.Mod(sympy.floor(THREAD / CORE_ROWS), kc) if kc > 1 else sympy.Integer(0)
    return Layout.make(dims, (IndexSeq(row), IndexSeq(col, ((e, 1),))), (CORE_ROWS * groups, kc * e))
