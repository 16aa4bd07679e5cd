"""SynPerf Table IV features of a scheduled launch, and the roofline time every later model is compared with.

Requires: a :class:`~wavec.perf.decompose.Decomposition` and its :class:`~wavec.perf.schedule.Schedule`.

Guarantees: :func:`features` returns, per math pipeline (``tensor``, ``fma``, ``xu``, ``alu``), the GPU-total
operations and theoretical cycles (ops / (rate x SMs)) and the busiest SM's operations and cycles (ops /
rate), where a pipeline's rate is its per-SM, per-clock figure for each op kind (tensor FLOPs by instruction
kind and dtype, FMA results by dtype); per memory level the bytes and cycles: ``global`` (HBM: each tensor's
bytes at most once, the footprint, as a perfect L2 would move them) and ``l2`` (every byte requested) at GPU
level, ``global``/``l2``/``shared`` at the busiest SM at its share of the bandwidth (global: its requested
bytes scaled by the launch's HBM/requested ratio; l2: its requested bytes; shared: bytes in and out at
``shared_bytes_per_clk``). Plus the task counts, the row alignment of the floating-point tensors read and
written (:func:`row_alignment`: a row pitch that is not a multiple of 128 bytes splits the tiles' rows over
extra sectors and, below 16 bytes, rules out vector access), the launch's tiling
(:func:`~wavec.perf.tiling.tiling_features`: a GEMM wave's panel reuse and DRAM-byte estimate, the innermost
tiled dimension's steps, fill and stages) and the GPU's constants. :func:`roofline` is the largest theoretical
time of those, in seconds (plus an optional launch overhead); :func:`bottleneck` names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .decompose import Decomposition
from .gpus import GPUSpec
from .mlir_text import DTYPE_BYTES
from .schedule import Schedule
from .tiling import tiling_features

__all__ = [
    "Features",
    "features",
    "roofline",
    "bottleneck",
    "pipeline_ops",
    "pipeline_cycles",
    "PIPELINES",
    "row_alignment",
    "ALIGN_CAP",
]

PIPELINES = ("tensor", "fma", "xu", "alu")
ALIGN_CAP = 128  # bytes: an L2 cache line; a pitch that is a multiple of it is as good as any


def row_alignment(tensors: Iterable[tuple[tuple[int, ...], str, bool]]) -> tuple[float, float]:
    """(read, write): the least alignment in bytes, capped at ``ALIGN_CAP``, of the innermost extent (the
    row pitch) of the floating-point tensors of rank >= 2 read and written; ``ALIGN_CAP`` where there are
    none (integer routing tensors and 1-D vectors have no rows to split)."""
    least = {False: float(ALIGN_CAP), True: float(ALIGN_CAP)}
    for shape, dtype, output in tensors:
        if len(shape) < 2 or not dtype.startswith(("f", "bf")):
            continue
        pitch = shape[-1] * DTYPE_BYTES.get(dtype, 4)
        least[output] = min(least[output], float(min(ALIGN_CAP, pitch & -pitch if pitch else ALIGN_CAP)))
    return least[False], least[True]


def _rate(key: str, gpu: GPUSpec) -> float:
    """Per-SM per-clock rate of one demand key's ops."""
    pipe, _, rest = key.partition(":")
    if pipe == "tensor":
        kind, _, dtype = rest.partition(":")
        return gpu.tensor_rate(kind, dtype)
    if pipe == "fma":
        return gpu.fma.get("f16" if rest in ("f16", "bf16") else "f32", gpu.fma["f32"])
    return gpu.xu if pipe == "xu" else gpu.alu


def pipeline_ops(demand: Mapping[str, np.ndarray], size: int) -> dict[str, np.ndarray]:
    out = {p: np.zeros(size) for p in PIPELINES}
    for key, values in demand.items():
        pipe = key.partition(":")[0]
        if pipe in out:
            out[pipe] = out[pipe] + values
    return out


def pipeline_cycles(demand: Mapping[str, np.ndarray], gpu: GPUSpec, size: int) -> dict[str, np.ndarray]:
    """Cycles of each pipeline on one SM (the demand's vectors: per task, or per SM), shared memory included."""
    out = {p: np.zeros(size) for p in PIPELINES}
    out["shared"] = np.zeros(size)
    for key, values in demand.items():
        pipe = key.partition(":")[0]
        if pipe in out:
            out[pipe] = out[pipe] + values / _rate(key, gpu)
        elif key in ("shared_in", "shared_out"):
            out["shared"] = out["shared"] + values / gpu.shared_bytes_per_clk
    return out


@dataclass(frozen=True)
class Features:
    """``values``: the named features (``tensor.gpu_cycles``, ``l2.sm_bytes``, ...); ``gpu``: its vector."""

    values: dict[str, float]
    gpu: dict[str, float]
    clock_hz: float

    def cycles(self) -> dict[str, float]:
        return {k[: -len("_cycles")]: v for k, v in self.values.items() if k.endswith("_cycles")}


def features(decomp: Decomposition, sched: Schedule) -> Features:
    gpu = sched.gpu
    sms = gpu.sms
    values: dict[str, float] = {
        "tasks": float(decomp.tasks),
        "threads": float(decomp.threads),
        "blocks_per_sm": float(sched.occupancy.blocks_per_sm),
        "waves": float(sched.waves),
        "sm_tasks": float(sched.tasks_per_sm.max()),
    }
    values["align.read_bytes"], values["align.write_bytes"] = row_alignment(decomp.tensors)
    gpu_ops = {k: np.array([v.sum()]) for k, v in decomp.demand.items()}
    total_ops = pipeline_ops(gpu_ops, 1)
    total_cycles = pipeline_cycles(gpu_ops, gpu, 1)
    sm_ops = pipeline_ops(sched.per_sm, sms)
    sm_cycles = pipeline_cycles(sched.per_sm, gpu, sms)
    for pipe in PIPELINES:
        values[f"{pipe}.gpu_ops"] = float(total_ops[pipe][0])
        values[f"{pipe}.gpu_cycles"] = float(total_cycles[pipe][0]) / sms
        values[f"{pipe}.sm_ops"] = float(sm_ops[pipe].max())
        values[f"{pipe}.sm_cycles"] = float(sm_cycles[pipe].max())
    read, write = decomp.total("global_read"), decomp.total("global_write")
    hbm = min(read, decomp.footprint["read"] or read) + min(write, decomp.footprint["write"] or write)
    hbm_per_clk, l2_per_clk = gpu.hbm_bytes_s / gpu.clock_hz, gpu.l2_bytes_s / gpu.clock_hz
    sm_global = sched.per_sm.get("global_read", np.zeros(sms)) + sched.per_sm.get("global_write", np.zeros(sms))
    sm_shared = sched.per_sm.get("shared_in", np.zeros(sms)) + sched.per_sm.get("shared_out", np.zeros(sms))
    dram_share = hbm / (read + write) if read + write else 0.0
    values.update(
        {
            "global.gpu_bytes": hbm,
            "global.gpu_cycles": hbm / hbm_per_clk,
            "l2.gpu_bytes": read + write,
            "l2.gpu_cycles": (read + write) / l2_per_clk,
            "global.sm_bytes": float(sm_global.max()) * dram_share,
            "global.sm_cycles": float(sm_global.max()) * dram_share / (hbm_per_clk / sms),
            "l2.sm_bytes": float(sm_global.max()),
            "l2.sm_cycles": float(sm_global.max()) / (l2_per_clk / sms),
            "shared.gpu_bytes": float(sm_shared.sum()),
            "shared.gpu_cycles": float(sm_shared.sum()) / (gpu.shared_bytes_per_clk * sms),
            "shared.sm_bytes": float(sm_shared.max()),
            "shared.sm_cycles": float(sm_shared.max()) / gpu.shared_bytes_per_clk,
        }
    )
    slots = sms * max(1, sched.occupancy.blocks_per_sm)
    values.update(tiling_features(decomp.symbols, decomp.tensors, decomp.tasks, slots, hbm))
    return Features(values, gpu.vector(), gpu.clock_hz)


# An SM's share of DRAM and L2 bandwidth (``global.sm``, ``l2.sm``) is what it gets when every SM streams;
# an under-filled grid's SMs each draw several times that (H100: 22 CTAs of a 32x4096x3072 GEMM read at
# 1.6x their share), so those two stay features for the learned model and are not bounds.
NOT_BOUNDS = ("global.sm", "l2.sm")


def _bounds(feats: Features) -> dict[str, float]:
    return {k: v for k, v in feats.cycles().items() if k not in NOT_BOUNDS}


def roofline(feats: Features, launch_s: float = 0.0) -> float:
    """The plain roofline: the largest theoretical time of any pipeline (per SM and over the GPU), of the
    GPU's DRAM and L2 traffic and of an SM's shared memory, in seconds: a time no launch can beat."""
    return max(_bounds(feats).values()) / feats.clock_hz + launch_s


def bottleneck(feats: Features) -> str:
    """The feature whose theoretical time is the roofline's (``tensor.sm``, ``global.gpu``, ...)."""
    cycles = _bounds(feats)
    return max(cycles, key=cycles.__getitem__)
