"""Wave-quantisation cost model: per configuration, time as a function of the CTA grid.

For a configuration with ``slots = sms * ctas_per_sm`` resident workgroups and a launch of ``ctas``
workgroups, each doing ``work`` units (for GEMM: K-loop iterations, ``ceil(K / BLOCK_K)``)::

    t = c0 + c1 * waves + work * (c2 * waves + c3 * ctas + c4 * sub + c5 * sm_waves + c6 * perimeter)

    waves     = ceil(ctas / slots)              sub      = (ctas mod slots) / slots  (fill of a partial last wave)
    sm_waves  = ceil(ctas / sms)                perimeter = sum_i grid_i * tile_i / 1024

``c0`` is launch/startup; ``c1`` the fixed part of a wave (prologue, epilogue); ``c2`` one K step of a
wave (latency-bound: a lone CTA costs this); ``c3`` one K step of each extra CTA (bandwidth that all CTAs
share); ``c4`` what a partial last wave's fill adds; ``c5`` one K step per CTA queued on the busiest SM
(co-resident CTAs share its tensor cores, so a grid of 1.5 SMs' worth runs at 2 per SM on most SMs);
``c6`` one K step of the grid's compulsory traffic: each grid row reads its A panel and each column its B
panel once (``grid_m * BLOCK_M + grid_n * BLOCK_N`` rows of BLOCK_K), which decides small-M GEMMs
whose operands stream from HBM.  Every coefficient is a cost, so all are fitted non-negative
(Lawson-Hanson NNLS on relative error): a free fit on a couple of dozen shapes trades a negative term for
a large positive one and predicts nonsense (negative times) for the under-filled grids it never saw.

``fit`` solves them from at most 25 profiled shapes; ``CostModel.choose`` is plain Python arithmetic over
precomputed tuples, fast enough to pick a configuration on the host at dispatch time, and to prune an
autotuning search to the configurations the model ranks best.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MAX_POINTS = 25
N_COEF = 7
TERMS = ("startup", "wave", "wave*k", "cta*k", "subwave*k", "sm_wave*k", "perimeter*k")


def features(ctas: int, slots: int, work: float = 1.0, sms: int | None = None,
             perimeter: float = 0.0) -> tuple[float, ...]:
    """The model's regressors for one launch (``sms`` defaults to ``slots``: one CTA per SM)."""
    sms = sms or slots
    waves = -(-ctas // slots)
    return (1.0, float(waves), work * waves, work * ctas, work * (ctas % slots) / slots,
            work * -(-ctas // sms), work * perimeter)


def grid(shape: Sequence[int], tiles: Sequence[int]) -> tuple[int, float]:
    """(CTAs, perimeter) of the launch grid of ``tiles`` over the leading dims of ``shape``."""
    ctas, per = 1, 0.0
    for s, t in zip(shape, tiles):
        g = -(-s // t)
        ctas *= g
        per += g * t
    return ctas, per / 1024.0


def nnls(a, y, max_iter: int = 200):
    """Lawson-Hanson non-negative least squares: ``argmin |a x - y|`` with ``x >= 0`` (numpy only)."""
    import numpy as np

    n = a.shape[1]
    passive = np.zeros(n, dtype=bool)
    x = np.zeros(n)
    grad = a.T @ y
    tol = 1e-12 * max(1.0, float(np.abs(grad).max()))
    for _ in range(max_iter):
        if passive.all() or grad[~passive].max() <= tol:
            break
        passive[int(np.argmax(np.where(passive, -np.inf, grad)))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], y, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)  # step back to the boundary, drop what hit zero
            alpha = float(np.min(x[neg] / (x[neg] - z[neg])))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
            x[~passive] = 0.0
        grad = a.T @ (y - a @ x)
    return x


def fit(rows, max_points: int = MAX_POINTS) -> tuple[float, ...]:
    """Coefficients from ``rows = [(features(...), seconds), ...]``, all non-negative.

    At most ``max_points`` rows are used (evenly spread over the list when there are more).  Each row is
    weighted by 1 / seconds (relative error: a 10 µs decode launch counts as much as a 10 ms prefill) and
    each column scaled to unit maximum, so NNLS's tolerance means the same for every term."""
    import numpy as np

    pts = list(rows)
    if not pts:
        raise ValueError("fit needs at least one point")
    if len(pts) > max_points:
        step = len(pts) / max_points
        pts = [pts[int(i * step)] for i in range(max_points)]
    a = np.array([f for f, _t in pts], dtype=float)
    y = np.array([t for _f, t in pts], dtype=float)
    w = 1.0 / np.where(y > 0, y, 1.0)
    a, y = a * w[:, None], y * w
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    return tuple(float(c) for c in nnls(a / scale, y) / scale)


def predict(coef, ctas: int, slots: int, work: float = 1.0, sms: int | None = None, perimeter: float = 0.0) -> float:
    return sum(c * f for c, f in zip(coef, features(ctas, slots, work, sms, perimeter)))


def _widen(coef) -> tuple[float, ...]:
    """Coefficients of a stored model of the earlier form ``(c0, per wave·k, per CTA·k, sub·k)``."""
    if len(coef) == 4:
        return (coef[0], 0.0, coef[1], coef[2], coef[3], 0.0, 0.0)
    if len(coef) != N_COEF:
        raise ValueError(f"{len(coef)} coefficients; the model has {N_COEF} ({', '.join(TERMS)})")
    return tuple(coef)


@dataclass
class ConfigModel:
    """A configuration's tiles and fitted coefficients.  ``tiles`` are the workgroup tiles along the
    launch grid's dimensions, ``loop_tile`` the reduction step (0: no reduction loop), ``sms`` the
    device's SMs (0: ``slots``).  ``limits`` is the range of the first grid dimension the configuration
    serves (e.g. 16-row GEMM tiles only for M <= 64): ``choose`` does not extrapolate beyond it."""

    name: str
    tiles: tuple[int, ...]
    loop_tile: int
    slots: int
    coef: tuple[float, ...] = (0.0,) * N_COEF
    limits: tuple[int, int] = (0, 1 << 62)
    sms: int = 0

    def __post_init__(self) -> None:
        self.coef = _widen(self.coef)

    def serves(self, shape) -> bool:
        return self.limits[0] <= shape[0] <= self.limits[1]

    def features(self, shape) -> tuple[float, ...]:
        ctas, per = grid(shape, self.tiles)
        work = -(-shape[len(self.tiles)] // self.loop_tile) if self.loop_tile else 1
        return features(ctas, self.slots, work, self.sms or self.slots, per)


@dataclass
class CostModel:
    """Chooses, for a shape ``(*grid dims, reduction)``, the configuration with the least predicted time."""

    configs: list[ConfigModel] = field(default_factory=list)
    _table: list | None = field(default=None, init=False, repr=False, compare=False)
    _table_of: tuple = field(default=(), init=False, repr=False, compare=False)
    _compiled: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def add(self, cfg: ConfigModel, rows) -> None:
        cfg.coef = fit(rows)
        self.configs.append(cfg)
        self.invalidate()

    def predict(self, cfg: ConfigModel, shape) -> float:
        return sum(c * f for c, f in zip(cfg.coef, cfg.features(shape)))

    def rank(self, shape, k: int | None = None) -> list[ConfigModel]:
        """Configurations serving ``shape`` by predicted time (all of them when none serves it)."""
        pool = [c for c in self.configs if c.serves(shape)] or self.configs
        return sorted(pool, key=lambda c: self.predict(c, shape))[:k]

    def _groups(self) -> list:
        """Configurations grouped by (tiles, loop tile, slots, SMs, limits): the grid arithmetic is done
        once per group.  Rebuilt when configurations are added or removed (a cheap check, as ``choose`` runs
        per launch); after changing a configuration in place, call ``invalidate``."""
        sig = (id(self.configs), len(self.configs))
        if self._table is None or self._table_of != sig:
            groups: dict = {}
            for c in self.configs:
                key = (c.tiles, c.loop_tile, c.slots, c.sms or c.slots, c.limits)
                groups.setdefault(key, []).append((c, *c.coef))
            self._table = [(tiles, lt, slots, sms, lim[0], lim[1], tuple(members))
                           for (tiles, lt, slots, sms, lim), members in groups.items()]
            self._table_of = sig
        return self._table

    def invalidate(self) -> None:
        self._table = self._compiled = None

    def choose(self, shape) -> ConfigModel:
        """The serving configuration of least predicted time; when none serves ``shape``, the least over all.
        GEMM-like shapes (two grid dims and a reduction) go through ``_gemm_argmin``, the model compiled to
        straight-line Python (constants inlined, zero coefficients dropped): a few dozen configurations in
        a few µs on the host."""
        if len(shape) == 3:
            fn, cfgs = self._gemm_argmin()
            if fn is not None:
                i = fn(*shape)
                return cfgs[i if i >= 0 else fn(*shape, True)]
        best = self._argmin(shape, True)
        return best if best is not None else self._argmin(shape, False)

    def _gemm_argmin(self):
        sig = (id(self.configs), len(self.configs))
        if self._compiled is None or self._compiled[0] != sig:
            self._compiled = (sig, *_compile_gemm(self._groups()))
        return self._compiled[1], self._compiled[2]

    def _argmin(self, shape, limited: bool) -> ConfigModel | None:
        best, best_t = None, float("inf")
        for tiles, lt, slots, sms, lo, hi, members in self._groups():
            if limited and not lo <= shape[0] <= hi:
                continue
            feats = ConfigModel("", tiles, lt, slots, sms=sms).features(shape)
            for cfg, *coef in members:
                t = sum(c * f for c, f in zip(coef, feats))
                if t < best_t:
                    best, best_t = cfg, t
        return best

    def to_json(self) -> list:
        return [{"name": c.name, "tiles": list(c.tiles), "loop_tile": c.loop_tile, "slots": c.slots,
                 "sms": c.sms, "coef": list(c.coef), "limits": list(c.limits)} for c in self.configs]

    @classmethod
    def from_json(cls, data) -> CostModel:
        return cls([ConfigModel(d["name"], tuple(d["tiles"]), d["loop_tile"], d["slots"], _widen(d["coef"]),
                                tuple(d.get("limits", (0, 1 << 62))), d.get("sms", 0)) for d in data])


def _term(coef: float, expr: str) -> str:
    return f" + {coef!r} * {expr}" if coef else ""


def _compile_gemm(groups: list) -> tuple:
    """``(argmin(m, n, k, unlimited=False) -> index or -1, configurations)`` for groups of 2-D tiles, as
    generated Python source, nested so each quantity is computed once: per M range the range check, per
    tile the grid, per slot count the waves, per K step the trip count, per configuration one expression
    of its non-zero terms.  (None, []) when some group is not a GEMM-like one."""
    if any(len(g[0]) != 2 for g in groups):
        return None, []
    tree: dict = {}
    for (bm, bn), lt, slots, sms, lo, hi, members in groups:
        tree.setdefault((lo, hi), {}).setdefault((bm, bn), {}).setdefault((slots, sms), {}).setdefault(lt, []).extend(
            members)
    lines = ["def argmin(m, n, k, unlimited=False):", "    best, bt = -1, float('inf')"]
    cfgs: list = []
    for (lo, hi), tiles in tree.items():
        lines.append(f"    if unlimited or {lo} <= m <= {hi}:")
        for (bm, bn), by_slots in tiles.items():
            lines += [f"        gm = -(-m // {bm}); gn = -(-n // {bn}); ctas = gm * gn",
                      f"        per = (gm * {bm} + gn * {bn}) / 1024.0"]
            for (slots, sms), by_lt in by_slots.items():
                lines.append(f"        waves = -(-ctas // {slots}); sub = (ctas % {slots}) / {slots}; "
                             f"smw = -(-ctas // {sms})")
                for lt, members in by_lt.items():
                    lines.append(f"        w = {f'-(-k // {lt})' if lt else '1'}")
                    for cfg, c0, c1, c2, c3, c4, c5, c6 in members:
                        k_terms = (_term(c2, "waves") + _term(c3, "ctas") + _term(c4, "sub") + _term(c5, "smw")
                                   + _term(c6, "per"))
                        expr = f"{c0!r}{_term(c1, 'waves')}" + (f" + w * (0.0{k_terms})" if k_terms else "")
                        lines += [f"        t = {expr}", f"        if t < bt: best, bt = {len(cfgs)}, t"]
                        cfgs.append(cfg)
    lines.append("    return best")
    scope: dict = {}
    exec(compile("\n".join(lines), "<cost model>", "exec"), scope)  # noqa: S102 - our own generated source
    return scope["argmin"], cfgs
