"""Timing for the autotuner: CUDA-event measurements, interleaved rounds (``time_candidates``), races
that drop the slow candidates early (``race_candidates``), and a progress bar on stderr."""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass


def cuda_event_timer(candidate, fn: Callable[[], object], reps: int = 10) -> float:
    """Seconds per call of ``fn``: CUDA events around ``reps`` back-to-back calls."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


class _Progress:
    def __init__(self, total: int, label: str, enabled: bool, width: int = 30) -> None:
        self.total, self.label, self.enabled, self.width, self.done = total, label, enabled, width, 0
        self.t0 = time.perf_counter()
        self._draw()

    def _draw(self) -> None:
        if not self.enabled or not self.total:
            return
        fill = self.width * self.done // self.total
        sys.stderr.write(
            f"\r{self.label:>8} [{'#' * fill}{'.' * (self.width - fill)}] {self.done}/{self.total} "
            f"{time.perf_counter() - self.t0:5.1f}s"
        )
        sys.stderr.flush()

    def step(self, n: int = 1) -> None:
        # redraw only when the bar grows (or at the end): a captured log stays ~30 lines per bar, not thousands
        before = self.width * self.done // max(1, self.total)
        self.done += n
        if self.width * self.done // max(1, self.total) != before or self.done >= self.total:
            self._draw()

    def close(self) -> None:
        if self.enabled and self.total:
            sys.stderr.write("\n")


def time_candidates(
    runners: dict, timer, *, warmup: int, rounds: int, seed: int = 0, progress: bool = True, label: str = "time"
) -> dict:
    """Median seconds per candidate; each round times every candidate once in a shuffled order."""
    cands = list(runners)
    bar = _Progress(len(cands) * (warmup + rounds), label, progress)
    for c in cands:
        for _ in range(warmup):
            timer(c, runners[c])
            bar.step()
    samples = {c: list[float]() for c in cands}
    rng = random.Random(seed)
    for _ in range(rounds):
        order = cands[:]
        rng.shuffle(order)
        for c in order:
            samples[c].append(float(timer(c, runners[c])))
            bar.step()
    bar.close()
    return {c: statistics.median(s) for c, s in samples.items()}


@dataclass
class Race:
    """Samples (seconds per launch) and the clock time spent measuring, per candidate."""

    samples: dict
    cost_s: dict
    dropped: dict  # candidate -> round after which it stopped being timed

    def medians(self) -> dict:
        return {c: statistics.median(s) for c, s in self.samples.items() if s}


def race_candidates(
    runners: dict,
    timer,
    *,
    rounds: int = 3,
    keep_within: float = 0.10,
    always=(),
    warmup: int = 0,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
    progress: bool = False,
    label: str = "race",
) -> Race:
    """Interleaved timing that spends its repeats on the contenders: each round times the active candidates
    once, in a fresh shuffled order; after it, one whose fastest sample is over ``keep_within`` slower than
    the best median drops out (one sample of a 10 % slower configuration still serves a cost-model fit).
    ``always`` (references such as a baseline) are timed every round; ``warmup`` untimed calls come first."""
    cands = list(runners)
    keep = set(always) & set(cands)
    rng = random.Random(seed)
    samples = {c: list[float]() for c in cands}
    cost = dict.fromkeys(cands, 0.0)
    dropped: dict = {}
    bar = _Progress(len(cands) * (warmup + rounds), label, progress)
    for c in cands:
        for _ in range(warmup):
            runners[c]()
            bar.step()
    active = cands[:]
    for r in range(rounds):
        order = active[:]
        rng.shuffle(order)
        for c in order:
            t0 = clock()
            samples[c].append(float(timer(c, runners[c])))
            cost[c] += clock() - t0
            bar.step()
        bar.step(len(cands) - len(active))
        contenders = [c for c in active if c not in keep]  # references never set the pace
        if contenders:
            lead = min(statistics.median(samples[c]) for c in contenders)
            still = [c for c in active if c in keep or min(samples[c]) <= lead * (1.0 + keep_within)]
            dropped.update((c, r + 1) for c in active if c not in still)
            active = still
    bar.close()
    return Race(samples, cost, dropped)
