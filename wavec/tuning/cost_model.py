"""Wave-quantisation cost model: per configuration, time as a function of the CTA grid.

For ``slots = sms * ctas_per_sm`` resident workgroups and a launch of ``ctas`` workgroups of ``work`` units
(GEMM: K-loop iterations, ``ceil(K / BLOCK_K)``)::

    t = c0 + c1 * waves + work * (c2 * rounds + c3 * ctas + c4 * sub + c5 * sm_waves + c6 * perimeter)

    waves     = ceil(ctas / slots)              sub       = (ctas mod slots) / slots  (fill of a partial last wave)
    sm_waves  = ceil(ctas / sms)                perimeter = sum_i grid_i * tile_i / 1024
    rounds    = sum over the waves of max(knee, fill of the wave)   (knee = 1: rounds = waves)

``c0`` is launch/startup, ``c1`` the fixed part of a wave, ``c2`` one K step of a full wave, ``c5`` one
K step per CTA queued on the busiest SM, ``c6`` one K step of the compulsory panel traffic; ``c3`` and
``c4`` (the earlier form, kept for stored models) are 0 in ``fit_config``'s non-negative least squares
per knee of ``KNEES`` (docs/tuning.md, "Cost model terms").  ``CostModel.choose`` is plain Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_POINTS = 25
N_COEF = 7
TERMS = ("startup", "wave", "round*k", "cta*k", "subwave*k", "sm_wave*k", "perimeter*k")
FITTED = (0, 1, 2, 5, 6)  # the terms fit_config fits; cta*k and subwave*k stay 0 (see the module docstring)
KNEES = (0.25, 0.5, 1.0)  # fill of a wave below which a K step costs as much as at the knee
KNEE_TOL = 1.25  # a smaller knee only when it cuts the squared relative residual by more than this factor
OUTLIER = 0.2  # relative residual beyond which a fit shape is taken for a measuring glitch
MAX_DROP = 0.15  # at most this fraction of the fit shapes is dropped as glitches (at least one may be)


def rounds(ctas: int, slots: int, knee: float = 1.0) -> float:
    """Sum over the launch's waves of max(knee, fill of the wave): ``waves`` when ``knee`` is 1."""
    full, rem = divmod(ctas, slots)
    return full * max(knee, 1.0) + (max(knee, rem / slots) if rem else 0.0)


def features(
    ctas: int, slots: int, work: float = 1.0, sms: int | None = None, perimeter: float = 0.0, *, knee: float = 1.0
) -> tuple[float, ...]:
    """The model's regressors for one launch (``sms`` defaults to ``slots``: one CTA per SM)."""
    sms = sms or slots
    waves = -(-ctas // slots)
    r = waves if knee == 1.0 else rounds(ctas, slots, knee)
    return (
        1.0,
        float(waves),
        work * r,
        work * ctas,
        work * (ctas % slots) / slots,
        work * -(-ctas // sms),
        work * perimeter,
    )


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


def _spread(rows, max_points: int) -> list:
    """At most ``max_points`` of ``rows``, evenly spread over the list."""
    pts = list(rows)
    if not pts:
        raise ValueError("fit needs at least one point")
    if len(pts) > max_points:
        step = len(pts) / max_points
        pts = [pts[int(i * step)] for i in range(max_points)]
    return pts


def _solve(pts) -> tuple[tuple[float, ...], float]:
    """(NNLS coefficients, squared relative residual) of ``[(features, seconds), ...]``.  Each row is
    weighted by 1 / seconds (relative error: a 10 µs decode launch counts as much as a 10 ms prefill) and
    each column scaled to unit maximum, so NNLS's tolerance means the same for every term."""
    import numpy as np

    a = np.array([f for f, _t in pts], dtype=float)
    y = np.array([t for _f, t in pts], dtype=float)
    w = 1.0 / np.where(y > 0, y, 1.0)
    a, y = a * w[:, None], y * w
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    x = nnls(a / scale, y)
    return tuple(float(c) for c in x / scale), float(np.sum((a @ (x / scale) - y) ** 2))


def solve(rows) -> tuple[tuple[float, ...], float]:
    """(non-negative coefficients, squared relative residual) of ``rows = [(features, seconds), ...]``
    with any regressors (the NNLS of every fit here; ``tuning/moe.py`` fits its own terms with it)."""
    return _solve(list(rows))


def fit(rows, max_points: int = MAX_POINTS) -> tuple[float, ...]:
    """Non-negative coefficients of every feature from ``rows = [(features(...), seconds), ...]`` (at most
    ``max_points`` rows, evenly spread)."""
    return _solve(_spread(rows, max_points))[0]


def _fit_knees(launches, knees) -> tuple[float, tuple[float, ...], float]:
    """(knee, 7 coefficients, residual): per knee an NNLS over the ``FITTED`` terms; the largest knee whose
    residual is within ``KNEE_TOL`` of the least (a lone CTA's latency-bound step unless the data clearly
    shows a bandwidth ramp below the full wave)."""
    sols = []
    for knee in knees:
        rows = [
            ([features(ctas, slots, work, sms, per, knee=knee)[j] for j in FITTED], t)
            for (ctas, slots, work, sms, per), t in launches
        ]
        part, res = _solve(rows)
        fitted = dict(zip(FITTED, part))
        sols.append((knee, tuple(fitted.get(j, 0.0) for j in range(N_COEF)), res))
    least = min(r for _k, _c, r in sols)
    return max((s for s in sols if s[2] <= KNEE_TOL * least), key=lambda s: s[0])


def fit_config(launches, max_points: int = MAX_POINTS, knees=KNEES) -> tuple[float, tuple[float, ...]]:
    """(knee, coefficients) of one configuration from ``launches = [((ctas, slots, work, sms, perimeter),
    seconds), ...]`` (at most ``max_points`` used).  Refitted once without the launches missed by more than
    ``OUTLIER`` (relative), at most ``MAX_DROP`` of them (at least one may go): a single glitched timing
    (the H100 run timed one 20 µs launch at 219 µs) otherwise sets the startup term of a whole fit."""
    pts = _spread(launches, max_points)
    knee, coef, _res = _fit_knees(pts, knees)
    miss = [abs(predict(coef, *x, knee=knee) - t) / t for x, t in pts]
    worst = sorted(range(len(pts)), key=lambda i: -miss[i])[: max(1, int(MAX_DROP * len(pts)))]
    drop = {i for i in worst if miss[i] > OUTLIER}
    if drop and len(pts) - len(drop) >= 2:
        knee, coef, _res = _fit_knees([p for i, p in enumerate(pts) if i not in drop], knees)
    return knee, coef


def predict(
    coef, ctas: int, slots: int, work: float = 1.0, sms: int | None = None, perimeter: float = 0.0, *, knee: float = 1.0
) -> float:
    return sum(c * f for c, f in zip(coef, features(ctas, slots, work, sms, perimeter, knee=knee)))


def _widen(coef) -> tuple[float, ...]:
    """Coefficients of a stored model of the earlier form ``(c0, per wave·k, per CTA·k, sub·k)``."""
    if len(coef) == 4:
        return (coef[0], 0.0, coef[1], coef[2], coef[3], 0.0, 0.0)
    if len(coef) != N_COEF:
        raise ValueError(f"{len(coef)} coefficients; the model has {N_COEF} ({', '.join(TERMS)})")
    return tuple(coef)


@dataclass
class ConfigModel:
    """A configuration's workgroup ``tiles`` along the grid's dimensions, reduction step ``loop_tile`` (0:
    none), the device's ``sms`` (0: ``slots``), the ``knee`` (``fit_config``'s; 1: the earlier form's
    ``waves``) and the range ``limits`` of the first grid dimension it serves (``choose`` does not
    extrapolate beyond it: 16-row GEMM tiles only for M <= 64)."""

    name: str
    tiles: tuple[int, ...]
    loop_tile: int
    slots: int
    coef: tuple[float, ...] = (0.0,) * N_COEF
    limits: tuple[int, int] = (0, 1 << 62)
    sms: int = 0
    knee: float = 1.0

    def __post_init__(self) -> None:
        self.coef = _widen(self.coef)

    def serves(self, shape) -> bool:
        return self.limits[0] <= shape[0] <= self.limits[1]

    def launch(self, shape) -> tuple:
        """``(ctas, slots, work, sms, perimeter)`` of a launch over ``shape`` (``fit_config``'s input)."""
        ctas, per = grid(shape, self.tiles)
        work = -(-shape[len(self.tiles)] // self.loop_tile) if self.loop_tile else 1
        return ctas, self.slots, work, self.sms or self.slots, per

    def features(self, shape) -> tuple[float, ...]:
        return features(*self.launch(shape), knee=self.knee)


@dataclass
class CostModel:
    """Chooses, for a shape ``(*grid dims, reduction)``, the configuration with the least predicted time."""

    configs: list[ConfigModel] = field(default_factory=list)
    _table: list | None = field(default=None, init=False, repr=False, compare=False)
    _table_of: tuple = field(default=(), init=False, repr=False, compare=False)
    _compiled: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def fit_shapes(self, cfg: ConfigModel, times) -> None:
        """Append ``cfg`` fitted (``fit_config``) to ``times = [(shape, seconds), ...]`` (≤ 25 used)."""
        cfg.knee, cfg.coef = fit_config([(cfg.launch(shape), t) for shape, t in times])
        self.configs.append(cfg)
        self.invalidate()

    def predict(self, cfg: ConfigModel, shape) -> float:
        return sum(c * f for c, f in zip(cfg.coef, cfg.features(shape)))

    def rank(self, shape, k: int | None = None) -> list[ConfigModel]:
        """Configurations serving ``shape`` by predicted time (all of them when none serves it)."""
        pool = [c for c in self.configs if c.serves(shape)] or self.configs
        return sorted(pool, key=lambda c: self.predict(c, shape))[:k]

    def _groups(self) -> list:
        """Configurations grouped by (tiles, loop tile, slots, SMs, limits), the grid arithmetic done once per
        group; rebuilt when configurations are added or removed (after changing one in place: ``invalidate``)."""
        sig = (id(self.configs), len(self.configs))
        if self._table is None or self._table_of != sig:
            groups: dict = {}
            for c in self.configs:
                key = (c.tiles, c.loop_tile, c.slots, c.sms or c.slots, c.limits)
                groups.setdefault(key, []).append((c, c.knee, *c.coef))
            self._table = [
                (tiles, lt, slots, sms, lim[0], lim[1], tuple(members))
                for (tiles, lt, slots, sms, lim), members in groups.items()
            ]
            self._table_of = sig
        return self._table

    def invalidate(self) -> None:
        self._table = self._compiled = None

    def choose(self, shape) -> ConfigModel:
        """The serving configuration of least predicted time (when none serves ``shape``, the least over all).
        GEMM-like shapes go through the model compiled to straight-line Python (``_compile_gemm``): a few
        dozen configurations in a few µs on the host."""
        if len(shape) == 3:
            fn, cfgs = self._gemm_argmin()
            if fn is not None:
                i = fn(*shape)
                return cfgs[i if i >= 0 else fn(*shape, True)]
        best = self._argmin(shape, True) or self._argmin(shape, False)
        if best is None:
            raise ValueError("the cost model has no configurations")
        return best

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
            launch = ConfigModel("", tiles, lt, slots, sms=sms).launch(shape)
            for cfg, knee, *coef in members:
                t = predict(coef, *launch, knee=knee)
                if t < best_t:
                    best, best_t = cfg, t
        return best

    def to_json(self) -> list:
        return [asdict(c) for c in self.configs]

    @classmethod
    def from_json(cls, data) -> CostModel:
        """Inverse of ``to_json``; entries of the earlier form lack ``limits``, ``sms`` and ``knee``."""
        rows: list[dict[str, Any]] = [{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()} for d in data]
        return cls([ConfigModel(**row) for row in rows])


def _term(coef: float, expr: str) -> str:
    return f" + {coef!r} * {expr}" if coef else ""


def _rounds_expr(knee: float) -> str:
    """``rounds(ctas, slots, knee)`` in the generated code's names (``full`` waves, ``sub`` the last's fill)."""
    if knee == 1.0:
        return "waves"
    full = "full" if knee <= 1.0 else f"full * {knee!r}"
    return f"({full} + (sub if sub > {knee!r} else {knee!r}) if sub else {full})"


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
            members
        )
    lines = ["def argmin(m, n, k, unlimited=False):", "    best, bt = -1, float('inf')"]
    cfgs: list = []
    for (lo, hi), tiles in tree.items():
        lines.append(f"    if unlimited or {lo} <= m <= {hi}:")
        for (bm, bn), by_slots in tiles.items():
            lines += [
                f"        gm = -(-m // {bm}); gn = -(-n // {bn}); ctas = gm * gn",
                f"        per = (gm * {bm} + gn * {bn}) / 1024.0",
            ]
            for (slots, sms), by_lt in by_slots.items():
                lines.append(
                    f"        waves = -(-ctas // {slots}); sub = (ctas % {slots}) / {slots}; "
                    f"smw = -(-ctas // {sms}); full = ctas // {slots}"
                )
                for lt, members in by_lt.items():
                    lines.append(f"        w = {f'-(-k // {lt})' if lt else '1'}")
                    for cfg, knee, c0, c1, *k_coef in members:  # the terms of one K step: c2..c6
                        k_names = (_rounds_expr(knee), "ctas", "sub", "smw", "per")
                        k_terms = "".join(_term(c, e) for c, e in zip(k_coef, k_names))
                        expr = f"{c0!r}{_term(c1, 'waves')}" + (f" + w * (0.0{k_terms})" if k_terms else "")
                        lines += [f"        t = {expr}", f"        if t < bt: best, bt = {len(cfgs)}, t"]
                        cfgs.append(cfg)
    lines.append("    return best")
    scope: dict = {}
    exec(compile("\n".join(lines), "<cost model>", "exec"), scope)  # noqa: S102 - our own generated source
    return scope["argmin"], cfgs
