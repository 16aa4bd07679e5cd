"""Evaluating a tuner (what ``benchmarks/tune_gemm.py`` decides with): fit / held-out shapes, regret, a
covering portfolio of configurations and the held-out search plan within a time budget.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .devices import DEVICES


def dedupe(shapes: Iterable[Sequence[int]]) -> list[tuple[int, ...]]:
    """Distinct shapes in first-seen order."""
    seen: dict = {}
    for s in shapes:
        seen.setdefault(tuple(int(x) for x in s), None)
    return list(seen)


def split_shapes(
    shapes: Sequence[Sequence[int]],
    *,
    max_fit: int = 25,
    fit_fraction: float = 2 / 3,
    seed: int = 0,
    sms: int = DEVICES["H100"].sms,  # pinned: the split must not depend on the machine
    ref_tile: int = 128,
    classes: Callable[[tuple[int, ...]], Iterable] | None = None,
) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(fit shapes, held-out shapes in a seeded random order) of the distinct ``shapes``: at most
    ``floor(fit_fraction * n)`` fit shapes, and at most ``max_fit`` in total or, with ``classes`` (shape ->
    the classes of configurations serving it, e.g. ``gemm.fit_classes``), per class.  Fit shapes are dealt
    round-robin over the groups of equal M, each the shape farthest (``cover_coords``) from those picked
    so far, so the fit set spans grid fill and K."""
    uniq = sorted(dedupe(shapes))
    limit = int(fit_fraction * len(uniq))
    if classes is None:
        limit = min(limit, max_fit)
    groups: dict = {}
    for s in uniq:
        groups.setdefault(s[0], []).append(s)
    member = {k: set(classes(g[0])) if classes else set() for k, g in groups.items()}  # classes depend on M only
    x = {s: cover_coords(s, sms, ref_tile) for s in uniq}
    quota = dict.fromkeys(groups, 0)
    used: dict = {}
    fit: list = []
    while len(fit) < limit:
        open_keys = [
            k for k in sorted(groups) if quota[k] < len(groups[k]) and all(used.get(c, 0) < max_fit for c in member[k])
        ]
        if not open_keys:
            break
        key = min(open_keys, key=lambda k: (quota[k], k))
        pool = [s for s in groups[key] if s not in fit]
        if fit:
            pick = max(pool, key=lambda s: (min(math.dist(x[s], x[f]) for f in fit), s))
        else:
            pick = pool[len(pool) // 2]
        fit.append(pick)
        quota[key] += 1
        for c in member[key]:
            used[c] = used.get(c, 0) + 1
    held = [s for s in uniq if s not in set(fit)]
    random.Random(seed).shuffle(held)
    return sorted(fit), held


def cover_coords(shape: Sequence[int], sms: int = DEVICES["H100"].sms, ref_tile: int = 128) -> tuple[float, ...]:
    """Where a shape lies for the fit-shape cover: (½·log2 M, log2 grid fill, ½·log2 reduction), the fill
    being CTAs of ``ref_tile``-square tiles per SM (M counts half: it is also the stratum)."""
    ctas = math.prod(-(-d // ref_tile) for d in shape[:-1])
    return 0.5 * math.log2(shape[0]), math.log2(ctas / sms), 0.5 * math.log2(shape[-1])


def regret(times: Mapping, pick) -> float:
    """``times[pick] / min(times) - 1``: 0 when ``pick`` is the fastest measured configuration."""
    best = min(times.values())
    return times[pick] / best - 1.0


def summary(values: Iterable[float]) -> dict:
    vals = list(values)
    if not vals:
        return {"n": 0, "mean": math.nan, "max": math.nan, "median": math.nan}
    return {"n": len(vals), "mean": sum(vals) / len(vals), "max": max(vals), "median": statistics.median(vals)}


def geomean(values: Iterable[float]) -> float:
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else math.nan


def portfolio(times_by_shape: Mapping[object, Mapping[str, float]], tol: float = 0.02) -> list[str]:
    """A small set of configurations giving every shape one within ``tol`` of its best time: greedy set
    cover (ties: the lower geometric mean of time / best over the shapes it was timed on)."""
    near: dict[str, set] = {}
    ratio_logs: dict[str, list[float]] = {}
    for shape, times in times_by_shape.items():
        best = min(times.values())
        for name, t in times.items():
            ratio_logs.setdefault(name, []).append(math.log(t / best))
            if t <= best * (1.0 + tol):
                near.setdefault(name, set()).add(shape)
    mean_log = {n: sum(v) / len(v) for n, v in ratio_logs.items()}
    todo, chosen = set(times_by_shape), []
    while todo:
        name = max(near, key=lambda n: (len(near[n] & todo), -mean_log[n], n))
        chosen.append(name)
        todo -= near.pop(name)
    return chosen


@dataclass
class Plan:
    """Which shapes get an exhaustive search (``exhaustive``) and which only the top-k (``pruned``)."""

    exhaustive: list = field(default_factory=list)
    pruned: list = field(default_factory=list)
    estimate_s: float = 0.0
    fits: bool = True
    notes: list[str] = field(default_factory=list)


def plan_holdout(
    held: Sequence,
    exhaustive_s: Callable[[object], float],
    pruned_s: Callable[[object], float],
    *,
    min_exhaustive: int,
    budget_s: float,
) -> Plan:
    """Split ``held`` (in order) into shapes searched exhaustively and shapes the model prunes, within
    ``budget_s``: the first ``min_exhaustive`` always exhaustive (the regret evaluation needs them), each
    later one while the exhaustive shapes so far plus the pruned cost of the rest stay within budget.
    ``fits`` is False when even the minimum does not fit."""
    plan = Plan()
    ex = [exhaustive_s(s) for s in held]
    pr = [pruned_s(s) for s in held]
    must = min(min_exhaustive, len(held))
    spent = sum(ex[:must])
    rest_pruned = sum(pr[must:])
    plan.exhaustive = list(held[:must])
    for i in range(must, len(held)):
        rest_pruned -= pr[i]
        if spent + ex[i] + rest_pruned <= budget_s:
            spent += ex[i]
            plan.exhaustive.append(held[i])
        else:
            spent += pr[i]
            plan.pruned.append(held[i])
    plan.estimate_s = spent + rest_pruned
    plan.fits = plan.estimate_s <= budget_s
    if plan.pruned:
        plan.notes.append(
            f"{len(plan.pruned)} of {len(held)} held-out shapes get only the model's top-k "
            f"(exhaustive on all would take ~{sum(ex):.0f} s of a {budget_s:.0f} s share)"
        )
    if not plan.fits:
        plan.notes.append(
            f"the {must} shapes that must be searched exhaustively need ~{plan.estimate_s:.0f} s, "
            f"over the {budget_s:.0f} s share"
        )
    return plan
