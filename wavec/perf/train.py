"""Train the performance model's MLPs from feature tables (``python -m wavec.perf.dataset build``).

    python -m wavec.perf.train FEATURES.csv [FEATURES.csv ...] --out wavec/perf/weights [--rows train|all]
                               [--hidden 32,32] [--steps 2000] [--seed 0] [--members 5] [--only h100,all]
                               [--families rows,moe] [--val-splits 3]

Requires: torch (CPU; training only: inference is numpy, ``wavec.perf.estimator``); feature rows with a
measured time (``us``); rows without one (a dry run's) are skipped.

Guarantees: for every GPU in the tables, and for ``all`` of them together when there are several, and for
every family with at least ``MIN_ROWS`` rows: the weight decays chosen from ``WEIGHT_DECAYS`` on
validation shapes (``VAL_FRACTION`` of the training rows' shapes, held out by shape as the test split
is: never a test row; the mean model's by MAPE averaged over ``--val-splits`` seeded splits, the ceiling's
by pinball loss on the first), then on all the training
rows an ensemble of ``members`` seeds of the mean MLP (MAPE loss on the time, ``|e / ê - 1|``, e the
measured efficiency roofline / measured, ê the prediction) and of the ceiling MLP (pinball loss at the
0.8 quantile of log e), written to ``OUT/<trained on>/<family>.npz`` with the rows, the choices, the
validation and training scores in its metadata.  For ``estimator.LAUNCH_FAMILIES`` the target is the
efficiency of the time less the GPU's launch cost and the mean model's loss (and validation MAPE) weighs
each row by that part's share of its time (``launch_targets``: still the time's MAPE), recorded as
``launch_offset`` in the metadata.  ``--rows train`` (the default) trains on the ``train``
split only, so the ``test`` rows stay held out for ``benchmarks/perf_eval.py``.  ``--only`` trains those
models alone (GPU keys or ``all``: separate processes can train them side by side), ``--families``
those families alone.  Same seed, same
weights.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .estimator import LAUNCH_FAMILIES, MLP, Ensemble, Model, inputs_for, model_inputs, standardiser
from .gpus import gpu as find_gpu

__all__ = [
    "fit_mlp",
    "fit_mlps",
    "fit_ensemble",
    "validation_split",
    "launch_targets",
    "choose_weight_decay",
    "make_net",
    "to_mlp",
    "mape",
    "pinball",
    "table",
    "train_all",
    "main",
    "QUANTILE",
    "MIN_ROWS",
    "WEIGHT_DECAYS",
    "VAL_SPLITS",
]

QUANTILE = 0.8
WEIGHT_DECAY = 3e-2
# coupled L2 strengths tried per family on the validation shapes (a few hundred rows: from barely to firmly
# regularised)
WEIGHT_DECAYS = (3e-3, 1e-2, 3e-2, 1e-1)
VAL_FRACTION = 0.2
# the mean model's decay is chosen on this many seeded validation splits (averaged): one fifth of ~30
# shapes is a handful, and one split's choice swung with which shapes it drew (docs/perf_model.md)
VAL_SPLITS = 3
MIN_ROWS = 8


def table(rows: Sequence[dict[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, measured efficiencies) of feature rows that have a measured time: the inputs of their family's
    models (``estimator.inputs_for``) when the rows are of one family, else every input."""
    families = {r["family"] for r in rows}
    family = next(iter(families)) if len(families) == 1 else None
    xs, effs = [], []
    for r in rows:
        values = {k[2:]: float(v) for k, v in r.items() if k.startswith("f:")}
        xs.append(model_inputs(values, find_gpu(r["gpu"]), family))
        effs.append(float(r["roofline_us"]) / float(r["us"]))
    return np.array(xs).reshape(-1, len(inputs_for(family))), np.array(effs)


def launch_targets(rows: Sequence[dict[str, str]], efficiency: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(target efficiency, row weight) of a ``LAUNCH_FAMILIES`` model: the efficiency of the time less the
    GPU's fixed launch cost L (roofline / (t - L)) and 1 - L / t, since the time's relative error of
    ``L + roofline / e`` is (1 - L / t) x the launch-free part's.  Every time must exceed L."""
    fixed = np.array([find_gpu(r["gpu"]).launch_s * 1e6 / float(r["us"]) for r in rows])
    if np.any(fixed >= 1.0):
        worst = max(rows, key=lambda r: find_gpu(r["gpu"]).launch_s * 1e6 / float(r["us"]))
        raise ValueError(f"a {worst['gpu']} row takes {worst['us']} us, not more than the GPU's launch cost")
    return efficiency / (1.0 - fixed), 1.0 - fixed


def make_net(inputs: int, hidden: Sequence[int] = (32, 32)) -> Any:
    """The torch network :class:`~wavec.perf.estimator.MLP` evaluates: Linear and ReLU layers, float64."""
    import torch

    sizes = [inputs, *hidden, 1]
    layers: list[Any] = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1], dtype=torch.float64))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def to_mlp(net: Any, mean: np.ndarray, std: np.ndarray) -> MLP:
    import torch

    linear = [m for m in net if isinstance(m, torch.nn.Linear)]
    ws = tuple(m.weight.detach().numpy().copy() for m in linear)
    bs = tuple(m.bias.detach().numpy().copy() for m in linear)
    return MLP(mean, std, ws, bs)


def fit_mlp(
    x: np.ndarray,
    efficiency: np.ndarray,
    loss: str = "mape",
    hidden: Sequence[int] = (32, 32),
    steps: int = 2000,
    seed: int = 0,
    weight_decay: float = WEIGHT_DECAY,
) -> MLP:
    """An :class:`~wavec.perf.estimator.MLP` of log efficiency fitted by full-batch Adam: ``loss="mape"``
    (the time's relative error) or ``"p80"`` (pinball at ``QUANTILE``)."""
    return fit_mlps(x, efficiency, loss, hidden, steps, [(seed, weight_decay)])[0]


def _stacked(nets: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """The nets' Linear weights and biases stacked along a leading member axis, as trainable leaves."""
    import torch

    layers = [[m for m in net if isinstance(m, torch.nn.Linear)] for net in nets]
    ws = [torch.stack([ls[i].weight.detach() for ls in layers]).requires_grad_() for i in range(len(layers[0]))]
    bs = [torch.stack([ls[i].bias.detach() for ls in layers]).requires_grad_() for i in range(len(layers[0]))]
    return ws, bs


def fit_mlps(
    x: np.ndarray,
    efficiency: np.ndarray,
    loss: str,
    hidden: Sequence[int],
    steps: int,
    members: Sequence[tuple[int, float]],
    sample_weight: np.ndarray | None = None,
) -> list[MLP]:
    """One MLP per ``(seed, weight decay)`` member, trained side by side: the members' weights are stacked
    on a leading axis and their losses summed, so each member's gradient and Adam state are its own (Adam
    is elementwise) and the result is that of training them one at a time, at about one's cost.
    ``sample_weight``: each row's weight in the loss (a weighted mean; none: the plain mean)."""
    import torch

    torch.set_num_threads(1)  # a few hundred rows: threads only contend (and results stay reproducible)
    mean, std = standardiser(x)
    z = torch.tensor((x - mean) / std, dtype=torch.float64)
    y = torch.tensor(np.log(efficiency), dtype=torch.float64)
    nets = []
    for seed, _ in members:
        torch.manual_seed(seed)
        nets.append(make_net(x.shape[1], hidden))
    ws, bs = _stacked(nets)
    with torch.no_grad():  # start at the median efficiency: exp() of a far-off start overflows the loss
        bs[-1].fill_(float(y.median()))
    decay = torch.tensor([wd for _, wd in members], dtype=torch.float64)
    row_w = None if sample_weight is None else torch.tensor(sample_weight / sample_weight.sum(), dtype=torch.float64)
    params = [*ws, *bs]
    # coupled L2 (not AdamW's decay): on ~300 rows per family it halved the held-out error of a known
    # efficiency function, where the unregularised net memorised its training rows
    opt = torch.optim.Adam(params, lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for _ in range(steps):
        opt.zero_grad()
        h = torch.baddbmm(bs[0][:, None, :], z.expand(len(members), -1, -1), ws[0].transpose(1, 2))
        for w, b in zip(ws[1:], bs[1:], strict=True):
            h = torch.baddbmm(b[:, None, :], torch.relu(h), w.transpose(1, 2))
        diff = y[None, :] - h[:, :, 0]
        if loss == "mape":
            per_row = (torch.exp(torch.clamp(diff, max=20.0)) - 1).abs()
        else:
            per_row = torch.maximum(QUANTILE * diff, (QUANTILE - 1) * diff)
        value = per_row.mean(dim=1).sum() if row_w is None else (per_row @ row_w).sum()
        value.backward()
        with torch.no_grad():
            for p in params:
                p.grad += decay.view(-1, *([1] * (p.dim() - 1))) * p
        opt.step()
        sched.step()
    out = []
    for i in range(len(members)):
        weights = tuple(w[i].detach().numpy().copy() for w in ws)
        out.append(MLP(mean, std, weights, tuple(b[i].detach().numpy().copy() for b in bs)))
    return out


def mape(pred_eff: np.ndarray, eff: np.ndarray, weight: np.ndarray | None = None) -> float:
    """Mean absolute percentage error of the times (roofline / efficiency), in percent; with ``weight``
    (``launch_targets``'), of the times with the fixed launch cost."""
    err = np.abs(eff / pred_eff - 1.0)
    return float(np.mean(err if weight is None else err * weight) * 100)


def fit_ensemble(
    x: np.ndarray,
    efficiency: np.ndarray,
    loss: str = "mape",
    hidden: Sequence[int] = (32, 32),
    steps: int = 2000,
    seeds: Sequence[int] = (0, 1, 2),
    weight_decay: float = WEIGHT_DECAY,
) -> Ensemble:
    """One :func:`fit_mlp` per seed (trained side by side), as an :class:`~wavec.perf.estimator.Ensemble`."""
    return Ensemble(tuple(fit_mlps(x, efficiency, loss, hidden, steps, [(s, weight_decay) for s in seeds])))


def validation_split(shapes: Sequence[str], seed: int = 0) -> np.ndarray:
    """A boolean mask of the rows whose shape is among ``VAL_FRACTION`` of the distinct shapes (seeded;
    at least one shape, and never all of them when there are two or more)."""
    distinct = sorted(set(shapes))
    rng = np.random.default_rng(seed)
    count = min(max(1, round(VAL_FRACTION * len(distinct))), max(1, len(distinct) - 1))
    held = {distinct[i] for i in rng.choice(len(distinct), count, replace=False)}
    return np.array([s in held for s in shapes])


def pinball(pred_eff: np.ndarray, eff: np.ndarray) -> float:
    """Mean pinball loss at ``QUANTILE`` of log efficiency (what the ceiling model minimises)."""
    diff = np.log(eff) - np.log(pred_eff)
    return float(np.mean(np.maximum(QUANTILE * diff, (QUANTILE - 1) * diff)))


def choose_weight_decay(
    x: np.ndarray,
    efficiency: np.ndarray,
    shapes: Sequence[str],
    hidden: Sequence[int],
    steps: int,
    seed: int,
    loss: str = "mape",
    weight: np.ndarray | None = None,
    splits: int = 1,
) -> tuple[float, dict[str, float]]:
    """The ``WEIGHT_DECAYS`` entry whose MLP for ``loss``, fitted on the other training shapes, scores best
    on the validation shapes (the time's MAPE for ``"mape"``, the pinball loss for ``"p80"``: a ceiling
    needs its own choice, its gradients are smaller and a strong decay flattens it to a constant), the
    score averaged over ``splits`` validation splits (seeds ``seed`` .. ``seed + splits - 1``); and every
    candidate's score.  ``weight``: the mean model's row weights (``launch_targets``)."""
    totals = dict.fromkeys(WEIGHT_DECAYS, 0.0)
    for i in range(splits):
        val = validation_split(shapes, seed + i)
        if val.all() or not val.any():
            return WEIGHT_DECAY, {}
        for wd, value in _validation_scores(x, efficiency, val, hidden, steps, seed, loss, weight).items():
            totals[wd] += value / splits
    scores = {f"{wd:g}": round(value, 4) for wd, value in totals.items()}
    best = min(WEIGHT_DECAYS, key=lambda wd: scores[f"{wd:g}"])
    return best, scores


def _validation_scores(
    x: np.ndarray,
    efficiency: np.ndarray,
    val: np.ndarray,
    hidden: Sequence[int],
    steps: int,
    seed: int,
    loss: str,
    weight: np.ndarray | None,
) -> dict[float, float]:
    """{decay: score on the ``val`` rows} of the MLPs fitted on the others, one per ``WEIGHT_DECAYS``."""
    fit_w = None if weight is None else weight[~val]
    models = fit_mlps(x[~val], efficiency[~val], loss, hidden, steps, [(seed, wd) for wd in WEIGHT_DECAYS], fit_w)
    val_w = None if weight is None else weight[val]

    def score(m: MLP) -> float:
        pred = m.efficiency(x[val])
        return mape(pred, efficiency[val], val_w) if loss == "mape" else pinball(pred, efficiency[val])

    return {wd: score(m) for wd, m in zip(WEIGHT_DECAYS, models, strict=True)}


def train_all(
    rows: Sequence[dict[str, str]],
    out: Path,
    split: str = "train",
    hidden: Sequence[int] = (32, 32),
    steps: int = 2000,
    seed: int = 0,
    members: int = 5,
    only: Sequence[str] = (),
    families: Sequence[str] = (),
    val_splits: int = VAL_SPLITS,
) -> list[Model]:
    timed = [r for r in rows if r.get("us") and (split == "all" or r["split"] == split)]
    gpus = sorted({r["gpu"] for r in timed})
    models = []
    for trained_on in gpus + (["all"] if len(gpus) > 1 else []):
        if only and trained_on not in only:
            continue
        for family in sorted({r["family"] for r in timed}):
            if families and family not in families:
                continue
            mine = [r for r in timed if r["family"] == family and trained_on in ("all", r["gpu"])]
            if len(mine) < MIN_ROWS:
                print(f"  {trained_on}/{family}: {len(mine)} rows, fewer than {MIN_ROWS}: not trained", file=sys.stderr)
                continue
            x, eff = table(mine)
            launch = family in LAUNCH_FAMILIES
            weight = None
            if launch:  # the models learn the efficiency of the time less the launch cost
                eff, weight = launch_targets(mine, eff)
            shapes = [r["shape"] for r in mine]
            wd, scores = choose_weight_decay(x, eff, shapes, hidden, steps, seed, "mape", weight, val_splits)
            wd80, scores80 = choose_weight_decay(x, eff, shapes, hidden, steps, seed, "p80")
            seeds = [seed + i for i in range(members)]
            mean = Ensemble(tuple(fit_mlps(x, eff, "mape", hidden, steps, [(s, wd) for s in seeds], weight)))
            ceiling = fit_ensemble(x, eff, "p80", hidden, steps, seeds, wd80)
            above = float(np.mean(eff <= ceiling.efficiency(x)))
            meta = {"trained_on": trained_on, "rows": len(mine), "split": split, "inputs": list(inputs_for(family))}
            meta["launch_offset"] = launch
            meta.update({"weight_decay": wd, "val_mape": scores, "val_splits": val_splits, "members": members})
            meta["steps"] = steps
            meta.update({"p80_weight_decay": wd80, "val_pinball": scores80})
            meta["sources"] = sorted({r.get("source") or "perf_dataset.py" for r in mine})  # provenance
            train_mape = mape(mean.efficiency(x), eff, weight)
            meta.update({"train_mape": round(train_mape, 3), "below_ceiling": round(above, 3)})
            model = Model(family, mean, ceiling, meta)
            (out / trained_on).mkdir(parents=True, exist_ok=True)
            model.save(out / trained_on / f"{family}.npz")
            print(f"  {trained_on}/{family}: {len(mine)} rows, weight decay {wd:g} (validation MAPE {scores}), "
                  f"train MAPE {meta['train_mape']:.2f}%, {100 * above:.0f}% of rows at or below the ceiling",
                  file=sys.stderr, flush=True)  # fmt: skip
            models.append(model)
    return models


def main(argv: list[str] | None = None) -> int:
    from .dataset import read_rows

    p = argparse.ArgumentParser(prog="python -m wavec.perf.train", description="train the performance-model MLPs")
    p.add_argument("features", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "weights")
    p.add_argument("--rows", choices=("train", "all"), default="train")
    p.add_argument("--hidden", default="32,32")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--members", type=int, default=5, help="seeds per ensemble")
    p.add_argument("--only", default="", help="train only these models (comma-separated GPU keys or 'all')")
    p.add_argument("--families", default="", help="train only these families (comma-separated)")
    p.add_argument("--val-splits", type=int, default=VAL_SPLITS, help="validation splits for the mean's decay")
    args = p.parse_args(argv)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    only = [k for k in args.only.split(",") if k]
    rows = read_rows(args.features)
    families = [f for f in args.families.split(",") if f]
    models = train_all(
        rows, args.out, args.rows, hidden, args.steps, args.seed, args.members, only, families, args.val_splits
    )
    print(f"wrote {len(models)} models under {args.out}", file=sys.stderr)
    return 0 if models else 1


if __name__ == "__main__":
    sys.exit(main())
