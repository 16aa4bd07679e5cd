"""A decomposition cache for tiled GEMM launches: the demand of one configuration is derived once per class
of output tile and K, then assembled for any (M, N) without walking every workgroup.

Requires: a compiled, non-persistent kernel whose launch grid is a product of two tile counts
``ceil(S0 / T0) * ceil(S1 / T1)`` over two size symbols (the GEMM's ``metadata.grid``: linearised by the
grouped order of ``GROUP_M`` when it is > 1, else two grid axes), whose workgroups differ in demand only by
whether their tile is the last along each axis (a partial tile masks rows / columns; an interior one does
not), and no integer data (MoE routing is not a tile class).  Anything else falls back to
:func:`~wavec.perf.decompose.decompose`.

Guarantees: :meth:`TileCache.decompose` returns the :class:`~wavec.perf.decompose.Decomposition` that
``decompose`` gives for the same launch, task for task (demand and top-level trip counts per task, grid,
footprint, tensors, symbols): it decomposes a *proxy* launch of at most 2 x 2 tiles with the same K (and
every other symbol), the same remainders of S0 and S1 and the same class structure (an interior tile
along an axis exists iff the real grid has >= 2 tiles along it), and gives each real task the demand of its
class's proxy task, the class of a linear workgroup id following the grouped order of
``passes/reorder_workgroups.py``.  Which size is workgroup axis 0 is checked once per kernel: the
assembly of a probe launch (both axes with interior and partial tiles, a group of ``GROUP_M`` cut short)
must equal its full walk in one of the two orders, else every launch is walked in full.  Proxies are
memoised per (S0', S1', other symbols), so the shapes of a race that share K and the tile remainders share
one walk.  ``tests/unit/test_perf_tile_cache.py`` checks
the assembled decomposition and its features equal the full walk's for several shapes and configurations.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np

from ..abi import SMS_NAME
from ..runtime.artifact import Artifact
from .decompose import Decomposition, _footprint, _grid, decompose, launch_symbols, launch_tensors
from .demand import Demand
from .gpus import GPUSpec

__all__ = ["TileCache", "tile_axes", "tile_coords"]

_FACTOR = re.compile(r"\(\(\((\w+)\) \+ (\d+)\) // (\d+)\)")


def tile_axes(artifact: Artifact) -> tuple[tuple[str, int], tuple[str, int]] | None:
    """((S0, T0), (S1, T1)) of a grid of ``ceil(S0/T0) * ceil(S1/T1)`` tiles (linearised or on two axes),
    in the grid text's order (which :class:`TileCache` checks against a probe walk); ``None`` for any
    other grid (persistent, 3-D, one axis)."""
    grid = artifact.metadata.grid
    if any(SMS_NAME in g for g in grid) or grid[2] != "1":
        return None
    if grid[1] == "1":
        factors = _FACTOR.findall(grid[0])
        whole = " * ".join(f"((({s}) + {a}) // {t})" for s, a, t in factors)
        if len(factors) != 2 or whole != grid[0]:
            return None
    else:
        matches = [_FACTOR.fullmatch(g) for g in grid[:2]]
        factors = [m.groups() for m in matches if m]
        if len(factors) != 2:
            return None
    out = []
    for s, a, t in factors:
        if int(a) != int(t) - 1:
            return None
        out.append((str(s), int(t)))
    return out[0], out[1]


def tile_coords(n0: int, n1: int, group: int, linear: bool) -> tuple[np.ndarray, np.ndarray]:
    """Tile indices (axis 0, axis 1) of each workgroup in launch order: the grouped order of
    ``reorder_workgroups`` on a linearised grid (``group`` rows of tiles walked column by column), else x
    fastest over a 2-D grid."""
    pid = np.arange(n0 * n1, dtype=np.int64)
    if not linear:
        return pid % n0, pid // n0
    width = group * n1
    first = (pid // width) * group
    size = np.minimum(n0 - first, group)
    return first + pid % size, (pid % width) // size


def _same(a: Decomposition, b: Decomposition) -> bool:
    return set(a.demand) == set(b.demand) and all(np.array_equal(a.demand[k], b.demand[k]) for k in a.demand)


class TileCache:
    """Decompositions of one compiled kernel for many launch shapes (see the module docstring)."""

    def __init__(self, kernel: Any, gpu: str | GPUSpec | None = None) -> None:
        self.artifact: Artifact = kernel if isinstance(kernel, Artifact) else kernel.artifact
        self.gpu = gpu
        self.axes = tile_axes(self.artifact)
        self.checked = False
        self.proxies: dict[tuple[tuple[str, int], ...], Decomposition] = {}
        self.walks = 0  # proxy, probe and fallback decompositions run: what the cache saves is the rest

    def decompose(self, *shapes: Any) -> Decomposition:
        if self.axes is None or any(hasattr(s, "dtype") for s in shapes):
            return self._walk(launch_symbols(self.artifact, shapes, {}))
        symbols = launch_symbols(self.artifact, shapes, {})
        if not self.checked:
            self._check_axes(symbols)
            if self.axes is None:
                return self._walk(symbols)
        return self._assemble(symbols, self.axes)

    def _check_axes(self, symbols: dict[str, int]) -> None:
        """Which size is workgroup axis 0 (the grid text's factor order is sympy's, not the axes'): the
        order whose assembly equals a full walk of a probe launch (both axes with interior and partial
        tiles, a group of GROUP_M cut short, the launch's other sizes); neither: always walk in full."""
        self.checked = True
        if self.axes is None:
            return
        group = int(dict(self.artifact.metadata.static_symbols).get("GROUP_M", 1))
        probe = dict(symbols)
        for (sym, tile), count in zip(self.axes, (group + 1, 3), strict=True):
            probe[sym] = count * tile + tile // 2
        full = self._walk(probe)
        orders = (self.axes, (self.axes[1], self.axes[0]))
        self.axes = next((o for o in orders if _same(self._assemble(probe, o), full)), None)

    def _assemble(self, symbols: dict[str, int], axes: tuple[tuple[str, int], tuple[str, int]]) -> Decomposition:
        meta = self.artifact.metadata
        (s0, t0), (s1, t1) = axes
        n = (-(-symbols[s0] // t0), -(-symbols[s1] // t1))
        proxy_symbols = dict(symbols)
        for (sym, tile), count in zip(axes, n, strict=True):
            # the last tile keeps the real remainder; one full tile before it where the real grid has any
            proxy_symbols[sym] = (min(count, 2) - 1) * tile + symbols[sym] - (count - 1) * tile
        proxy = self._proxy(proxy_symbols)
        group = int(dict(meta.static_symbols).get("GROUP_M", 1))
        linear = meta.grid[1] == "1"
        pn = (-(-proxy_symbols[s0] // t0), -(-proxy_symbols[s1] // t1))
        p0, p1 = tile_coords(*pn, group, linear)
        index = np.full(4, -1, dtype=np.int64)
        index[(p0 == pn[0] - 1).astype(np.int64) * 2 + (p1 == pn[1] - 1)] = np.arange(len(p0))
        r0, r1 = tile_coords(*n, group, linear)
        task = index[(r0 == n[0] - 1).astype(np.int64) * 2 + (r1 == n[1] - 1)]
        rules = Demand(meta.tensor_maps, len(meta.args) if meta.tensor_maps else None, proxy.wave, {})
        return replace(
            proxy,
            grid=_grid(self.artifact, symbols, None),
            demand={k: v[task] for k, v in proxy.demand.items()},
            trips={k: v[task] for k, v in proxy.trips.items()},
            footprint=_footprint(self.artifact, symbols, rules),
            symbols=symbols,
            notes=list(proxy.notes),
            tensors=launch_tensors(self.artifact, symbols),
        )

    def _walk(self, symbols: dict[str, int]) -> Decomposition:
        shapes = [tuple(d if isinstance(d, int) else symbols[d] for d in a.shape) for a in self.artifact.metadata.args]
        self.walks += 1
        return decompose(self.artifact, *shapes, gpu=self.gpu)

    def _proxy(self, symbols: dict[str, int]) -> Decomposition:
        key = tuple(sorted(symbols.items()))
        if key not in self.proxies:
            self.proxies[key] = self._walk(symbols)
        return self.proxies[key]
