"""``wc.sym``: user symbols for dimensions and tunables (``wc.sym.M``, ``wc.sym.BLOCK_M``)."""

from __future__ import annotations

import sympy

from ..indexing.symbols import shape_symbol


class _SymbolNamespace:
    def __getattr__(self, name: str) -> sympy.Symbol:
        if name.startswith("_"):
            raise AttributeError(name)
        return shape_symbol(name)

    def __call__(self, name: str) -> sympy.Symbol:
        return shape_symbol(name)


sym = _SymbolNamespace()
