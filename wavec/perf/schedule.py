"""How a launch's tasks land on a GPU's SMs: occupancy, then round-robin (or greedy) assignment.

Requires: a :class:`~wavec.perf.decompose.Decomposition` and a :class:`~wavec.perf.gpus.GPUSpec`; the
registers per thread from the artifact (ptxas's report, recorded when the cubin was assembled) or given.

Guarantees:

* :func:`occupancy`: resident workgroups per SM, the least of the thread, warp, block, register and
  shared-memory limits, and which one binds; a workgroup that cannot fit at all raises
  :class:`~wavec.errors.PerfError`.  Registers are allocated per warp in ``register_granule`` units;
  shared memory adds the per-block reservation.  Unknown registers leave that limit out (noted).
* :func:`schedule`: ``sm_of_task`` for every task and the per-SM demand (every demand key, summed over the
  SM's tasks).  ``round_robin``: task ``i`` on SM ``i mod SMs``, the hardware's dispatch order for equal
  tasks.  ``greedy``: each task in launch order to the resident slot that frees first, with a task's
  cost its busiest pipeline on one SM (what matters when tasks are unequal, as in causal attention).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from ..errors import OptionError, PerfError
from .decompose import Decomposition
from .gpus import GPUSpec

__all__ = ["Occupancy", "Schedule", "occupancy", "schedule", "task_cycles"]

POLICIES = ("round_robin", "greedy")


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    limiter: str
    limits: dict[str, int]
    registers: int | None


@dataclass
class Schedule:
    """``sm_of_task[t]``: the SM task ``t`` runs on; ``per_sm[key][s]``: SM ``s``'s demand."""

    gpu: GPUSpec
    occupancy: Occupancy
    policy: str
    sm_of_task: np.ndarray
    per_sm: dict[str, np.ndarray]
    notes: list[str] = field(default_factory=list)

    @property
    def tasks_per_sm(self) -> np.ndarray:
        return np.bincount(self.sm_of_task, minlength=self.gpu.sms)

    @property
    def waves(self) -> int:
        """Rounds of resident workgroups the busiest SM runs."""
        return int(-(-int(self.tasks_per_sm.max()) // self.occupancy.blocks_per_sm))

    def busiest(self, prefix: str) -> tuple[int, float]:
        """(SM, demand) of the SM with the most demand under keys starting with ``prefix``."""
        total = sum((v for k, v in self.per_sm.items() if k.startswith(prefix)), np.zeros(self.gpu.sms))
        sm = int(np.argmax(total))
        return sm, float(total[sm])


def occupancy(decomp: Decomposition, gpu: GPUSpec, registers: int | None = None) -> Occupancy:
    regs = registers if registers is not None else decomp.registers
    warps = -(-decomp.threads // gpu.threads_per_warp)
    limits = {
        "threads": gpu.max_threads_per_sm // decomp.threads,
        "warps": gpu.max_warps_per_sm // warps,
        "blocks": gpu.max_blocks_per_sm,
    }
    if regs:
        per_warp = -(-regs * gpu.threads_per_warp // gpu.register_granule) * gpu.register_granule
        limits["registers"] = gpu.registers_per_sm // (per_warp * warps)
    if decomp.shared_bytes > gpu.shared_per_block:
        raise PerfError(
            message=f"{decomp.kernel} uses {decomp.shared_bytes} bytes of shared memory per workgroup; "
            f"{gpu.name} allows {gpu.shared_per_block}"
        )
    if decomp.shared_bytes:
        limits["shared"] = gpu.shared_per_sm // (decomp.shared_bytes + gpu.shared_reserved)
    limiter = min(limits, key=limits.__getitem__)
    if limits[limiter] < 1:
        raise PerfError(message=f"{decomp.kernel}: one workgroup does not fit on an SM of {gpu.name} ({limiter})")
    return Occupancy(limits[limiter], limiter, limits, regs)


def task_cycles(decomp: Decomposition, gpu: GPUSpec) -> np.ndarray:
    """Each task's busiest pipeline on one SM, in cycles, with global memory at the SM's share of HBM."""
    from .features import pipeline_cycles

    cycles = pipeline_cycles(decomp.demand, gpu, decomp.tasks)
    per_sm_bytes = gpu.hbm_bytes_s / gpu.clock_hz / gpu.sms
    cycles["global"] = (decomp.per_task("global_read") + decomp.per_task("global_write")) / per_sm_bytes
    return np.max(np.stack(list(cycles.values())), axis=0)


def schedule(
    decomp: Decomposition, gpu: GPUSpec, policy: str = "round_robin", registers: int | None = None
) -> Schedule:
    if policy not in POLICIES:
        raise OptionError(option="policy", message=f"unknown schedule policy {policy!r}; known: {POLICIES}")
    occ = occupancy(decomp, gpu, registers)
    tasks = decomp.tasks
    if policy == "round_robin":
        sm_of_task = np.arange(tasks, dtype=np.int64) % gpu.sms
    else:
        sm_of_task = _greedy(task_cycles(decomp, gpu), gpu.sms, occ.blocks_per_sm)
    per_sm = {k: np.bincount(sm_of_task, weights=v, minlength=gpu.sms) for k, v in decomp.demand.items()}
    notes = [] if occ.registers else ["registers per thread unknown: occupancy ignores the register file"]
    return Schedule(gpu, occ, policy, sm_of_task, per_sm, notes)


def _greedy(costs: np.ndarray, sms: int, slots_per_sm: int) -> np.ndarray:
    # A slot is one resident workgroup; slots of one SM share its pipelines, so a slot's clock runs
    # slots_per_sm times slower than the task's one-SM cost.
    # Ties go to the lower slot, and slot s is on SM s mod SMs: the first wave is round-robin.
    heap = [(0.0, slot) for slot in range(sms * slots_per_sm)]
    out = np.empty(len(costs), dtype=np.int64)
    for t, cost in enumerate(costs):
        free, slot = heapq.heappop(heap)
        out[t] = slot % sms
        heapq.heappush(heap, (free + float(cost) * slots_per_sm, slot))
    return out
