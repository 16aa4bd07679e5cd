"""Training the GEMM configuration ranking model (:mod:`wavec.perf.rank`) from races: lists of candidates
of one shape, each with its input row and measured time.

Requires: torch (CPU; training only: inference is numpy); lists of at least two candidates with positive
times.  ``benchmarks/train_rank.py`` builds the lists from ``tune_gemm.py`` races (their fit shapes only)
and calls :func:`fit_ranker`.

Guarantees: :func:`rank_loss` is listwise over the candidates of each list: the cross-entropy between the
softmax of the negated measured log times and of the negated scores at temperature ``tau`` (weight on the
near-best candidates: what a pick or a top few needs), plus ``mse_weight`` times the mean squared error of
the log-time differences within the list (the score of a shape's candidates centred against their times:
the pairwise squared loss on ``log t_i - log t_j``); a measured time more than ``CLIP`` (in log) above its
list's best counts as ``CLIP`` above (a glitched timing does not steer the fit).  No term compares two
lists, so a bias per shape costs nothing.  :func:`fit_net` fits one network by full-batch Adam with coupled
L2; :func:`fit_ranker` chooses the weight decay on the validation lists (mean regret of the pick, then of
the top 3) and fits ``members`` seeds (``first_seed`` on) on the training and validation lists
together.  Same seed, same weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .estimator import MLP, Ensemble, standardiser
from .rank import Ranker

__all__ = ["CLIP", "WEIGHT_DECAYS", "pad_lists", "rank_loss", "fit_net", "regrets", "fit_ranker"]

CLIP = 0.7  # log time above a list's best (2x): beyond it a candidate is just slow
TAU = 0.05  # softmax temperature in log time: candidates within ~5 % of the best carry the target's weight
MSE_WEIGHT = 10.0
WEIGHT_DECAYS = (1e-3, 1e-2)
HIDDEN = (32, 32)
STEPS = 800
TOPS = (1, 3, 5, 10)

Lists = Sequence[tuple[np.ndarray, np.ndarray]]  # per shape: (inputs [candidates, d], times [candidates])


def pad_lists(lists: Lists) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x [L, C, d], log time relative to the list's best and clipped at ``CLIP`` [L, C], mask [L, C]):
    the lists padded to the longest (padding rows are zeros, masked out)."""
    width, d = max(len(t) for _, t in lists), lists[0][0].shape[1]
    x, y, mask = np.zeros((len(lists), width, d)), np.zeros((len(lists), width)), np.zeros((len(lists), width), bool)
    for i, (xi, ti) in enumerate(lists):
        if len(ti) < 2 or np.any(np.asarray(ti) <= 0):
            raise ValueError(f"list {i}: needs two or more candidates with positive times")
        log_t = np.log(np.asarray(ti, dtype=np.float64))
        x[i, : len(ti)], y[i, : len(ti)], mask[i, : len(ti)] = xi, np.minimum(log_t - log_t.min(), CLIP), True
    return x, y, mask


def rank_loss(scores: Any, y: Any, mask: Any, tau: float = TAU, mse_weight: float = MSE_WEIGHT) -> Any:
    """The mean over lists of the listwise loss (module docstring); torch tensors [L, C]."""
    import torch

    neg = torch.finfo(scores.dtype).min / 4
    target = torch.softmax(torch.where(mask, -y / tau, neg), dim=1)
    log_q = torch.log_softmax(torch.where(mask, -scores / tau, neg), dim=1)
    ce = -(target * torch.where(mask, log_q, 0.0)).sum(dim=1)
    n = mask.sum(dim=1)
    diff = torch.where(mask, scores - y, 0.0)
    centred = torch.where(mask, diff - (diff.sum(dim=1) / n)[:, None], 0.0)
    mse = (centred**2).sum(dim=1) / n
    return (ce + mse_weight * mse).mean()


def fit_net(
    lists: Lists,
    hidden: Sequence[int] = HIDDEN,
    steps: int = STEPS,
    seed: int = 0,
    weight_decay: float = 1e-3,
    tau: float = TAU,
    mse_weight: float = MSE_WEIGHT,
) -> MLP:
    """One score network (an :class:`~wavec.perf.estimator.MLP` whose ``log_efficiency`` is the score)
    fitted by full-batch Adam to :func:`rank_loss` with coupled L2 ``weight_decay``."""
    import torch

    from .train import make_net, to_mlp

    torch.set_num_threads(1)
    x, y, mask = pad_lists(lists)
    mean, std = standardiser(x[mask])
    torch.manual_seed(seed)
    net = make_net(x.shape[2], hidden)
    z = torch.tensor(np.where(mask[..., None], (x - mean) / std, 0.0), dtype=torch.float64)
    yt, mt = torch.tensor(y), torch.tensor(mask)
    params = list(net.parameters())
    opt = torch.optim.Adam(params, lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for _ in range(steps):
        opt.zero_grad()
        loss = rank_loss(net(z)[..., 0], yt, mt, tau, mse_weight)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.grad += weight_decay * p
        opt.step()
        sched.step()
    return to_mlp(net, mean, std)


def regrets(score: Any, lists: Lists, tops: Sequence[int] = TOPS) -> dict[str, np.ndarray]:
    """Per list, the regret (measured time over the list's best, minus 1) of the best measured among the
    ``score``'s top N (``score(x)``: lower is faster), for each N of ``tops``."""
    out: dict[str, list[float]] = {f"top{n}": [] for n in tops}
    for x, t in lists:
        t = np.asarray(t, dtype=np.float64)
        ranked = np.argsort(score(x), kind="stable")
        for n in tops:
            out[f"top{n}"].append(float(t[ranked[:n]].min() / t.min() - 1.0))
    return {k: np.array(v) for k, v in out.items()}


def fit_ranker(
    train: Lists,
    validation: Lists,
    names: Sequence[str],
    members: int = 3,
    weight_decays: Sequence[float] = WEIGHT_DECAYS,
    steps: int = STEPS,
    meta: dict[str, Any] | None = None,
    first_seed: int = 0,
) -> Ranker:
    """The weight decay of least validation regret (pick, then top 3; seed 0, fitted on ``train``), then
    ``members`` seeds (``first_seed``, ``first_seed + 1``, ...) fitted on ``train`` and ``validation``
    together; the validation scores of every decay tried in ``meta["validation"]``."""
    scores = {}
    for wd in weight_decays:
        net = fit_net(train, steps=steps, seed=0, weight_decay=wd)
        r = regrets(net.log_efficiency, validation)
        scores[wd] = {k: [float(v.mean()), float(v.max())] for k, v in r.items()}
    best = min(weight_decays, key=lambda wd: (scores[wd]["top1"][0], scores[wd]["top3"][0]))
    seeds = range(first_seed, first_seed + members)
    nets = tuple(fit_net([*train, *validation], steps=steps, seed=s, weight_decay=best) for s in seeds)
    info = {
        **(meta or {}),
        "weight_decay": best,
        "validation": {str(k): v for k, v in scores.items()},
        "steps": steps,
        "member_seeds": list(seeds),
        "hidden": list(HIDDEN),
        "tau": TAU,
        "mse_weight": MSE_WEIGHT,
        "clip": CLIP,
        "lists": len(train) + len(validation),
    }
    return Ranker(tuple(names), Ensemble(nets), info)
