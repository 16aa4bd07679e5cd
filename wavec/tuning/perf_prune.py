"""Pruning an autotuning search by the performance model's predicted time (issue #22): rank every compiled
candidate of a shape by the shipped MLP's time and time only the best few.

Requires: candidates compiled for a CUDA target whose GEMM launch the performance model has a family for
(``gemm_mma_sync``; ``gemm_wgmma`` when the MLIR holds wgmma); a GPU of ``wavec.perf.gpus`` (a key such as
``h100`` or a driver name); the shipped weights (``wavec/perf/weights``).  No GPU: decomposition and the
MLP run on the CPU.

Guarantees: :class:`PerfRanker` is a ``TuneOptions(rank=...)`` hook: ``ranker(shape, candidates,
compile_of)`` returns the candidates by predicted time (fastest first, ties in the given order), each
predicted from its own launch (``wavec.perf.tile_cache.TileCache``: exactly the decomposition of the full
walk, one proxy walk per configuration, K and tile remainders) with the registers of its compile;
:meth:`PerfRanker.predict` gives one candidate's seconds.  ``model="rank"`` orders them by the configuration
ranking model instead (``wavec.perf.rank``, trained on races to order the candidates of one shape; mma.sync
GEMMs, and wgmma ones with a model trained on a wgmma race, whose candidates name ``BLOCK_M``, ``BLOCK_N``,
``BLOCK_K``, ``NUM_STAGES``, ``GROUP_M`` and ``waves``): :meth:`PerfRanker.score` gives one candidate's
score (a log time up to a per-shape constant).  A candidate the model cannot describe (no family, a
decomposition error, a wgmma candidate no shipped ranking model covers, an incomplete configuration for the
ranking model) raises :class:`~wavec.errors.TuningError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import PerfError, TuningError

__all__ = ["PerfRanker", "gemm_launch"]


def gemm_launch(shape: Sequence[int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The input tensors of ``make_gemm``'s launch for (M, N, K): A [M, K] and B [N, K]."""
    m, n, k = (int(x) for x in shape)
    return (m, k), (n, k)


class PerfRanker:
    """Ranks candidates by the performance model's predicted time on ``gpu`` (see the module docstring).
    ``launch(shape)``: the launch's input tensor shapes (default: the GEMM's)."""

    def __init__(self, gpu: Any, launch: Callable[[Sequence[int]], tuple] = gemm_launch, model: str = "mlp") -> None:
        from ..perf import rank
        from ..perf.gpus import GPUS
        from ..perf.gpus import gpu as find_gpu

        if model not in ("mlp", "rank"):
            raise TuningError(message=f"PerfRanker: model must be 'mlp' or 'rank', got {model!r}")
        self.spec = find_gpu(gpu)
        self.key = next((k for k, v in GPUS.items() if v.name == self.spec.name), self.spec.name.lower())
        self.launch = launch
        self.model = model
        # per MMA kind: wgmma's is loaded when first asked for
        self.rankers = {"mma_sync": rank.load(rank.trained_for(self.key))} if model == "rank" else {}
        self.caches: dict[str, Any] = {}
        self.predicted: dict[tuple[str, tuple[int, ...]], float] = {}
        self.scored: dict[tuple[str, tuple[int, ...]], float] = {}

    def _values(self, label: str, kernel: Any, shape: tuple[int, ...]) -> tuple[dict[str, float], str]:
        """The perf model's values of the candidate's launch on ``shape`` and its family."""
        from ..perf import estimator as E
        from ..perf.features import features
        from ..perf.schedule import schedule
        from ..perf.tile_cache import TileCache

        artifact = getattr(kernel, "artifact", kernel)
        family = "gemm_wgmma" if "wgmma" in artifact.mlir else "gemm_mma_sync"
        if label not in self.caches:
            self.caches[label] = TileCache(artifact, self.spec)
        try:
            d = self.caches[label].decompose(*self.launch(shape))
            return E.launch_values(d, features(d, schedule(d, self.spec))), family
        except PerfError as e:
            raise TuningError(message=f"performance model cannot rank {label} on {shape}: {e}") from e

    def predict(self, label: str, kernel: Any, shape: Sequence[int]) -> float:
        """Predicted seconds of ``kernel`` (the compile of candidate ``label``) on ``shape``."""
        from ..perf import estimator as E

        key = (label, tuple(int(x) for x in shape))
        if key not in self.predicted:
            values, family = self._values(label, kernel, key[1])
            self.predicted[key] = E.estimate(values, self.spec, self.key, family).time_s
        return self.predicted[key]

    def score(self, cand: Any, kernel: Any, shape: Sequence[int]) -> float:
        """The ranking model's score of candidate ``cand`` (compiled as ``kernel``) on ``shape``: lower is
        faster, comparable between candidates of one shape only."""
        from ..perf import estimator as E
        from ..perf.rank import config_inputs

        if self.model != "rank":
            raise TuningError(message="PerfRanker.score needs model='rank'")
        key = (cand.label, tuple(int(x) for x in shape))
        if key in self.scored:
            return self.scored[key]
        values, family = self._values(cand.label, kernel, key[1])
        mma = family.removeprefix("gemm_")
        ranker = self._ranker_for(mma, cand.label)
        subs, waves = cand.subs_dict, cand.kwargs_dict.get("waves")
        needed = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "NUM_STAGES", "GROUP_M")
        if waves is None or any(k not in subs for k in needed):
            raise TuningError(message=f"the ranking model needs {needed} and waves; candidate {cand.label} lacks some")
        conf = config_inputs(key[1], subs, waves, mma)
        self.scored[key] = float(ranker.scores(E.model_inputs(values, self.spec), conf)[0])
        return self.scored[key]

    def _ranker_for(self, mma: str, label: str) -> Any:
        """The shipped ranking model that ranks ``mma`` candidates on this GPU (``rank.trained_for``)."""
        from ..errors import OptionError
        from ..perf import rank

        if mma not in self.rankers:
            try:
                self.rankers[mma] = rank.load(rank.trained_for(self.key, mma))
            except OptionError as e:
                raise TuningError(message=f"the ranking model cannot rank {label} ({mma}): {e}") from e
        return self.rankers[mma]

    def __call__(self, shape: Sequence[int], candidates: Sequence[Any], compile_of: Callable[[Any], Any]) -> list:
        if self.model == "rank":
            order = {c: self.score(c, compile_of(c), shape) for c in candidates}
        else:
            order = {c: self.predict(c.label, compile_of(c), shape) for c in candidates}
        return sorted(candidates, key=order.__getitem__)
