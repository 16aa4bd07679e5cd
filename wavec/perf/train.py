"""Train the performance model's MLPs from feature tables (``python -m wavec.perf.dataset build``).

    python -m wavec.perf.train FEATURES.csv [FEATURES.csv ...] --out wavec/perf/weights [--rows train|all]
                               [--hidden 32,32] [--steps 3000] [--seed 0]

Requires: torch (CPU; training only: inference is numpy, ``wavec.perf.estimator``); feature rows with a
measured time (``us``); rows without one (a dry run's) are skipped.

Guarantees: for every GPU in the tables, and for ``all`` of them together when there are several, and for
every family with at least ``MIN_ROWS`` rows: the mean MLP trained with a MAPE loss on the time (``|e /
ê - 1|``, e the measured efficiency roofline / measured, ê the prediction), the ceiling MLP with the
pinball loss at the 0.8 quantile of log e, written to ``OUT/<trained on>/<family>.npz`` with the rows and
the training MAPE in its metadata.  ``--rows train`` (the default) trains on the ``train`` split only, so
the ``test`` rows stay held out for ``benchmarks/perf_eval.py``.  Same seed, same weights.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .estimator import INPUTS, MLP, Model, model_inputs, standardiser
from .gpus import gpu as find_gpu

__all__ = ["fit_mlp", "make_net", "to_mlp", "mape", "table", "train_all", "main", "QUANTILE", "MIN_ROWS"]

QUANTILE = 0.8
WEIGHT_DECAY = 3e-2
MIN_ROWS = 8


def table(rows: Sequence[dict[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, measured efficiencies) of feature rows that have a measured time."""
    xs, effs = [], []
    for r in rows:
        values = {k[2:]: float(v) for k, v in r.items() if k.startswith("f:")}
        xs.append(model_inputs(values, find_gpu(r["gpu"])))
        effs.append(float(r["roofline_us"]) / float(r["us"]))
    return np.array(xs).reshape(-1, len(INPUTS)), np.array(effs)


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
    steps: int = 3000,
    seed: int = 0,
    weight_decay: float = WEIGHT_DECAY,
) -> MLP:
    """An :class:`~wavec.perf.estimator.MLP` of log efficiency fitted by full-batch Adam: ``loss="mape"``
    (the time's relative error) or ``"p80"`` (pinball at ``QUANTILE``)."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)  # a few hundred rows: threads only contend (and results stay reproducible)
    mean, std = standardiser(x)
    z = torch.tensor((x - mean) / std, dtype=torch.float64)
    y = torch.tensor(np.log(efficiency), dtype=torch.float64)
    net = make_net(x.shape[1], hidden)
    with torch.no_grad():  # start at the median efficiency: exp() of a far-off start overflows the loss
        net[-1].bias.fill_(float(y.median()))
    # coupled L2 (not AdamW's decay): on ~300 rows per family it halved the held-out error of a known
    # efficiency function, where the unregularised net memorised its training rows
    opt = torch.optim.Adam(net.parameters(), lr=3e-3, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for _ in range(steps):
        opt.zero_grad()
        pred = net(z)[:, 0]
        if loss == "mape":
            value = (torch.exp(torch.clamp(y - pred, max=20.0)) - 1).abs().mean()
        else:
            diff = y - pred
            value = torch.maximum(QUANTILE * diff, (QUANTILE - 1) * diff).mean()
        value.backward()
        opt.step()
        sched.step()
    return to_mlp(net, mean, std)


def mape(pred_eff: np.ndarray, eff: np.ndarray) -> float:
    """Mean absolute percentage error of the times (roofline / efficiency), in percent."""
    return float(np.mean(np.abs(eff / pred_eff - 1.0)) * 100)


def train_all(
    rows: Sequence[dict[str, str]],
    out: Path,
    split: str = "train",
    hidden: Sequence[int] = (32, 32),
    steps: int = 3000,
    seed: int = 0,
) -> list[Model]:
    timed = [r for r in rows if r.get("us") and (split == "all" or r["split"] == split)]
    gpus = sorted({r["gpu"] for r in timed})
    models = []
    for trained_on in gpus + (["all"] if len(gpus) > 1 else []):
        for family in sorted({r["family"] for r in timed}):
            mine = [r for r in timed if r["family"] == family and trained_on in ("all", r["gpu"])]
            if len(mine) < MIN_ROWS:
                print(f"  {trained_on}/{family}: {len(mine)} rows, fewer than {MIN_ROWS}: not trained", file=sys.stderr)
                continue
            x, eff = table(mine)
            mean = fit_mlp(x, eff, "mape", hidden, steps, seed)
            ceiling = fit_mlp(x, eff, "p80", hidden, steps, seed)
            above = float(np.mean(eff <= ceiling.efficiency(x)))
            meta = {"trained_on": trained_on, "rows": len(mine), "split": split, "inputs": list(INPUTS)}
            meta["sources"] = sorted({r.get("source") or "perf_dataset.py" for r in mine})  # provenance
            meta.update({"train_mape": round(mape(mean.efficiency(x), eff), 3), "below_ceiling": round(above, 3)})
            model = Model(family, mean, ceiling, meta)
            (out / trained_on).mkdir(parents=True, exist_ok=True)
            model.save(out / trained_on / f"{family}.npz")
            print(f"  {trained_on}/{family}: {len(mine)} rows, train MAPE {meta['train_mape']:.2f}%, "
                  f"{100 * above:.0f}% of rows at or below the ceiling", file=sys.stderr)  # fmt: skip
            models.append(model)
    return models


def main(argv: list[str] | None = None) -> int:
    from .dataset import read_rows

    p = argparse.ArgumentParser(prog="python -m wavec.perf.train", description="train the performance-model MLPs")
    p.add_argument("features", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "weights")
    p.add_argument("--rows", choices=("train", "all"), default="train")
    p.add_argument("--hidden", default="32,32")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    models = train_all(read_rows(args.features), args.out, args.rows, hidden, args.steps, args.seed)
    print(f"wrote {len(models)} models under {args.out}", file=sys.stderr)
    return 0 if models else 1


if __name__ == "__main__":
    sys.exit(main())
