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


def fit(points, max_points: int = MAX_POINTS) -> tuple[float, float, float, float]:
    """Coefficients ``(c0, c1, c2, c3)`` from ``points = [(ctas, slots, work, seconds), ...]``.

    At most ``max_points`` are used (evenly spread over the list when there are more).  Least squares on
    relative error (each row weighted by 1 / seconds), minimum-norm: with fewer than four independent
    points the model is under-determined but still interpolates them."""
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
    coef, *_ = np.linalg.lstsq(a / scale, y, rcond=None)
    return tuple(float(c) for c in coef / scale)


def predict(coef, ctas: int, slots: int, work: float = 1.0) -> float:
    c0, c1, c2, c3 = coef
    waves = -(-ctas // slots)
    return c0 + work * (c1 * waves + c2 * ctas + c3 * (ctas % slots) / slots)


@dataclass
class ConfigModel:
    """A configuration's tiles and fitted coefficients.  ``tiles`` are the workgroup tiles along the
    launch grid's dimensions, ``loop_tile`` the reduction step (0: no reduction loop)."""

    name: str
    tiles: tuple[int, ...]
    loop_tile: int
    slots: int
    coef: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)


@dataclass
class CostModel:
    """Chooses, for a shape ``(*grid dims, reduction)``, the configuration with the least predicted time."""

    configs: list[ConfigModel] = field(default_factory=list)

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

    def rank(self, shape) -> list[ConfigModel]:
        return sorted(self.configs, key=lambda c: self.predict(c, shape))

    def choose(self, shape) -> ConfigModel:
        best, best_t = None, float("inf")
        for cfg in self.configs:
            t = self.predict(cfg, shape)
            if t < best_t:
                best, best_t = cfg, t
        return best

    def to_json(self) -> list:
        return [{"name": c.name, "tiles": list(c.tiles), "loop_tile": c.loop_tile, "slots": c.slots,
                 "coef": list(c.coef)} for c in self.configs]

    @classmethod
    def from_json(cls, data) -> CostModel:
        return cls([ConfigModel(d["name"], tuple(d["tiles"]), d["loop_tile"], d["slots"], tuple(d["coef"]))
                    for d in data])
