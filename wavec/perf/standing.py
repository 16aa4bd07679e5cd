"""Where a measured call stands against the performance model's P80 ceiling (issue #22, "every benchmark
reports percent of the ceiling and lists underperforming points"): run the call once under
``wavec.runtime.trace_launches()``, predict each launch it made (``forward.predict_launches``) and set the
summed roofline, predicted and ceiling times against the time a benchmark measured for the same call.

Requires: the call launches wavec kernels (on a GPU, or the emulator for tests) and is repeatable (it runs
once more here, untimed); the shipped weights.

Guarantees:

* :func:`standing` returns a :class:`Standing` whose times sum the call's modelled launches; launches of no
  modelled family (``forward.family_of`` None: odd-length rows, split-KV decode, MoE GEMMs) or that the
  decomposer cannot walk (a ``PerfError``) are named in ``unmodelled``, and then ``of_ceiling`` / ``gap``
  are None (a partial sum would flatter the call).
* ``of_ceiling`` is the ceiling time over the measured time (1.0: at the ceiling; above 1: faster than the
  model's P80); ``gap`` is the ceiling's efficiency less the measured one (roofline over time, SynPerf's
  measure), and ``underperforming`` holds where it exceeds ``GAP``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wavec.errors import PerfError

from .forward import predict_launches

__all__ = ["GAP", "Standing", "standing"]

GAP = 0.1  # SynPerf: a point more than 0.1 of efficiency below its ceiling is underperforming


@dataclass(frozen=True)
class Standing:
    """A measured call against the model (module docstring)."""

    measured_s: float
    roofline_s: float
    time_s: float
    ceiling_s: float
    launches: int
    unmodelled: tuple[str, ...]

    @property
    def of_ceiling(self) -> float | None:
        return None if self.unmodelled or self.launches == 0 else self.ceiling_s / self.measured_s

    @property
    def gap(self) -> float | None:
        if self.of_ceiling is None:
            return None
        return self.roofline_s / self.ceiling_s - self.roofline_s / self.measured_s

    @property
    def underperforming(self) -> bool:
        return self.gap is not None and self.gap > GAP

    def cell(self) -> str:
        """A table cell: ``0.93 of ceiling``, with ``(under)`` past ``GAP``, or what was not modelled."""
        if self.of_ceiling is None:
            names = ", ".join(sorted(set(self.unmodelled))) or "no launch"
            return f"n/a ({names})"
        return f"{self.of_ceiling:.2f}" + (" (under)" if self.underperforming else "")


def standing(call: Callable[[], Any], measured_s: float, gpu_name: str) -> Standing:
    """``call`` run once under a launch trace, its launches predicted on ``gpu_name`` (``wavec.perf.gpu``'s
    names), against ``measured_s`` seconds a benchmark timed for one call."""
    from wavec.runtime import trace_launches

    if not measured_s > 0:
        raise ValueError(f"standing: measured_s must be a positive time in seconds, got {measured_s!r}")
    with trace_launches() as launches:
        call()
    roof = time = ceiling = 0.0
    missing = []
    for launch in launches:
        try:
            (p,) = predict_launches([launch], gpu_name)
        except PerfError as e:  # a kernel the decomposer cannot walk (an scf.while loop): named, not fatal
            missing.append(f"{launch.kernel}: {type(e).__name__}")
            continue
        if p.estimate is None:
            missing.append(p.kernel)
            continue
        roof += p.estimate.roofline_s
        time += p.estimate.time_s
        ceiling += p.estimate.ceiling_s
    return Standing(measured_s, roof, time, ceiling, len(launches), tuple(missing))
