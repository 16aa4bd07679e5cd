"""Swap-AB MoE kernels (sm_90a ``wgmma``, tokens on the N axis) against the mma.sync kernels at decode
token counts, bf16, on a Hopper GPU (issue 21: "small token blocks put tokens on the wgmma N axis").

Per model shape and T (balanced routing, beta = 1, ``moe_profile.routing``): the whole operator
(``fused_experts(config=...)``, routing included) for the static rule's mma.sync configuration and each
swap-AB configuration of ``SWAPS``, each a CUDA-graph replay with L2 flushed before it (median of
``REPS`` after ``WARMUP``; ``moe_profile.graph_time``), and the anchor timed the same way in the same
run: a torch copy of the active experts' weight bytes (``dst.copy_(src)``: every byte read once and
written once, so ``copy TB/s`` = 2 x bytes / time is the bandwidth the decode GEMMs chase; the MoE's
TB/s counts the weight bytes read once).  Each configuration's max error against the f32 reference is
printed with it.

    python -m benchmarks.moe_swap [--models OLMoE-1B-7B,Qwen3-30B-A3B] [--tokens 1,4,8,16,32]

Prints one table (last) and, when ``$OUT`` is set, writes it to ``$OUT/moe_swap.txt`` and the rows to
``$OUT/moe_swap.csv``.  About 2-3 minutes on an H200 (the first call of each configuration compiles).
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib

import torch

from wavec.kernels import fused_moe as fm
from wavec.kernels.fused_moe import MoeConfig
from wavec.tuning import moe as tm
from wavec.tuning import moe_profile as mp

MODELS = ["OLMoE-1B-7B", "Qwen3-30B-A3B", "DeepSeek-V2-Lite"]
TOKENS = [1, 4, 8, 16, 32]
SWAPS = [
    MoeConfig(8, 64, 128, 128, 3, swap=True),
    MoeConfig(8, 128, 256, 64, 4, swap=True),
    MoeConfig(16, 64, 128, 128, 3, swap=True),
    MoeConfig(16, 128, 256, 64, 4, swap=True),
    MoeConfig(32, 128, 256, 64, 3, swap=True),
]
WARMUP, REPS = 10, 50


def point(shape: tm.MoeShape, t: int, w: tuple, flush: torch.Tensor, timer=mp.graph_time) -> dict:
    """One (model, T): microseconds, TB/s and max error of the mma.sync static choice and every swap-AB
    configuration, and the copy anchor's microseconds and TB/s (``timer(fn, flush, warmup, reps)``:
    seconds; the tensors live on ``w``'s device)."""
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
    row = {"model": shape.name, "T": t, "active": active, "MiB": round(nbytes / 2**20, 1)}
    row |= {"copy_us": round(copy_us, 2), "copy_TBps": round(2 * nbytes / copy_us / 1e6, 3)}
    out = torch.empty_like(x)
    dense = fm.static_config(t, shape.top_k, shape.experts)
    for name, cfg in [("mma_sync", dense)] + [(c.label(), c) for c in SWAPS]:
        err = float((fm.fused_experts(x, w1, w2, wts, ids, config=cfg, out=out).float() - ref).abs().max())
        us = 1e6 * timer(lambda c=cfg: fm.fused_experts(x, w1, w2, wts, ids, config=c, out=out), flush, WARMUP, REPS)
        row[name] = (round(us, 2), round(nbytes / us / 1e6, 3), round(err, 5))
    row["mma_sync_cfg"] = dense.label()
    return row


def table(rows: list[dict]) -> str:
    """Per row: copy anchor, mma.sync static, the best swap-AB (label), its speed-up over mma.sync, and
    the worst error of any configuration."""
    head = (
        f"{'model':<16} {'T':>3} {'act':>3} {'MiB':>6} {'copy us':>8} {'copy TB/s':>9} {'mma us':>8} "
        f"{'mma TB/s':>8} {'swap us':>8} {'swap TB/s':>9} {'x mma':>6} {'max err':>8}  best swap / mma cfg"
    )
    lines = [head]
    for r in rows:
        swaps = {c.label(): r[c.label()] for c in SWAPS}
        best = min(swaps, key=lambda k: swaps[k][0])
        mma, sw = r["mma_sync"], swaps[best]
        err = max(v[2] for v in (mma, *swaps.values()))
        lines.append(
            f"{r['model']:<16} {r['T']:>3} {r['active']:>3} {r['MiB']:>6} {r['copy_us']:>8} {r['copy_TBps']:>9} "
            f"{mma[0]:>8} {mma[1]:>8} {sw[0]:>8} {sw[1]:>9} {mma[0] / sw[0]:>6.2f} {err:>8.4f}  "
            f"{best} / {r['mma_sync_cfg']}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        raise SystemExit("moe_swap: needs an sm_90a (Hopper) GPU: the swap-AB kernels run on wgmma")
    flush = torch.empty(mp.FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rows = []
    for name in args.models.split(","):
        shape = tm.model(name)
        w = mp.weights(shape)
        for t in (int(v) for v in args.tokens.split(",")):
            rows.append(point(shape, t, w, flush))
            print(f"[moe_swap] {name} T={t} done", flush=True)
        del w
    text = table(rows)
    out = os.environ.get("OUT")
    if out:
        pathlib.Path(out, "moe_swap.txt").write_text(text + "\n")
        with open(pathlib.Path(out, "moe_swap.csv"), "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0]))
            wr.writeheader()
            wr.writerows(rows)
    print(text)


if __name__ == "__main__":
    main()
