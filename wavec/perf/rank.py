"""A ranking model for GEMM configurations (issue #22's dispatch target): given every candidate
configuration of one shape, which is fastest.  Inference in numpy; weights from
``benchmarks/train_rank.py`` (``wavec/perf/rank_weights/<trained on>.npz``, shipped in the package).

The performance model's MLP (:mod:`wavec.perf.estimator`) predicts one launch's efficiency with ~10 %
error, while a race's candidates differ by less than that; this model is trained on the configurations of
one shape against each other instead (``wavec.perf.rank_train``: a listwise loss on the log-time
differences), so a per-shape bias costs it nothing.

Requires: per candidate, the perf model's input vector of its decomposed launch
(:func:`wavec.perf.estimator.model_inputs` with no family: every ``INPUTS`` name, read by name, so a
reordering or a new input of the MLP does not move this model's) and its configuration
(:func:`config_inputs`: its MMA kind among them, so one model ranks the mma.sync and the wgmma
candidates).

Guarantees: :meth:`Ranker.scores` is a log time up to a constant per shape (lower: faster; only the
differences between candidates of one shape mean anything); :meth:`Ranker.order` sorts candidates fastest
first, ties in the given order; :func:`load` reads the shipped weights (an :class:`~wavec.errors.OptionError`
names what is shipped when a file is missing, or an input the weights need that the perf model no longer
gives); a model trained without the ``wgmma`` input (:meth:`Ranker.covers`) ranks mma.sync candidates
only, and scoring a wgmma one with it is an ``OptionError`` (it learnt waves as warps, not warpgroups);
:func:`trained_for` picks a model that covers the MMA kind asked for; :meth:`Ranker.save` and
:meth:`Ranker.read` round-trip exactly.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from ..errors import OptionError
from .estimator import INPUTS, Ensemble, read_npz, save_npz

__all__ = ["CONFIG_INPUTS", "MMA_KINDS", "Ranker", "config_inputs", "rank_inputs", "load", "shipped", "trained_for"]

# The shape enters in log2 so the network can learn which tiles suit which sizes (the per-shape constant
# cancels in the loss; interactions with the configuration do not); the configuration's fields are what
# separates two candidates whose launches the perf features describe alike (warp layout, stages).
# ``wgmma`` (0/1) tells the two MMA kinds apart: their waves mean warps (mma.sync) or warpgroups (wgmma),
# and their pipelines (cp.async against TMA) reward different stages and tiles.
MMA_KINDS = ("mma_sync", "wgmma")
CONFIG_INPUTS = (
    "log2_m",
    "log2_n",
    "log2_k",
    "log2_block_m",
    "log2_block_n",
    "log2_block_k",
    "stages",
    "log2_group_m",
    "log2_waves_m",
    "log2_waves_n",
    "wgmma",
)


def config_inputs(
    shape: Sequence[int], subs: Mapping[str, int], waves: Sequence[int], mma: str = "mma_sync"
) -> np.ndarray:
    """The ``CONFIG_INPUTS`` of an (M, N, K) launch of the tile ``subs`` (``BLOCK_M``, ``BLOCK_N``,
    ``BLOCK_K``, ``NUM_STAGES``, ``GROUP_M``) with ``waves`` (along M, along N) on the MMA kind ``mma``."""
    if mma not in MMA_KINDS:
        raise OptionError(option="rank model", message=f"MMA kind must be one of {MMA_KINDS}, got {mma!r}")
    m, n, k = (int(v) for v in shape)
    return np.array(
        [
            math.log2(max(m, 1)),
            math.log2(max(n, 1)),
            math.log2(max(k, 1)),
            math.log2(subs["BLOCK_M"]),
            math.log2(subs["BLOCK_N"]),
            math.log2(subs["BLOCK_K"]),
            float(subs["NUM_STAGES"]),
            math.log2(max(subs.get("GROUP_M", 1), 1)),
            math.log2(waves[0]),
            math.log2(waves[1]),
            float(mma == "wgmma"),
        ]
    )


def rank_inputs(
    perf_x: np.ndarray, config_x: np.ndarray, perf_names: Sequence[str], names: Sequence[str]
) -> np.ndarray:
    """The ranking model's input rows: ``names`` picked by name from the perf inputs (``perf_x`` rows,
    columns ``perf_names``) and the configuration inputs (``config_x`` rows, columns ``CONFIG_INPUTS``)."""
    perf_x, config_x = np.atleast_2d(perf_x), np.atleast_2d(config_x)
    columns = {name: perf_x[:, i] for i, name in enumerate(perf_names)}
    columns.update({name: config_x[:, i] for i, name in enumerate(CONFIG_INPUTS)})
    missing = [name for name in names if name not in columns]
    if missing:
        raise OptionError(option="rank model", message=f"inputs {missing} are not given by the perf model any more")
    return np.stack([columns[name] for name in names], axis=1)


@dataclass(frozen=True)
class Ranker:
    """An ensemble of score networks over ``names`` (perf inputs then ``CONFIG_INPUTS``) and what they were
    trained on (``meta``: races, shapes, the hyperparameters chosen on validation shapes, their scores)."""

    names: tuple[str, ...]
    net: Ensemble
    meta: dict[str, Any] = field(default_factory=dict)

    def covers(self, mma: str) -> bool:
        """Whether the model can rank candidates of the MMA kind ``mma``: every model ranks mma.sync (what
        the first ones were trained on, without the ``wgmma`` input); wgmma needs the input."""
        return mma == "mma_sync" or (mma == "wgmma" and "wgmma" in self.names)

    def scores(self, perf_x: np.ndarray, config_x: np.ndarray, perf_names: Sequence[str] = INPUTS) -> np.ndarray:
        """Per candidate (rows of ``perf_x`` and ``config_x``): a log time up to a per-shape constant."""
        config_x = np.atleast_2d(config_x)
        if "wgmma" not in self.names and np.any(config_x[:, CONFIG_INPUTS.index("wgmma")] != 0):
            raise OptionError(
                option="rank model",
                message="these weights were trained on mma.sync races only (no 'wgmma' input): retrain them "
                "(benchmarks/train_rank.py) to rank wgmma candidates",
            )
        return self.net.log_efficiency(rank_inputs(perf_x, config_x, perf_names, self.names))

    def order(self, perf_x: np.ndarray, config_x: np.ndarray, perf_names: Sequence[str] = INPUTS) -> np.ndarray:
        """Candidate indices fastest first (a stable sort: ties keep the given order)."""
        return np.argsort(self.scores(perf_x, config_x, perf_names), kind="stable")

    def save(self, path: Any) -> None:
        save_npz(path, self.net.arrays("net_"), {"names": list(self.names), **self.meta})

    @classmethod
    def read(cls, path: Any) -> Ranker:
        arrays, meta = read_npz(path)
        return cls(tuple(meta.pop("names")), Ensemble.from_arrays(arrays, "net_"), meta)


def _weights_dir() -> Any:
    return resources.files("wavec.perf") / "rank_weights"


def shipped() -> list[str]:
    """The GPU keys (or ``all``) the shipped ranking models were trained on."""
    root = _weights_dir()
    if not root.is_dir():
        return []
    return sorted(p.name[: -len(".npz")] for p in root.iterdir() if p.name.endswith(".npz"))


def trained_for(gpu_key: str, mma: str = "mma_sync") -> str:
    """Which shipped ranking model serves ``gpu_key``'s ``mma`` candidates: its own, else the one trained
    on every GPU, else (a kind raced on one GPU only: wgmma on the H200) another GPU's that covers it."""
    have = shipped()
    order = [gpu_key, "all"] + [k for k in have if k not in (gpu_key, "all")]
    for key in order:
        if key in have and load(key).covers(mma):
            return key
    raise OptionError(
        option="rank model", message=f"no shipped ranking model ranks {mma} candidates for {gpu_key}; shipped: {have}"
    )


@functools.cache
def load(trained_on: str) -> Ranker:
    """The shipped ranking model trained on ``trained_on`` (a GPU key, or ``all``), read once per process
    (``trained_for`` reads the models it checks, and its caller then loads the one it names)."""
    path = _weights_dir() / f"{trained_on}.npz"
    if not path.is_file():
        raise OptionError(
            option="rank model", message=f"no ranking model trained on {trained_on}; shipped: {shipped()}"
        )
    with resources.as_file(path) as real:
        ranker = Ranker.read(real)
    rank_inputs(np.zeros((1, len(INPUTS))), np.zeros((1, len(CONFIG_INPUTS))), INPUTS, ranker.names)
    return ranker
