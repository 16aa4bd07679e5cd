"""A decomposed, scheduled launch as text: what ``python -m wavec perf`` prints.

Requires: a :class:`~wavec.perf.decompose.Decomposition`, its :class:`~wavec.perf.schedule.Schedule` and
:class:`~wavec.perf.features.Features`.

Guarantees: :func:`format_report` names the kernel, target, tasks, occupancy and its limiter; each demand
key's GPU total and its per-task minimum and maximum (unequal tasks show); each pipeline's and memory
level's theoretical time and cycles at GPU level and at the busiest SM; the roofline time and its
bottleneck; and the decomposition's and schedule's notes.  :func:`format_estimate` prints an
:class:`~wavec.perf.estimator.Estimate`.
"""

from __future__ import annotations

from .decompose import Decomposition
from .estimator import Estimate
from .features import Features, bottleneck, roofline
from .schedule import Schedule

__all__ = ["format_report", "format_estimate"]


def _num(x: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def format_report(decomp: Decomposition, sched: Schedule, feats: Features) -> str:
    occ = sched.occupancy
    lines = [
        f"{decomp.kernel} on {sched.gpu.name} (target {decomp.target}): {decomp.tasks} tasks (grid {decomp.grid}), "
        f"{decomp.threads} threads, {decomp.shared_bytes} B shared, {occ.registers} registers",
        f"occupancy {occ.blocks_per_sm} per SM (limited by {occ.limiter}); {sched.policy}: busiest SM runs "
        f"{int(sched.tasks_per_sm.max())} tasks in {sched.waves} wave(s)",
        f"{'demand':<24}{'total':>10}{'task min':>10}{'task max':>10}",
    ]
    for key, values in sorted(decomp.demand.items()):
        lines.append(f"{key:<24}{_num(values.sum()):>10}{_num(values.min()):>10}{_num(values.max()):>10}")
    lines.append(f"{'theoretical time (us)':<24}{'GPU':>10}{'SM':>10}{'GPU cycles':>12}{'SM cycles':>12}")
    cycles = feats.cycles()
    for name in dict.fromkeys(k.partition(".")[0] for k in cycles):
        gpu_c, sm_c = cycles.get(f"{name}.gpu", 0.0), cycles.get(f"{name}.sm", 0.0)
        gpu_us, sm_us = gpu_c / feats.clock_hz * 1e6, sm_c / feats.clock_hz * 1e6
        lines.append(f"{name:<24}{gpu_us:>10.2f}{sm_us:>10.2f}{_num(gpu_c):>12}{_num(sm_c):>12}")
    lines.append(f"roofline {roofline(feats) * 1e6:.2f} us, bottleneck {bottleneck(feats)}")
    lines.extend(f"note: {n}" for n in [*decomp.notes, *sched.notes])
    return "\n".join(lines)


def format_estimate(est: Estimate, family: str) -> str:
    """The MLPs' answer: predicted time and efficiency, the P80 ceiling, the bottleneck."""
    return (
        f"predicted {est.time_s * 1e6:.2f} us (efficiency {est.efficiency:.2f} of the roofline), "
        f"ceiling {est.ceiling_s * 1e6:.2f} us (P80 efficiency {est.ceiling_efficiency:.2f}), "
        f"bottleneck {est.bottleneck} [{family} model trained on {est.trained_on}]"
    )
