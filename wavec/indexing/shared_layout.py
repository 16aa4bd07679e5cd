"""Shared-memory tile layouts other than padded rows, and the copy distributions that fill them.

A ``SharedLayout`` maps a tile's relative coordinates ``(row, k)`` (k contiguous in global memory) to
memref indices and byte offsets, and gives the strides of a Hopper matrix descriptor (PTX ISA, "Shared
Memory Matrix Layout"; table and bank analysis: docs/hopper.md, "Shared-memory operand layouts").

- ``CORE_K_MAJOR`` (swizzle mode none): core matrices of 8 rows x 16 bytes stored as 128 contiguous
  bytes, adjacent along K; memref ``[rows/8, k/e, 8, e]`` (``e`` elements per 16 bytes); LBO = 128 bytes,
  SBO = ``k/e * 128`` bytes.
- ``SWIZZLE_{128,64,32}B`` (width W): K cut into W-byte columns of W-byte rows; in each 8-row atom the
  16-byte chunk ``c`` of row ``r`` sits at ``c ^ ((r * W / 128) % (W / 16))``; memref ``[k*bytes/W, rows,
  W/bytes]``; atoms 8W-byte aligned (allocations 1024); SBO = 8W bytes, LBO unused (16); a K step of 16
  elements is 32 bytes further along the row, the hardware applying the XOR to the full address.
- ``mn_major``: the same storage with the MMA's M/N dim contiguous and K as rows (B stored [K, N]: V in
  attention), read with ``imm-trans-b = 1``; the canonical MN-major strides: no swizzle SBO = 128 bytes,
  LBO = MN/e x 128 bytes; W-byte swizzle LBO = rows x W bytes, SBO = 8W bytes.  A K step of 16 is two
  8-row groups: ``2 x SBO`` (swizzled) or ``2 x LBO`` (core matrices) further.
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
SWIZZLE_ALIGN = 1024  # allocation alignment of swizzled tiles (the largest atom: 8 rows x 128 bytes)


class SharedLayoutKind(enum.Enum):
    CORE_K_MAJOR = "core_k_major"
    SWIZZLE_128B = "swizzle_128b"
    SWIZZLE_64B = "swizzle_64b"
    SWIZZLE_32B = "swizzle_32b"


# ``SchedulingConstraint.operand_swizzle`` names of the swizzled kinds, widest first
SWIZZLE_NAMES = {
    "128B": SharedLayoutKind.SWIZZLE_128B,
    "64B": SharedLayoutKind.SWIZZLE_64B,
    "32B": SharedLayoutKind.SWIZZLE_32B,
}
_SWIZZLE_WIDTH = {kind: int(name[:-1]) for name, kind in SWIZZLE_NAMES.items()}


class Xor(sympy.Function):
    """Bitwise XOR of two non-negative index expressions (lowered to ``arith.xori``)."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) ^ int(b))
        if b == 0:
            return a
        if a == 0:
            return b
        return None


class SwizzleMode(enum.IntEnum):
    """Matrix-descriptor bits 62-63 (PTX ISA, "Matrix Descriptor Format")."""

    NONE = 0
    B128 = 1
    B64 = 2
    B32 = 3


def split_quotient(expr: sympy.Expr, q: int) -> tuple[sympy.Expr, sympy.Expr]:
    """``(expr // q, expr % q)`` for a non-negative index expression, simplified where provable: terms
    whose coefficient is a multiple of ``q`` go to the quotient, ``c * Mod(x, d)`` with ``c | q`` and
    ``(q / c) | d`` splits into ``floor(Mod(x, d) / (q / c))`` and ``c * Mod(x, q / c)``, and the rest
    must provably stay in ``[0, q)``.  Otherwise ``floor(expr / q)`` and ``expr - q * floor(expr / q)``
    (correct, just slower; no ``Mod`` of a product: sympy 1.x rewrites ``Mod(8*Mod(x, 16), 64)``
    wrongly as ``8*Mod(Mod(x, 16)**2, 8)``)."""
    expr = sympy.expand(expr)
    quot, low = sympy.Integer(0), sympy.Integer(0)
    bound: int | None = 0  # an upper bound of the low terms, None once unknown
    for term in sympy.Add.make_args(expr):
        coeff, rest = term.as_coeff_Mul()
        c = int(coeff) if coeff.is_Integer else None
        if c is not None and c % q == 0:
            quot += term / q
            continue
        top = _max_of(rest)
        if (
            c is not None
            and c > 0
            and top is not None
            and c * top >= q
            and q % c == 0
            and isinstance(rest, sympy.Mod)
            and int(rest.args[1]) % (q // c) == 0
        ):
            quot += sympy.floor(rest / (q // c))
            low += c * sympy.Mod(rest.args[0], q // c)
            bound = None if bound is None else bound + c * (q // c - 1)
            continue
        low += term
        bound = None if bound is None or top is None or c is None or c < 0 else bound + c * top
    if bound is not None and bound < q:  # the low terms stay in [0, q)
        return sympy.expand(quot), low
    floor = sympy.floor(expr / q)
    return floor, expr - q * floor


def _max_of(x: sympy.Expr) -> int | None:
    """An upper bound of a non-negative factor: 1 for a constant, d - 1 for ``Mod(_, d)`` (else None)."""
    if x == 1:
        return 1
    if isinstance(x, sympy.Mod) and x.args[1].is_Integer:
        return int(x.args[1]) - 1
    return None


@dataclass(frozen=True, slots=True)
class SharedLayout:
    kind: SharedLayoutKind
    elem_bytes: int
    mn_major: bool = False  # rows are the MMA's K, the contiguous dim its M/N (imm-trans = 1)

    @property
    def elems(self) -> int:
        """Elements per 16-byte core-matrix row."""
        return CORE_BYTES // self.elem_bytes

    @property
    def swizzled(self) -> bool:
        return self.kind in _SWIZZLE_WIDTH

    @property
    def width(self) -> int:
        """Bytes of one swizzle row (the XOR pattern's width)."""
        return _SWIZZLE_WIDTH[self.kind]

    @property
    def row_elems(self) -> int:
        """Elements of one swizzle row."""
        return self.width // self.elem_bytes

    @property
    def alignment(self) -> int:
        """Byte alignment the tile's allocation needs (a swizzle atom; 128 otherwise)."""
        return SWIZZLE_ALIGN if self.swizzled else 128

    def check(self, tile: tuple[int, int]) -> str | None:
        """Why a ``rows x k`` tile cannot have this layout (None: it can)."""
        rows, k = tile
        if rows % CORE_ROWS or (k * self.elem_bytes) % CORE_BYTES:
            return (
                f"a {rows}x{k} tile of {self.elem_bytes}-byte elements is not whole core matrices "
                f"({CORE_ROWS} rows x {CORE_BYTES} bytes)"
            )
        if self.swizzled and (k * self.elem_bytes) % self.width:
            return f"rows of {k * self.elem_bytes} bytes are not whole {self.width}-byte swizzle rows"
        return None

    def memref_shape(self, tile: tuple[int, int]) -> list[int]:
        rows, k = tile
        if self.swizzled:
            return [k // self.row_elems, rows, self.row_elems]
        return [rows // CORE_ROWS, k // self.elems, CORE_ROWS, self.elems]

    def row_phase(self, row: sympy.Expr) -> sympy.Expr:
        """What the chunk index of ``row`` is XORed with: address bits [7, ...) of the row's start."""
        per = 128 // self.width  # rows per 128 bytes
        chunks = self.width // CORE_BYTES
        return sympy.Mod(sympy.floor(row / per) if per > 1 else row, chunks)

    def indices(self, row: sympy.Expr, k: sympy.Expr) -> list[sympy.Expr]:
        """Memref indices of relative coordinates ``(row, k)``."""
        if self.swizzled:
            col, kr = split_quotient(k, self.row_elems)
            chunk, e = split_quotient(kr, self.elems)
            return [col, row, Xor(chunk, self.row_phase(row)) * self.elems + e]
        rq, rr = split_quotient(row, CORE_ROWS)
        kq, kr = split_quotient(k, self.elems)
        return [rq, kq, rr, kr]

    def byte_offset(self, row, k, tile: tuple[int, int]):
        """Byte offset of ``(row, k)`` from the tile's start, where an instruction tile starts: ``row`` a
        multiple of 8 and ``k`` of 8 elements (core matrices; a K step inside a swizzle row is the
        unswizzled offset: the hardware swizzles the address).  Works on integers and expressions.
        ``(row, k)`` are storage coordinates (``k`` the contiguous dim) in both majorities; an MN-major
        instruction tile starts on a whole swizzle row (its MN extent is whole W-byte blocks)."""
        rq, rr = split_quotient(sympy.sympify(row), CORE_ROWS)
        if self.swizzled:
            col, kr = split_quotient(sympy.sympify(k), self.row_elems)
            off = col * tile[0] * self.width + rq * CORE_ROWS * self.width + kr * self.elem_bytes
        else:
            kq, kr = split_quotient(sympy.sympify(k), self.elems)
            off = rq * self._row_group_bytes(tile) + kq * CORE_ROWS * CORE_BYTES
        if rr != 0 or ((not self.swizzled or self.mn_major) and kr != 0):
            raise ValueError(f"({row}, {k}) is not where an instruction tile can start")
        return int(off) if off.is_Integer else off

    def lbo(self, tile: tuple[int, int]) -> int:
        if self.mn_major:  # the next W-byte block of MN elements, or the next 8 K rows (core matrices)
            return tile[0] * self.width if self.swizzled else self._row_group_bytes(tile)
        return CORE_BYTES if self.swizzled else CORE_ROWS * CORE_BYTES

    def sbo(self, tile: tuple[int, int]) -> int:
        if self.mn_major:  # the next 8 K rows, or the next 8 MN elements (core matrices)
            return CORE_ROWS * self.width if self.swizzled else CORE_ROWS * CORE_BYTES
        return CORE_ROWS * self.width if self.swizzled else self._row_group_bytes(tile)

    def _row_group_bytes(self, tile: tuple[int, int]) -> int:
        """Bytes of 8 whole rows of the core-matrix layout (the distance between 8-row groups)."""
        return (tile[1] // self.elems) * CORE_ROWS * CORE_BYTES

    @property
    def swizzle(self) -> SwizzleMode:
        return SwizzleMode[f"B{self.width}"] if self.swizzled else SwizzleMode.NONE

    def descriptor_bits(self, tile: tuple[int, int]) -> int:
        """The descriptor without its start address: LBO, SBO (both >> 4) and the swizzle mode."""
        return ((self.lbo(tile) >> 4) << 16) | ((self.sbo(tile) >> 4) << 32) | (int(self.swizzle) << 62)


def core_copy_layout(dims: tuple[Dim, Dim], tile: tuple[int, int], threads: int, elem_bytes: int) -> Layout | str:
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
        return (
            f"{threads} threads copy {CORE_ROWS * groups} rows x {kc * e} columns at a time, which does not "
            f"tile {rows}x{k}"
        )
    row = sympy.Mod(THREAD, CORE_ROWS) + (CORE_ROWS * sympy.floor(THREAD / (CORE_ROWS * kc)) if groups > 1 else 0)
    col = e * sympy.Mod(sympy.floor(THREAD / CORE_ROWS), kc) if kc > 1 else sympy.Integer(0)
    return Layout.make(dims, (IndexSeq(row), IndexSeq(col, ((e, 1),))), (CORE_ROWS * groups, kc * e))
