"""Wave-quantisation cost model: per configuration, time as a function of the CTA grid.

For a configuration with ``slots = sms * ctas_per_sm`` resident workgroups and a launch of ``ctas``
workgroups, each doing ``work`` units (for GEMM: K-loop iterations, ``ceil(K / BLOCK_K)``)::

    t = c0 + work * (c1 * waves + c2 * ctas + c3 * sub)
    waves = ceil(ctas / slots),  sub = (ctas mod slots) / slots   (the fill of a last, partial wave)

``c0`` is launch/startup, ``c1`` the time of one full wave, ``c2`` what each extra workgroup costs
(bandwidth shared by all), ``c3`` how much of a wave's time a partial wave saves or costs.  ``fit``
solves the four coefficients by least squares (numpy) from at most 25 profiled shapes; ``predict`` and
``CostModel.choose`` are plain Python arithmetic (a few µs for a handful of configurations), fast enough
to pick a configuration on the host at dispatch time, and to prune an autotuning search to the
configurations the model ranks best.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_POINTS = 25


def features(ctas: int, slots: int, work: float = 1.0) -> tuple[float, float, float, float]:
    waves = -(-ctas // slots)
    sub = (ctas % slots) / slots
    return 1.0, work * waves, work * ctas, work * sub


NONNEGATIVE = (0, 1, 2)  # startup, per-wave and per-CTA costs cannot be negative; the sub-wave term can


def fit(points, max_points: int = MAX_POINTS) -> tuple[float, float, float, float]:
    """Coefficients ``(c0, c1, c2, c3)`` from ``points = [(ctas, slots, work, seconds), ...]``.

    At most ``max_points`` are used (evenly spread over the list when there are more).  Least squares on
    relative error (each row weighted by 1 / seconds), minimum-norm, with ``c0, c1, c2 >= 0``: an
    unconstrained fit on a handful of shapes happily trades a negative startup for a large per-wave cost
    and then predicts negative times for shapes outside the fitted range, which ``choose`` would pick.
    The constraint is exact: every subset of the three coefficients pinned to zero is solved, and the
    feasible solution with the least residual wins (8 tiny solves)."""
    import itertools

    import numpy as np

    pts = list(points)
    if not pts:
        raise ValueError("fit needs at least one point")
    if len(pts) > max_points:
        step = len(pts) / max_points
        pts = [pts[int(i * step)] for i in range(max_points)]
    a = np.array([features(c, s, w) for c, s, w, _t in pts], dtype=float)
    y = np.array([t for *_x, t in pts], dtype=float)
    w = 1.0 / np.where(y > 0, y, 1.0)  # minimise relative error: short launches count as much as long ones
    a, y = a * w[:, None], y * w
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    a = a / scale
    best, best_res = None, float("inf")
    for k in range(len(NONNEGATIVE) + 1):
        for pinned in itertools.combinations(NONNEGATIVE, k):
            free = [i for i in range(4) if i not in pinned]
            sol, *_ = np.linalg.lstsq(a[:, free], y, rcond=None)
            coef = np.zeros(4)
            coef[free] = sol
            if any(coef[i] < 0 for i in NONNEGATIVE):
                continue
            res = float(np.sum((a @ coef - y) ** 2))
            if res < best_res * (1 - 1e-9) or best is None:
                best, best_res = coef, res
        if best is not None and best_res <= 1e-20:  # exact already: fewer pinned coefficients is the min-norm one
            break
    return tuple(float(c) for c in best / scale)


def predict(coef, ctas: int, slots: int, work: float = 1.0) -> float:
    c0, c1, c2, c3 = coef
    waves = -(-ctas // slots)
    return c0 + work * (c1 * waves + c2 * ctas + c3 * (ctas % slots) / slots)


@dataclass
class ConfigModel:
    """A configuration's tiles and fitted coefficients.  ``tiles`` are the workgroup tiles along the
    launch grid's dimensions, ``loop_tile`` the reduction step (0: no reduction loop).  ``limits`` is the
    range of the first grid dimension the configuration serves (e.g. 16-row GEMM tiles only for
    M <= 64): a model fitted on small M says nothing about large M, so ``choose`` does not extrapolate."""

    name: str
    tiles: tuple[int, ...]
    loop_tile: int
    slots: int
    coef: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    limits: tuple[int, int] = (0, 1 << 62)

    def serves(self, shape) -> bool:
        return self.limits[0] <= shape[0] <= self.limits[1]


@dataclass
class CostModel:
    """Chooses, for a shape ``(*grid dims, reduction)``, the configuration with the least predicted time."""

    configs: list[ConfigModel] = field(default_factory=list)
    _table: list | None = field(default=None, init=False, repr=False, compare=False)
    _table_of: tuple = field(default=(), init=False, repr=False, compare=False)

    def add(self, cfg: ConfigModel, points) -> None:
        cfg.coef = fit(points)
        self.configs.append(cfg)

    def predict(self, cfg: ConfigModel, shape) -> float:
        ctas = 1
        for s, t in zip(shape, cfg.tiles):
            ctas *= -(-s // t)
        work = -(-shape[len(cfg.tiles)] // cfg.loop_tile) if cfg.loop_tile else 1
        c0, c1, c2, c3 = cfg.coef
        slots = cfg.slots
        return c0 + work * (c1 * -(-ctas // slots) + c2 * ctas + c3 * (ctas % slots) / slots)

    def rank(self, shape, k: int | None = None) -> list[ConfigModel]:
        """Configurations serving ``shape`` by predicted time (all of them when none serves it)."""
        pool = [c for c in self.configs if c.serves(shape)] or self.configs
        return sorted(pool, key=lambda c: self.predict(c, shape))[:k]

    def _groups(self) -> list:
        """Configurations grouped by (tiles, loop tile, slots, limits): the grid arithmetic is done once per
        group.  Rebuilt when configurations are added or removed (a cheap check, as ``choose`` runs per
        launch); after changing a configuration in place, call ``invalidate``."""
        sig = (id(self.configs), len(self.configs))
        if self._table is None or self._table_of != sig:
            groups: dict = {}
            for c in self.configs:
                groups.setdefault((c.tiles, c.loop_tile, c.slots, c.limits), []).append((c, *c.coef))
            self._table = [(tiles, lt, slots, lim[0], lim[1], tuple(members))
                           for (tiles, lt, slots, lim), members in groups.items()]
            self._table_of = sig
        return self._table

    def invalidate(self) -> None:
        self._table = None

    def choose(self, shape) -> ConfigModel:
        """The serving configuration of least predicted time: plain arithmetic over precomputed tuples
        (a few µs for tens of configurations); when none serves ``shape``, the least over all."""
        best = self._argmin(shape, True)
        return best if best is not None else self._argmin(shape, False)

    def _argmin(self, shape, limited: bool) -> ConfigModel | None:
        best, best_t = None, float("inf")
        d0 = shape[0]
        two = len(shape) == 3
        for tiles, lt, slots, lo, hi, members in self._groups():
            if limited and (d0 < lo or d0 > hi):
                continue
            if two and len(tiles) == 2:  # GEMM-like (M, N, K): no loop, no zip
                ctas = -(-d0 // tiles[0]) * -(-shape[1] // tiles[1])
                work = -(-shape[2] // lt) if lt else 1
            else:
                ctas = 1
                for s, t in zip(shape, tiles):
                    ctas *= -(-s // t)
                work = -(-shape[len(tiles)] // lt) if lt else 1
            waves, sub = -(-ctas // slots), (ctas % slots) / slots
            for cfg, c0, c1, c2, c3 in members:
                t = c0 + work * (c1 * waves + c2 * ctas + c3 * sub)
                if t < best_t:
                    best, best_t = cfg, t
        return best

    def to_json(self) -> list:
        return [{"name": c.name, "tiles": list(c.tiles), "loop_tile": c.loop_tile, "slots": c.slots,
                 "coef": list(c.coef), "limits": list(c.limits)} for c in self.configs]

    @classmethod
    def from_json(cls, data) -> CostModel:
        return cls([ConfigModel(d["name"], tuple(d["tiles"]), d["loop_tile"], d["slots"], tuple(d["coef"]),
                                tuple(d.get("limits", (0, 1 << 62)))) for d in data])
