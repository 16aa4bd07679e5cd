"""Index symbols: the hardware coordinates that index expressions are written over.

Every index expression in wavec is a sympy expression over these symbols, the user's shape symbols and
loop induction symbols.  All of them are non-negative integers, which the simplifier relies on.
"""

from __future__ import annotations

import functools

import sympy

LANE = sympy.Symbol("$LANE", integer=True, nonnegative=True)
PID = sympy.Symbol("$PID", integer=True, nonnegative=True)  # linear workgroup id of a 1-D launch
TILE = sympy.Symbol("$TILE", integer=True, nonnegative=True)  # persistent grid: linear output tile id
TILE_COUNT = sympy.Symbol("$TILE_COUNT", integer=True, nonnegative=True)  # tiles this workgroup finished before
THREAD = sympy.Symbol("$THREAD", integer=True, nonnegative=True)  # flat thread id in the workgroup
WORKGROUP = tuple(sympy.Symbol(f"$WG{i}", integer=True, nonnegative=True) for i in range(3))
WAVE = tuple(sympy.Symbol(f"$WAVE{i}", integer=True, nonnegative=True) for i in range(3))


@functools.cache
def shape_symbol(name: str) -> sympy.Symbol:
    """The symbol of a tensor dimension or a tunable (``M``, ``BLOCK_M``): a positive integer."""
    return sympy.Symbol(name, integer=True, positive=True)


@functools.cache
def induction_symbol(dim: sympy.Symbol) -> sympy.Symbol:
    """The induction variable (iteration count, not element offset) of the loop that tiles ``dim``."""
    return sympy.Symbol(f"$ARG_{dim.name}", integer=True, nonnegative=True)


@functools.cache
def stage_symbol(dim: sympy.Symbol) -> sympy.Symbol:
    """The pipeline stage (``iteration % num_stages``) of the loop over ``dim``, carried by the loop so
    that address arithmetic does not become one induction variable per access."""
    return sympy.Symbol(f"$STAGE_{dim.name}", integer=True, nonnegative=True)


@functools.cache
def tile_start_symbol(dim: sympy.Symbol) -> sympy.Symbol:
    """The first coordinate of ``dim`` in the current workgroup's tile (for a batch dimension: its
    coordinate); replaced by the workgroup offset when the constraints are resolved."""
    return sympy.Symbol(f"$TILE_START_{dim.name}", integer=True, nonnegative=True)
