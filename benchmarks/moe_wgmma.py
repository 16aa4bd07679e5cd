"""Large token blocks on wgmma (``MoeConfig(wgmma=True)``: both GEMMs on sm_90a ``wgmma``, the token block
of 64 or 128 rows on the instruction's M axis) against the mma.sync kernels and the vLLM-algorithm Triton
baseline at prefill token counts, bf16, on a Hopper GPU (issue 21: "wgmma for the large token blocks").

Per model shape of ``moe_shapes.csv``, T and balance beta (``benchmarks.moe.routing``): the whole operator
(routing included) for the static rule's mma.sync configuration (``static_config`` without wgmma), each
configuration of ``CONFIGS`` and ``benchmarks.moe_triton.vllm_fused_experts`` (vLLM's algorithm with vLLM's
H100 tables where present), each a CUDA-graph replay with L2 flushed before it (median of 50 after 10;
``benchmarks.moe.timed``), in one run; TF/s counts 6*T*k*H*I; each configuration's max error against the
f32 reference is checked (< 2e-2).

    python -m benchmarks.moe_wgmma [--models OLMoE-1B-7B,...] [--tokens 128,256,1024,4096] [--betas 1.0,0.7]

Prints one table (last) and, when ``$OUT`` is set, writes it to ``$OUT/moe_wgmma.txt`` and the rows to
``$OUT/moe_wgmma.csv``.
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib

import torch

from benchmarks import moe
from wavec.kernels import fused_moe as fm
from wavec.kernels.fused_moe import MoeConfig
from wavec.tuning import moe_profile as mp

TOKENS = [128, 256, 1024, 4096]
BETAS = [1.0, 0.7]
CONFIGS = [
    MoeConfig(64, 64, 128, 64, 4, wgmma=True),
    MoeConfig(64, 128, 128, 64, 4, wgmma=True),
    MoeConfig(128, 64, 128, 64, 4, wgmma=True),
    MoeConfig(128, 128, 128, 64, 4, wgmma=True),
    MoeConfig(128, 128, 256, 64, 3, wgmma=True),
    MoeConfig(128, 128, 128, 64, 4, 8, wgmma=True),
    MoeConfig(128, 128, 256, 64, 4, wgmma=True),
    MoeConfig(64, 128, 256, 64, 4, wgmma=True),
    MoeConfig(128, 128, 256, 64, 4, 8, wgmma=True),
]
MAX_ERR = 2e-2


def point(m: dict, t: int, beta: float, flush: torch.Tensor, cache: dict, configs: list[MoeConfig]) -> dict:
    """One (model, T, beta): us and TF/s of the mma.sync static choice, every configuration and the
    vLLM-algorithm baseline (when Triton is importable)."""
    e, k, h, i = m["experts"], m["top_k"], m["hidden"], m["intermediate"]
    if m["model"] not in cache:
        cache.clear()
        g = torch.Generator(device=moe.DEV).manual_seed(0)
        w1 = (torch.randn(e, 2 * i, h, device=moe.DEV, generator=g) / h**0.5).bfloat16()
        w2 = (torch.randn(e, h, i, device=moe.DEV, generator=g) / i**0.5).bfloat16()
        cache[m["model"]] = (w1, w2)
    w1, w2 = cache[m["model"]]
    x = torch.randn(t, h, device=moe.DEV).bfloat16()
    wts, ids, got_beta = moe.routing(t, e, k, beta, m["renormalize"], seed=t)
    ref = fm.reference(x, w1, w2, wts, ids)
    flops = 6 * t * k * h * i
    out = torch.empty_like(x)
    dense = fm.static_config(t, k, e)
    impls = {"mma_sync": dense, **{c.label(): c for c in configs}}
    row: dict = {"model": m["model"], "T": t, "beta": beta, "beta_got": round(got_beta, 3), "mma_cfg": dense.label()}
    fns = {name: (lambda c=c: fm.fused_experts(x, w1, w2, wts, ids, config=c, out=out)) for name, c in impls.items()}
    if moe.moe_triton is not None:
        fns["vllm_triton"] = lambda: moe.moe_triton.vllm_fused_experts(x, w1, w2, wts, ids)
    for name, fn in fns.items():
        err = float((fn().float() - ref).abs().max())
        if name != "vllm_triton" and not err < MAX_ERR:  # (the baseline's own error is reported, not judged)
            raise SystemExit(f"moe_wgmma: {m['model']} T={t} {name}: max error {err} (>= {MAX_ERR})")
        us = moe.timed(fn, flush, graph=True)
        row[name] = (round(us, 2), round(flops / us / 1e6, 1), round(err, 5))
    return row


def table(rows: list[dict]) -> str:
    """Per row: the mma.sync static choice, the best wgmma configuration, its speed-up over mma.sync and
    over the vLLM-algorithm baseline, the worst error."""
    head = (
        f"{'model':<18} {'T':>5} {'beta':>4} {'mma us':>9} {'mma TF/s':>8} {'wgmma us':>9} {'TF/s':>6} "
        f"{'x mma':>6} {'vllm us':>9} {'vllm TF/s':>9} {'x vllm':>6} {'max err':>8}  best wgmma / mma cfg"
    )
    lines = [head]
    for r in rows:
        wg = {c.label(): r[c.label()] for c in CONFIGS if c.label() in r}
        best = min(wg, key=lambda n: wg[n][0])
        mma, b = r["mma_sync"], wg[best]
        vllm = r.get("vllm_triton", (float("nan"), float("nan"), 0.0))
        err = max(v[2] for v in r.values() if isinstance(v, tuple))
        lines.append(
            f"{r['model']:<18} {r['T']:>5} {r['beta']:>4} {mma[0]:>9} {mma[1]:>8} {b[0]:>9} {b[1]:>6} "
            f"{mma[0] / b[0]:>6.2f} {vllm[0]:>9} {vllm[1]:>9} {vllm[0] / b[0]:>6.2f} {err:>8.4f}  "
            f"{best} / {r['mma_cfg']}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--betas", default=",".join(map(str, BETAS)))
    ap.add_argument("--configs", default="", help="labels of CONFIGS to time (default: all)")
    args = ap.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        raise SystemExit("moe_wgmma: needs an sm_90a (Hopper) GPU: these kernels run on wgmma")
    if moe.moe_triton is None:
        print(f"vllm_triton baseline left out ({moe.MISSING})", flush=True)
    configs = [c for c in CONFIGS if not args.configs or c.label() in args.configs.split(",")]
    flush = torch.empty(mp.FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rows, cache = [], {}
    for m in moe.models(args.models.split(",") if args.models else None):
        for t in (int(v) for v in args.tokens.split(",")):
            for beta in (float(v) for v in args.betas.split(",")):
                rows.append(point(m, t, beta, flush, cache, configs))
                print(f"[moe_wgmma] {m['model']} T={t} beta={beta} done", flush=True)
    text = table(rows)
    out = os.environ.get("OUT")
    if out:
        pathlib.Path(out, "moe_wgmma.txt").write_text(text + "\n")
        with open(pathlib.Path(out, "moe_wgmma.csv"), "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0]))
            wr.writeheader()
            wr.writerows(rows)
    print(text)


if __name__ == "__main__":
    main()
