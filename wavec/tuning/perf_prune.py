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
:meth:`PerfRanker.predict` gives one candidate's seconds.  A candidate the model cannot describe (no
family, a decomposition error) raises :class:`~wavec.errors.TuningError` naming it.
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

    def __init__(self, gpu: Any, launch: Callable[[Sequence[int]], tuple] = gemm_launch) -> None:
        from ..perf.gpus import GPUS
        from ..perf.gpus import gpu as find_gpu

        self.spec = find_gpu(gpu)
        self.key = next((k for k, v in GPUS.items() if v.name == self.spec.name), self.spec.name.lower())
        self.launch = launch
        self.caches: dict[str, Any] = {}
        self.predicted: dict[tuple[str, tuple[int, ...]], float] = {}

    def predict(self, label: str, kernel: Any, shape: Sequence[int]) -> float:
        """Predicted seconds of ``kernel`` (the compile of candidate ``label``) on ``shape``."""
        from ..perf import estimator as E
        from ..perf.features import features
        from ..perf.schedule import schedule
        from ..perf.tile_cache import TileCache

        key = (label, tuple(int(x) for x in shape))
        if key in self.predicted:
            return self.predicted[key]
        artifact = getattr(kernel, "artifact", kernel)
        family = "gemm_wgmma" if "wgmma" in artifact.mlir else "gemm_mma_sync"
        if label not in self.caches:
            self.caches[label] = TileCache(artifact, self.spec)
        try:
            d = self.caches[label].decompose(*self.launch(shape))
            values = E.launch_values(d, features(d, schedule(d, self.spec)))
            seconds = E.estimate(values, self.spec, self.key, family).time_s
        except PerfError as e:
            raise TuningError(message=f"performance model cannot rank {label} on {key[1]}: {e}") from e
        self.predicted[key] = seconds
        return seconds

    def __call__(self, shape: Sequence[int], candidates: Sequence[Any], compile_of: Callable[[Any], Any]) -> list:
        times = {c: self.predict(c.label, compile_of(c), shape) for c in candidates}
        return sorted(candidates, key=times.__getitem__)
