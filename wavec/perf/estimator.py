"""The ML half of the performance model (DESIGN.md §13 step 4): per kernel family, a small MLP that predicts
the execution efficiency (roofline time / measured time, as SynPerf) from the launch's features, and a
second one fitted to its 80th percentile: the *potential ceiling*.  Inference in numpy only.

Requires: :class:`~wavec.perf.features.Features` values (or a feature table's ``f:`` columns) and the GPU's
spec; weights from ``python -m wavec.perf.train`` (``wavec/perf/weights/<trained on>/<family>.npz``,
shipped in the package).

Guarantees: :func:`model_inputs` is the one definition of the MLP's input vector (training and inference
use it): every pipeline's and memory level's theoretical cycles relative to the roofline's (which bound
binds and how close the others are), the roofline time (log), task counts, wave fill and SM imbalance,
threads, occupancy, registers, shared memory, arithmetic intensity, row alignment and the launch's tiling
(:mod:`wavec.perf.tiling`: a GEMM wave's panel reuse, the main loop's steps, fill and stages).  GPU
constants enter through the cycles, not as inputs of their own: the lent GPUs are one chip (GH100) with
two memory systems, so a constant input would be one value in training and an extrapolation elsewhere.
:class:`MLP` evaluates ``exp(net(standardised x))`` (an efficiency); :func:`load` reads a family's models (an
:class:`~wavec.errors.OptionError` names what is shipped when a file is missing); :func:`estimate` gives
the predicted time, the ceiling time and the bottleneck; :func:`fit_linear` is the linear baseline
(least squares on the same inputs, log efficiency) and :func:`fit_ridge` the same with a ridge penalty
chosen on validation shapes (the stronger baseline where least squares extrapolates wildly).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from ..errors import OptionError
from .features import NOT_BOUNDS
from .gpus import GPUSpec

__all__ = [
    "INPUTS",
    "TILING_INPUTS",
    "TILED_FAMILIES",
    "LAUNCH_FAMILIES",
    "inputs_for",
    "CYCLES",
    "model_inputs",
    "launch_values",
    "MLP",
    "Ensemble",
    "Model",
    "Estimate",
    "load",
    "estimate",
    "family_of",
    "fit_linear",
    "fit_ridge",
    "Linear",
    "shipped",
]

CYCLES = tuple(f"{p}.{lvl}" for p in ("tensor", "fma", "xu", "alu") for lvl in ("gpu", "sm")) + (
    "global.gpu",
    "l2.gpu",
    "global.sm",
    "l2.sm",
    "shared.gpu",
    "shared.sm",
)
SPREAD = ("tensor", "fma", "xu", "alu", "shared")
INPUTS = (
    tuple(f"log2_{c}/roof" for c in CYCLES)
    + (
        "log2_roofline_us",
        "log2_tasks",
        "log2_waves",
        "last_wave_fill",
        "wave_fill",
        "sm_imbalance",
        "log2_threads",
        "blocks_per_sm_16",
        "registers_255",
        "shared_fraction",
        "log2_flop_per_byte",
        "log2_l2_per_hbm",
        "log2_task_cycles",
        "log2_align_read",
        "log2_align_write",
        "log2_wave_dram/roof",
        "log2_wave_reuse",
        "log2_tile_steps",
        "tile_fill",
        "tile_stages_8",
    )
    + tuple(f"{p}.sm/mean" for p in SPREAD)
)
TILING_INPUTS = ("log2_wave_dram/roof", "log2_wave_reuse", "log2_tile_steps", "tile_fill", "tile_stages_8")
# The families whose models take the tiling inputs: the GEMM-shaped kernels (the dense GEMMs and MoE's
# grouped GEMMs), whose waves share panels.  Tried on the others too (docs/perf_model.md): test MAPE up
# 1.2-2.2 points on attention and elementwise, rows within 0.5; validation mixed.
TILED_FAMILIES = ("gemm_mma_sync", "gemm_wgmma", "moe")


# The families whose time is the GPU's fixed launch cost plus the roofline over the efficiency
# (``GPUSpec.launch_s``; their models learn the efficiency of the rest): the fixed cost differs between the
# H100 and the H200 (1.09 against 1.00 us) and dominates their 1-2 us launches, which no input of one GPU's
# rows can describe.  Chosen on validation shapes (docs/perf_model.md); the GEMMs keep time = roofline /
# efficiency (``benchmarks/perf_dispatch.py`` and the tuner's pruning rank by that).
LAUNCH_FAMILIES = ("elementwise", "rows")


def inputs_for(family: str | None) -> tuple[str, ...]:
    """The inputs of ``family``'s models (``INPUTS``, less ``TILING_INPUTS`` outside ``TILED_FAMILIES``);
    every input for ``None``."""
    if family is None or family in TILED_FAMILIES:
        return INPUTS
    return tuple(name for name in INPUTS if name not in TILING_INPUTS)


EPS = 1e-30
RATIO_FLOOR = 2.0**-10  # a bound under 1/1024 of the roofline's is as absent as zero; log2 needs a floor


def _waves(values: Mapping[str, float], gpu: GPUSpec) -> list[float]:
    """log2 of the waves (fractional: tasks over resident slots), the last wave's fill (1: full), the mean
    fill over the launched waves and the busiest SM's tasks over the mean (1: balanced)."""
    tasks = max(1.0, float(values["tasks"]))
    slots = gpu.sms * max(1.0, float(values["blocks_per_sm"]))
    waves = math.ceil(tasks / slots)
    return [
        math.log2(tasks / slots),
        (tasks - (waves - 1) * slots) / slots,
        tasks / (slots * waves),
        float(values["sm_tasks"]) * gpu.sms / tasks,
    ]


def _spread(values: Mapping[str, float]) -> list[float]:
    """Per pipeline, the busiest SM's cycles over the mean SM's (1 where the pipeline is idle): the tail."""
    out = []
    for p in SPREAD:
        mean, busiest = float(values[f"{p}.gpu_cycles"]), float(values[f"{p}.sm_cycles"])
        out.append(busiest / mean if mean > 0 else 1.0)
    return out


def _tiling(values: Mapping[str, float], gpu: GPUSpec, roof: float) -> list[float]:
    """The GEMM wave's DRAM-byte estimate at HBM rate over the roofline (log2, floored: between the
    footprint's and the requested bytes' bound, which panels a wave shares decides), its panel reuse (log2),
    and the innermost tiled dimension's steps (log2), fill and pipeline stages (/8)."""
    dram_cycles = float(values["wave.dram_bytes"]) / (gpu.hbm_bytes_s / gpu.clock_hz)
    return [
        math.log2(max(dram_cycles / roof, RATIO_FLOOR)),
        math.log2(float(values["wave.reuse"])),
        math.log2(float(values["tile.steps"])),
        float(values["tile.fill"]),
        float(values["tile.stages"]) / 8,
    ]


def launch_values(decomp: Any, feats: Any) -> dict[str, float]:
    """The ``values`` :func:`model_inputs` and :func:`estimate` take for one decomposed launch: its
    ``Features.values`` plus the binary's ``registers`` (0 where unknown) and ``shared_bytes``."""
    return {**feats.values, "registers": float(decomp.registers or 0), "shared_bytes": float(decomp.shared_bytes)}


def model_inputs(values: Mapping[str, float], gpu: GPUSpec, family: str | None = None) -> np.ndarray:
    """The input vector (``inputs_for(family)``, in ``INPUTS`` order) of one launch; ``values``:
    ``Features.values`` plus ``registers`` and ``shared_bytes`` (a feature table's ``f:`` columns without
    the prefix).  Magnitudes enter in log2, so the standardised inputs of a new shape stay in the range the
    training shapes span."""
    cycles = np.array([float(values[f"{c}_cycles"]) for c in CYCLES])
    roof = max(max(float(values[f"{c}_cycles"]) for c in CYCLES if c not in NOT_BOUNDS), EPS)
    hbm = max(float(values["global.gpu_bytes"]), 1.0)
    busiest = max(float(values[f"{c}_cycles"]) for c in CYCLES if c.endswith(".sm"))
    extra = [
        math.log2(roof / gpu.clock_hz * 1e6),
        math.log2(max(float(values["tasks"]), 1.0)),
        *_waves(values, gpu),
        math.log2(max(float(values["threads"]), 1.0)),
        float(values["blocks_per_sm"]) / 16,
        float(values.get("registers", 0.0)) / 255,
        float(values.get("shared_bytes", 0.0)) / gpu.shared_per_sm,
        math.log2(1.0 + float(values["tensor.gpu_ops"]) / hbm),
        math.log2(1.0 + float(values["l2.gpu_bytes"]) / hbm),
        # one task's work at the busiest SM: short tasks pay the prologue, the epilogue and the pipeline fill
        math.log2(1.0 + busiest / max(1.0, float(values["sm_tasks"]))),
        math.log2(float(values["align.read_bytes"])),
        math.log2(float(values["align.write_bytes"])),
        *_tiling(values, gpu, roof),
        *_spread(values),
    ]
    x = np.concatenate([np.log2(np.maximum(cycles / roof, RATIO_FLOOR)), np.array(extra)])
    if family is None or family in TILED_FAMILIES:
        return x
    return x[[i for i, name in enumerate(INPUTS) if name not in TILING_INPUTS]]


@dataclass(frozen=True)
class MLP:
    """``exp(W_n relu(... relu(W_1 (x - mean) / std + b_1) ...) + b_n)``: an efficiency per row of x."""

    mean: np.ndarray
    std: np.ndarray
    weights: tuple[np.ndarray, ...]
    biases: tuple[np.ndarray, ...]

    def log_efficiency(self, x: np.ndarray) -> np.ndarray:
        h = (np.atleast_2d(x) - self.mean) / self.std
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w.T + b
            if i < len(self.weights) - 1:
                h = np.maximum(h, 0.0)
        return h[:, 0]

    def efficiency(self, x: np.ndarray) -> np.ndarray:
        return np.exp(self.log_efficiency(x))

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The arrays a weight file holds; weights and biases in float32 (half the file; a time's relative
        error from the rounding is ~1e-6, far under the model's)."""
        out = {f"{prefix}mean": self.mean, f"{prefix}std": self.std}
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            out[f"{prefix}w{i}"], out[f"{prefix}b{i}"] = w.astype(np.float32), b.astype(np.float32)
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], prefix: str) -> MLP:
        n = sum(1 for k in arrays if k.startswith(f"{prefix}w"))
        ws = tuple(np.asarray(arrays[f"{prefix}w{i}"], dtype=np.float64) for i in range(n))
        bs = tuple(np.asarray(arrays[f"{prefix}b{i}"], dtype=np.float64) for i in range(n))
        return cls(np.asarray(arrays[f"{prefix}mean"]), np.asarray(arrays[f"{prefix}std"]), ws, bs)


@dataclass(frozen=True)
class Ensemble:
    """MLPs trained from different seeds: the efficiency is ``exp`` of their mean log efficiency (a
    geometric mean, so one member's excursion on a new shape moves the estimate by a fraction)."""

    members: tuple[MLP, ...]

    def log_efficiency(self, x: np.ndarray) -> np.ndarray:
        return np.mean([m.log_efficiency(x) for m in self.members], axis=0)

    def efficiency(self, x: np.ndarray) -> np.ndarray:
        return np.exp(self.log_efficiency(x))

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i, m in enumerate(self.members):
            out.update(m.arrays(f"{prefix}{i}_"))
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], prefix: str) -> Ensemble:
        n = sum(1 for k in arrays if k.startswith(prefix) and k.endswith("_mean"))
        return cls(tuple(MLP.from_arrays(arrays, f"{prefix}{i}_") for i in range(n)))


@dataclass(frozen=True)
class Model:
    """A family's mean-efficiency ensemble (MAPE loss), its P80 ceiling ensemble and what they were trained
    on (``meta``: rows, hyperparameters chosen on the validation shapes, training and validation MAPE)."""

    family: str
    mean: Ensemble
    ceiling: Ensemble
    meta: dict[str, Any] = field(default_factory=dict)

    def fixed_s(self, gpu: GPUSpec) -> float:
        """The fixed cost added to the time: the GPU's launch cost for a model trained with it, else 0."""
        return gpu.launch_s if self.meta.get("launch_offset") else 0.0

    def times_s(self, x: np.ndarray, roofline_s: np.ndarray, gpu: GPUSpec) -> tuple[np.ndarray, np.ndarray]:
        """(predicted, P80 ceiling) seconds of launches with inputs ``x`` and roofline seconds ``roofline_s``
        on ``gpu``: the fixed cost plus the roofline over each ensemble's efficiency."""
        fixed = self.fixed_s(gpu)
        return fixed + roofline_s / self.mean.efficiency(x), fixed + roofline_s / self.ceiling.efficiency(x)

    def save(self, path: Any) -> None:
        save_npz(
            path, {**self.mean.arrays("mean_"), **self.ceiling.arrays("p80_")}, {"family": self.family, **self.meta}
        )

    @classmethod
    def read(cls, path: Any) -> Model:
        arrays, meta = read_npz(path)
        mean, ceiling = Ensemble.from_arrays(arrays, "mean_"), Ensemble.from_arrays(arrays, "p80_")
        return cls(meta.pop("family"), mean, ceiling, meta)


def save_npz(path: Any, arrays: Mapping[str, np.ndarray], meta: dict) -> None:
    """A weights file: ``arrays`` and ``meta`` as JSON in the array ``meta`` (no pickles)."""
    out: dict[str, Any] = {**arrays, "meta": np.array(json.dumps(meta))}
    np.savez_compressed(path, **out)


def read_npz(path: Any) -> tuple[dict[str, np.ndarray], dict]:
    """(arrays, meta) of a ``save_npz`` file."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    return arrays, json.loads(str(arrays.pop("meta")))


def _weights_dir() -> Any:
    return resources.files("wavec.perf") / "weights"


def shipped() -> dict[str, list[str]]:
    """{trained on: families} of the weights in the package."""
    root = _weights_dir()
    out: dict[str, list[str]] = {}
    if root.is_dir():
        for sub in sorted(root.iterdir(), key=lambda p: p.name):
            if sub.is_dir():
                out[sub.name] = sorted(p.name[: -len(".npz")] for p in sub.iterdir() if p.name.endswith(".npz"))
    return out


def load(family: str, trained_on: str) -> Model:
    """The shipped model of ``family`` trained on ``trained_on`` (a GPU key, or ``all``)."""
    path = _weights_dir() / trained_on / f"{family}.npz"
    if not path.is_file():
        raise OptionError(
            option="perf model", message=f"no weights for {family} trained on {trained_on}; shipped: {shipped()}"
        )
    with resources.as_file(path) as real:
        return Model.read(real)


def family_of(kernel: str, mma: str = "mma_sync") -> str:
    """The model family of a library kernel (``wavec perf``'s kernel names, ``cases.KERNELS``)."""
    if kernel == "gemm":
        return f"gemm_{mma}"
    if kernel in ("softmax", "rms_norm", "layer_norm"):
        return "rows"
    if kernel in ("copy", "silu_and_mul"):
        return "elementwise"
    if kernel in ("moe_up", "moe_down"):
        return "moe"
    if kernel == "attention":
        return "attention"
    raise OptionError(option="kernel", message=f"no performance-model family for {kernel!r}")


@dataclass(frozen=True)
class Estimate:
    """One launch's prediction; ``efficiency`` and ``ceiling_efficiency`` are the roofline time over the
    predicted and ceiling times (a family's fixed launch cost included)."""

    roofline_s: float
    time_s: float
    ceiling_s: float
    efficiency: float
    ceiling_efficiency: float
    bottleneck: str
    trained_on: str


def trained_for(gpu_key: str, family: str) -> str:
    """Which shipped model serves ``gpu_key``: its own, else the one trained on every GPU, else the H100's."""
    have = shipped()
    for key in (gpu_key, "all", "h100"):
        if family in have.get(key, ()):
            return key
    raise OptionError(option="perf model", message=f"no shipped weights for {family}; shipped: {have}")


def estimate(
    values: Mapping[str, float], gpu: GPUSpec, gpu_key: str, family: str, trained_on: str | None = None
) -> Estimate:
    """Predicted and ceiling times of one launch (``values`` as for :func:`model_inputs`)."""
    trained_on = trained_on or trained_for(gpu_key, family)
    model = load(family, trained_on)
    x = model_inputs(values, gpu, family)
    cycles = {c: float(values[f"{c}_cycles"]) for c in CYCLES if c not in NOT_BOUNDS}
    roof = max(cycles.values()) / gpu.clock_hz
    time, ceil = (float(t[0]) for t in model.times_s(x, np.array([roof]), gpu))
    return Estimate(roof, time, ceil, roof / time, roof / ceil, max(cycles, key=cycles.__getitem__), trained_on)


@dataclass(frozen=True)
class Linear:
    """The linear baseline: log efficiency = standardised inputs @ coef + intercept."""

    mean: np.ndarray
    std: np.ndarray
    coef: np.ndarray

    def efficiency(self, x: np.ndarray) -> np.ndarray:
        z = (np.atleast_2d(x) - self.mean) / self.std
        return np.exp(np.clip(np.c_[z, np.ones(len(z))] @ self.coef, -20.0, 5.0))


def standardiser(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations (1 where a column is constant: it then stays 0)."""
    std = x.std(axis=0)
    return x.mean(axis=0), np.where(std > 1e-12, std, 1.0)


def fit_linear(x: np.ndarray, efficiency: np.ndarray, ridge: float = 0.0) -> Linear:
    """Least squares of log efficiency on the standardised inputs; ``ridge`` > 0 adds ``ridge`` x the
    squared coefficients (not the intercept's) to the loss, per row (so one value suits any row count)."""
    mean, std = standardiser(x)
    z = (x - mean) / std
    a, y = np.c_[z, np.ones(len(z))], np.log(efficiency)
    if ridge <= 0:
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        return Linear(mean, std, coef)
    penalty = np.eye(a.shape[1]) * ridge * len(z)
    penalty[-1, -1] = 0.0
    return Linear(mean, std, np.linalg.solve(a.T @ a + penalty, a.T @ y))


RIDGES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def fit_ridge(x: np.ndarray, efficiency: np.ndarray, validation: np.ndarray) -> tuple[Linear, float]:
    """The linear baseline at its best: the ``RIDGES`` strength with the least time MAPE on the
    ``validation`` rows (a mask over the training rows: held-out training shapes) when fitted on the rest,
    refitted on every row; and the strength."""

    def score(ridge: float) -> float:
        fit = fit_linear(x[~validation], efficiency[~validation], ridge)
        return float(np.mean(np.abs(efficiency[validation] / fit.efficiency(x[validation]) - 1)))

    best = min(RIDGES, key=score) if validation.any() and not validation.all() else RIDGES[-1]
    return fit_linear(x, efficiency, best), best
