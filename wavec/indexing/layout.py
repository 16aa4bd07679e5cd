"""``Layout``: how one op's register tile is spread over the lanes of a wave.

A layout gives, for each dimension of the op, the thread's ``IndexSeq`` and the extent of one
instruction tile (what expansion steps by), plus ``order``: the (dimension, level) pairs from slowest
to fastest that flatten the register tile into the per-thread vector.  MMA layouts fix the order to the
hardware fragment order; default layouts use dimension order, outer levels first.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TypeAlias

import sympy

from .indexseq import IndexSeq

Dim: TypeAlias = sympy.Symbol


@dataclass(frozen=True, slots=True)
class Layout:
    dims: tuple[Dim, ...]
    seqs: tuple[IndexSeq, ...]
    tile: tuple[int, ...]
    order: tuple[tuple[Dim, int], ...]

    def __post_init__(self) -> None:
        if not (len(self.dims) == len(self.seqs) == len(self.tile)):
            raise ValueError("Layout: dims, seqs and tile must have one entry per dimension")
        want = {(d, j) for d, s in zip(self.dims, self.seqs) for j in range(len(s.levels))}
        if set(self.order) != want or len(self.order) != len(want):
            raise ValueError(f"Layout: order {self.order} must list every level of every dim once: {want}")

    @staticmethod
    def default_order(dims, seqs) -> tuple[tuple[Dim, int], ...]:
        return tuple((d, j) for d, s in zip(dims, seqs) for j in reversed(range(len(s.levels))))

    @classmethod
    def make(cls, dims, seqs, tile, order=None) -> Layout:
        dims, seqs, tile = tuple(dims), tuple(seqs), tuple(int(t) for t in tile)
        return cls(dims, seqs, tile, tuple(order) if order is not None else cls.default_order(dims, seqs))

    def seq(self, dim: Dim) -> IndexSeq:
        return self.seqs[self.dims.index(dim)]

    def tile_of(self, dim: Dim) -> int:
        return self.tile[self.dims.index(dim)]

    @property
    def size(self) -> int:
        return math.prod(s.count for s in self.seqs)

    def restrict(self, dims) -> Layout:
        """The layout of an operand over a subset of the dimensions (broadcast operands, reductions)."""
        keep = [d for d in self.dims if d in set(dims)]
        missing = set(dims) - set(keep)
        if missing:
            raise KeyError(f"Layout over {self.dims} has no dimension {sorted(map(str, missing))}")
        idx = [self.dims.index(d) for d in keep]
        return Layout(
            tuple(keep),
            tuple(self.seqs[i] for i in idx),
            tuple(self.tile[i] for i in idx),
            tuple((d, j) for d, j in self.order if d in set(keep)),
        )

    def permute(self, dims) -> Layout:
        """The same register tile seen with its dimensions in the order ``dims`` (``order`` names levels
        by dimension, so the register vector itself does not change)."""
        idx = [self.dims.index(d) for d in dims]
        return Layout(tuple(dims), tuple(self.seqs[i] for i in idx), tuple(self.tile[i] for i in idx), self.order)

    def offset(self, deltas: dict) -> Layout:
        seqs = tuple(s.offset(deltas.get(d, 0)) for d, s in zip(self.dims, self.seqs))
        return Layout(self.dims, seqs, self.tile, self.order)

    def subs(self, mapping) -> Layout:
        return Layout(self.dims, tuple(s.subs(mapping) for s in self.seqs), self.tile, self.order)

    def equals(self, other: Layout) -> bool:
        return (
            self.dims == other.dims
            and self.tile == other.tile
            and self.order == other.order
            and all(a.equals(b) for a, b in zip(self.seqs, other.seqs))
        )

    def positions(self) -> list[dict[Dim, int]]:
        """For each flat register position, the element's offset from ``start`` along each dim."""
        ranges = [range(self.seq(d).levels[j][0]) for d, j in self.order]
        out = []
        for idx in itertools.product(*ranges):
            off = {d: 0 for d in self.dims}
            for (d, j), i in zip(self.order, idx):
                off[d] += i * self.seq(d).levels[j][1]
            out.append(off)
        return out

    def level_coords(self) -> list[dict[tuple[Dim, int], int]]:
        ranges = [range(self.seq(d).levels[j][0]) for d, j in self.order]
        return [dict(zip(self.order, idx)) for idx in itertools.product(*ranges)]

    def __str__(self) -> str:
        body = ", ".join(f"{d}: {s} /{t}" for d, s, t in zip(self.dims, self.seqs, self.tile))
        order = " ".join(f"{d}.{j}" for d, j in self.order)
        return f"{{{body}}} order[{order}]" if order else f"{{{body}}}"


def broadcast_positions(result: Layout, operand: Layout) -> list[int]:
    """For each flat position of ``result``, the flat position of ``operand`` holding that element.

    ``operand`` must be ``result`` restricted to a subset of its dims (a broadcast operand)."""
    op_coords = operand.level_coords()
    index = {tuple(sorted(c.items(), key=str)): p for p, c in enumerate(op_coords)}
    out = []
    for coords in result.level_coords():
        key = tuple(sorted(((k, v) for k, v in coords.items() if k[0] in operand.dims), key=str))
        out.append(index[key])
    return out
