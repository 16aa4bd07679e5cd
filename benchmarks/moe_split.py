"""Split-K MoE down-projection (``MoeConfig(split_k=S)``) against the unsplit kernels at decode token
counts on the shapes where the region rule says it applies (a deep I on a down grid far below one wave:
Mixtral-8x7B), bf16 (issue 21: "split-K for the down-projection when the grid is far below one wave").

Per model shape and T (balanced routing, beta = 1, ``moe_profile.routing``): the whole operator
(``fused_experts(config=..., deterministic=False)``, routing included; the atomic combine, or with
``--deterministic`` the deterministic one's split form) for each base configuration of ``BASES`` unsplit and split
into each S of ``SPLITS`` (wider than ``tm.split_candidates``' one-wave rule on purpose: the rows say where the rule
should sit), plus the default (deterministic) static choice as the reference users get today; each a CUDA-graph
replay with L2 flushed before it (median of ``REPS`` after ``WARMUP``; ``moe_profile.graph_time``). The anchor is
timed the same way in the same run: a torch copy of the active experts' weight bytes (``copy TB/s`` = 2 x bytes /
time, the bandwidth decode chases; a configuration's TB/s counts the weight bytes read once). Each configuration's
max error against the f32 reference is kept with it.

    python -m benchmarks.moe_split [--models Mixtral-8x7B-TP1,Mixtral-8x7B-TP2] [--tokens 1,4,8] [--splits 2,4,8]

Prints one table (last) and, when ``$OUT`` is set, writes it to ``$OUT/moe_split.txt`` and the rows to
``$OUT/moe_split.csv``.  About 3-4 minutes on an H200 (the first call of each configuration compiles).
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
from dataclasses import replace

import torch

from wavec.kernels import fused_moe as fm
from wavec.kernels.fused_moe import MoeConfig
from wavec.tuning import moe as tm
from wavec.tuning import moe_profile as mp

MODELS = ["Mixtral-8x7B-TP1", "Mixtral-8x7B-TP2"]
TOKENS = [1, 4, 8]
BASES = [  # the static rule's decode choice (BND 64) and wider down tiles that leave room for slices
    MoeConfig(16, 32, 64, 64, 3),
    MoeConfig(16, 64, 128, 64, 3),
    MoeConfig(16, 64, 256, 64, 3),
    MoeConfig(16, 64, 256, 64, 4),
]
SPLITS = (2, 4, 8)
WARMUP, REPS = 10, 50


def configs(shape: tm.MoeShape, splits: tuple = SPLITS) -> list[MoeConfig]:
    """``BASES`` and their splits into each S of ``splits`` with at most one slice per K step of I."""
    out = []
    for c in BASES:
        out += [c] + [replace(c, split_k=s) for s in splits if 1 < s <= -(-shape.inter // c.block_k)]
    return out


def point(
    shape: tm.MoeShape,
    t: int,
    w: tuple,
    flush: torch.Tensor,
    timer=mp.graph_time,
    splits: tuple = SPLITS,
    deterministic: bool = False,
) -> dict:
    """One (model, T): per configuration (label) microseconds, TB/s and max error on the atomic combine
    (``deterministic``: the deterministic one, f32 rows per slice); the default deterministic static choice
    as ``default``; the copy anchor (``timer(fn, flush, warmup, reps)``: seconds; the tensors live on
    ``w``'s device)."""
    w1, w2 = w
    dev = w1.device
    x = torch.randn(t, shape.hidden, device=dev, dtype=w1.dtype)
    wts, ids, _beta = mp.routing(t, shape.experts, shape.top_k, 1.0, True, seed=t, device=dev)
    ref = fm.reference(x, w1, w2, wts, ids)
    active = int(torch.unique(ids).numel())
    nbytes = active * 3 * shape.hidden * shape.inter * 2
    src = torch.empty(nbytes // 2, device=dev, dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    copy_us = 1e6 * timer(lambda: dst.copy_(src), flush, WARMUP, REPS)
    row: dict = {"model": shape.name, "T": t, "active": active, "MiB": round(nbytes / 2**20, 1)}
    row |= {"copy_us": round(copy_us, 2), "copy_TBps": round(2 * nbytes / copy_us / 1e6, 3)}
    out = torch.empty_like(x)
    # the default is what a user's call gets: ``config=None`` (the device's static rule when no table is
    # registered, sm_90a's split-K region included), not ``static_config`` asked for without the GPU's facts
    runs = [("default", None, True)] + [(c.label(), c, deterministic) for c in configs(shape, splits)]
    for name, cfg, det in runs:

        def run(c: MoeConfig | None = cfg, d: bool = det) -> torch.Tensor:
            return fm.fused_experts(x, w1, w2, wts, ids, config=c, deterministic=d, out=out)

        err = float((run().float() - ref).abs().max())
        us = 1e6 * timer(run, flush, WARMUP, REPS)
        row[name] = (round(us, 2), round(nbytes / us / 1e6, 3), round(err, 5))
        if cfg is None:
            row["default_cfg"] = fm.dispatch_report()["last"].label()
    return row


def table(rows: list[dict], shapes: dict, splits: tuple = SPLITS) -> str:
    """Per row: copy anchor, the default (deterministic static), and per base configuration its unsplit
    time and its best split (S, time, speed-up over unsplit); the worst error of any configuration."""
    lines = [
        f"{'model':<16} {'T':>2} {'MiB':>6} {'copy us':>8} {'TB/s':>6} {'default us':>10}  "
        f"{'base cfg':<16} {'unsplit us':>10} {'TB/s':>6} {'best S':>6} {'split us':>8} {'TB/s':>6} {'x':>5} "
        f"{'max err':>8}  default cfg"
    ]
    for r in rows:
        errs = [v[2] for v in r.values() if isinstance(v, tuple)]
        for c in BASES:
            cands = [s for s in configs(shapes[r["model"]], splits) if s.split_k > 1 and s.unsplit() == c]
            base = r[c.label()]
            best = min(cands, key=lambda s: r[s.label()][0]) if cands else None
            sp = r[best.label()] if best else ("-", "-")
            gain = f"{base[0] / sp[0]:>5.2f}" if best else f"{'-':>5}"
            lines.append(
                f"{r['model']:<16} {r['T']:>2} {r['MiB']:>6} {r['copy_us']:>8} {r['copy_TBps']:>6} "
                f"{r['default'][0]:>10}  {c.label():<16} {base[0]:>10} {base[1]:>6} "
                f"{best.split_k if best else '-':>6} {sp[0]:>8} {sp[1]:>6} {gain} {max(errs):>8.4f}  {r['default_cfg']}"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--splits", default=",".join(map(str, SPLITS)), help="S values to try per base")
    ap.add_argument("--deterministic", action="store_true", help="time the deterministic combine's split form")
    args = ap.parse_args()
    splits = tuple(int(v) for v in args.splits.split(","))
    if not torch.cuda.is_available():
        raise SystemExit("moe_split: needs a CUDA GPU")
    flush = torch.empty(mp.FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rows, shapes = [], {}
    for name in args.models.split(","):
        shape = shapes[name] = tm.model(name)
        w = mp.weights(shape)
        for t in (int(v) for v in args.tokens.split(",")):
            rows.append(point(shape, t, w, flush, splits=splits, deterministic=args.deterministic))
            print(f"[moe_split] {name} T={t} done", flush=True)
        del w
    text = table(rows, shapes, splits)
    out = os.environ.get("OUT")
    if out:
        pathlib.Path(out, "moe_split.txt").write_text(text + "\n")
        with open(pathlib.Path(out, "moe_split.csv"), "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0]))
            wr.writeheader()
            wr.writerows(rows)
    print(text)


if __name__ == "__main__":
    main()
