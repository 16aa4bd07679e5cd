"""``IndexSeq``: the coordinates along one dimension that one thread touches (DESIGN §3).

``IndexSeq(start, levels)`` with ``levels = ((count_0, stride_0), ...)`` innermost first denotes
``{start + sum_j i_j * stride_j | 0 <= i_j < count_j}``.  Strides are logical tensor coordinates.
Levels of count 1 carry no information and are dropped, so equal sets of levels compare equal.
Equality of starts is a proof by the expression algebra (difference simplifies to 0), never sampling.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import sympy

Level = tuple[int, int]


def _norm_levels(levels) -> tuple[Level, ...]:
    out = []
    for count, stride in levels:
        count, stride = int(count), int(stride)
        if count <= 0 or stride <= 0:
            raise ValueError(f"IndexSeq levels need positive count and stride, got {(count, stride)}")
        if count > 1:
            out.append((count, stride))
    return tuple(out)


def _flatten_floor(x: sympy.Expr) -> sympy.Expr:
    """floor(floor(y) / b) == floor(y / b) for a positive integer b."""
    coeff, rest = x.args[0].as_coeff_Mul()
    if isinstance(rest, sympy.floor) and coeff > 0 and (1 / coeff).is_Integer:
        return sympy.floor(rest.args[0] * coeff)
    return x


def canonical(expr: sympy.Expr) -> sympy.Expr:
    """A normal form for proofs: ``Mod(x, c)`` as ``x - c*floor(x/c)``, nested floors flattened."""
    expr = sympy.sympify(expr)
    expr = expr.replace(
        lambda x: isinstance(x, sympy.Mod), lambda x: x.args[0] - x.args[1] * sympy.floor(x.args[0] / x.args[1])
    )
    prev = None
    while prev != expr:
        prev = expr
        expr = expr.replace(lambda x: isinstance(x, sympy.floor), _flatten_floor)
    return sympy.expand(expr)


def provably_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    diff = sympy.sympify(a) - sympy.sympify(b)
    return sympy.simplify(diff) == 0 or sympy.simplify(canonical(diff)) == 0


@dataclass(frozen=True, slots=True)
class IndexSeq:
    start: sympy.Expr
    levels: tuple[Level, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", sympy.sympify(self.start))
        object.__setattr__(self, "levels", _norm_levels(self.levels))

    @property
    def count(self) -> int:
        return math.prod(c for c, _ in self.levels)

    @property
    def span(self) -> int:
        """Distance from the first to one past the last element (for a dense pattern: count)."""
        return 1 + sum((c - 1) * s for c, s in self.levels)

    def offset(self, delta) -> IndexSeq:
        return IndexSeq(self.start + delta, self.levels)

    def subs(self, mapping) -> IndexSeq:
        return IndexSeq(self.start.subs(mapping), self.levels)

    def offsets(self) -> list[int]:
        """Offsets from ``start`` of every element, innermost level fastest."""
        ranges = [range(c) for c, _ in reversed(self.levels)]
        strides = [s for _, s in reversed(self.levels)]
        return [sum(i * s for i, s in zip(idx, strides)) for idx in itertools.product(*ranges)]

    def elements(self, values: dict) -> list[int]:
        """Concrete coordinates for concrete symbol ``values`` (for tests and the emulator oracle)."""
        base = int(self.start.subs(values))
        return [base + o for o in self.offsets()]

    def equals(self, other: IndexSeq) -> bool:
        return self.levels == other.levels and provably_equal(self.start, other.start)

    def __str__(self) -> str:
        lv = ", ".join(f"{c}x{s}" for c, s in self.levels)
        return f"({self.start}; {lv})" if lv else f"({self.start})"
