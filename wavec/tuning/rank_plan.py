"""``matmul(config="rank")``: the tile chosen per shape by the configuration ranking model
(:mod:`wavec.perf.rank`) among the tuner's space of the MMA kind, instead of ``mma_sync_plan``'s or
``wgmma_plan``'s rule.  Opt-in; the default stays the rule (``docs/perf_model.md``, "GEMM dispatch" and
"wgmma ranking", has the held-out figures of both).

Requires: a CUDA target the ranking model's decompositions describe (``sm_80``/``sm_90``: mma.sync;
``mma="wgmma"``: ``sm_90a`` over ``WGMMA_SPACE``, with a shipped model that covers wgmma), the ptxas wheel
(the candidates are compiled for the CUDA target to read their registers, GPU or not), shipped ranking
weights.  The first call for a (dtype, target, space) compiles every legal candidate of the space
(``DEFAULT_SPACE``: ~250, minutes; ``WGMMA_SPACE``: ~60; the disk cache keeps them for later processes);
each new shape then decomposes the candidates that serve its M (``gemm.serves``), ~1 CPU second.

Guarantees: :func:`ranked_config` returns the (subs, waves) of the candidate the ranking model scores
fastest on (M, N, K) among the legal, compiled, non-spilling candidates of ``space`` that serve M (ties:
the space's order); the same answer for the same arguments (memoised per shape).  A space with no such
candidate is a :class:`~wavec.errors.TuningError`.
"""

from __future__ import annotations

from typing import Any

import wavec as wc

from ..errors import TuningError

__all__ = ["ranked_config", "ranked_candidates"]

_POOLS: dict = {}  # (dtype, mma, target, space items) -> {Candidate: compiled kernel}
_CHOSEN: dict = {}  # (m, n, k, dtype, mma, target, space items, gpu) -> (subs, waves)


def _space_key(space: dict) -> tuple:
    return tuple((str(k), tuple(tuple(v) if isinstance(v, list) else v for v in vals)) for k, vals in space.items())


def ranked_candidates(
    dtype: Any = wc.f16, target: str = "sm_90", space: dict | None = None, mma: str = "mma_sync"
) -> dict:
    """{Candidate: compiled kernel} of ``space``'s (default: the kind's tuner space) legal candidates of
    the MMA kind ``mma`` that compile without spills on ``target`` (wgmma: ``sm_90a`` whatever is given;
    the tuner's filter), compiled once per process."""
    from .gemm import FACTORY, _fixed, target_for
    from .legality import legal
    from .plan import space_for
    from .search import _source, enumerate_space

    space, target = dict(space or space_for(mma)), target_for(mma, target)
    key = (dtype.name, mma, target, _space_key(space))
    if key not in _POOLS:
        src = _source(FACTORY, _fixed(dtype, mma))
        pool = {}
        for c in enumerate_space(space, src.params()):
            kernel = src.build(c.kwargs)
            if not legal(kernel, c.subs_dict, target)[0]:
                continue
            try:
                compiled = wc.compile(kernel, c.symbol_subs(), backend="cuda", target=target)
            except wc.WavecError:
                continue  # a configuration the compiler rejects is not a candidate (as in the tuner)
            if not compiled.artifact.metadata.spills:
                pool[c] = compiled
        _POOLS[key] = pool
    return _POOLS[key]


def ranked_config(
    m: int,
    n: int,
    k: int,
    dtype: Any = wc.f16,
    target: str = "sm_90",
    space: dict | None = None,
    gpu: Any = None,
    mma: str = "mma_sync",
) -> tuple[dict, tuple[int, int]]:
    """(subs, waves) of the ranking model's pick for m x n x k among ``mma`` tiles (module docstring);
    ``gpu``: a ``wavec.perf.gpus`` key or driver name (default: the visible GPU's, else the H100)."""
    from .devices import visible_name
    from .gemm import serves
    from .perf_prune import PerfRanker

    gpu = gpu or visible_name() or "h100"
    key = (m, n, k, dtype.name, mma, target, _space_key(dict(space or {})), str(gpu))
    if key not in _CHOSEN:
        pool = ranked_candidates(dtype, target, space, mma)
        cands = [c for c in pool if serves(c, m)]
        if not cands:
            raise TuningError(message=f"matmul(config='rank'): no compiled {mma} candidate serves M = {m}")
        best = PerfRanker(gpu, model="rank")((m, n, k), cands, pool.__getitem__)[0]
        _CHOSEN[key] = (best.symbol_subs(), tuple(best.kwargs_dict["waves"]))
    return _CHOSEN[key]
