"""Fused MoE experts on the H100, bf16: the RaMP protocol of issue 21 (skeleton).

For each model of ``benchmarks/data/moe_shapes.csv`` (a copy of ``shared/data/moe_shapes.csv``), token
count T and routing balance beta (= entropy(h) / ln min(E, T*k) of the expert histogram h), routing is
generated from logits skewed by rank (``logits[:, perm[r]] -= s * r``, a random expert permutation per
seed), with ``s`` searched so beta lands near the target.  Each implementation runs from ``topk_weights``
/ ``topk_ids`` to the combined output (routing preparation included), captured in a CUDA graph and
replayed; L2 is flushed (a 256 MB write) before each replay, which alone is timed with events; the median
of 50 replays after 10 warm-ups.  Reported: us, TB/s over the active experts' unique weight bytes (3*H*I*2
per active expert), TF/s (6*T*k*H*I flops), the max error against an f32 torch reference.

Implementations: ``wavec`` (``fused_experts(dispatch="static")``: the static tile choice), ``grouped_mm``
(the pipeline transformers' ``grouped_mm`` experts run: argsort by expert, gather, two
``torch._grouped_mm``, SiLU-and-mul, weight, ``index_add_``; timed eagerly, events around each call, as
transformers runs it: its ``_grouped_mm`` does not capture) and ``vllm_triton`` (``moe_triton.py``:
vLLM's algorithm in Triton with vLLM's H100 tables where the repository has them, ``vllm_cfg`` says
which; its align step included).

    python -m benchmarks.moe [--quick] [--models OLMoE-1B-7B,...] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import csv
import math
import pathlib
import statistics

import torch

from wavec.kernels import fused_moe as fm

try:
    from benchmarks import moe_triton
except ImportError as exc:  # no Triton (or not run as a module): main() says that baseline is left out
    moe_triton, MISSING = None, f"{type(exc).__name__}: {exc}"

SHAPES = pathlib.Path(__file__).parent / "data" / "moe_shapes.csv"
TOKENS = [1, 4, 16, 32, 64, 128, 256, 512, 1024, 4096]
BETAS = [1.0, 0.9, 0.8, 0.7, 0.6]
WARMUP, REPS = 10, 50
DEV = "cuda"
# transformers notes that its grouped_mm experts fail under CUDA graphs (torch._grouped_mm internals), and a
# failed capture can leave the stream unusable: that pipeline is timed eagerly (events around each call)
GRAPHED = ("wavec", "vllm_triton")


def models(names: list[str] | None) -> list[dict]:
    with open(SHAPES) as f:
        rows = [r for r in csv.DictReader(f) if not names or r["model"] in names]
    for r in rows:
        for key in ("experts", "top_k", "hidden", "intermediate"):
            r[key] = int(r[key])
        r["renormalize"] = r["norm_topk_prob"] == "true"
    return rows


def balance(ids: torch.Tensor, experts: int) -> float:
    h = torch.bincount(ids.flatten().long(), minlength=experts).double()
    p = h[h > 0] / h.sum()
    top = math.log(min(experts, ids.numel()))
    return float(-(p * p.log()).sum() / top) if top > 0 else 1.0


def routing(t: int, e: int, k: int, beta: float, renormalize: bool, seed: int) -> tuple:
    """(weights f32 [T, k], ids int32 [T, k], achieved beta): the skew ``s`` of rank-ordered logits is
    bisected until beta is within 0.01 of the target (or the search ends: small T*k bound beta below)."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    noise = torch.randn(t, e, device=DEV, generator=g)
    perm = torch.randperm(e, device=DEV, generator=g)
    rank = torch.empty(e, device=DEV).scatter_(0, perm, torch.arange(e, device=DEV, dtype=torch.float32))

    def route(s: float):
        w, i = torch.topk(torch.softmax(noise - s * rank, -1), k)
        return (w / w.sum(-1, keepdim=True) if renormalize else w), i.to(torch.int32)

    lo, hi = 0.0, 64.0
    best = route(0.0)
    for _ in range(30):
        mid = (lo + hi) / 2
        cand = route(mid)
        b = balance(cand[1], e)
        if abs(b - beta) < abs(balance(best[1], e) - beta):
            best = cand
        if abs(b - beta) < 0.01:
            break
        lo, hi = (mid, hi) if b > beta else (lo, mid)
    return best[0], best[1], balance(best[1], e)


def grouped_mm_experts(x, w1, w2, weights, ids):
    """The transformers ``grouped_mm`` experts pipeline (written here; same algorithm)."""
    t, k = ids.shape
    e, inter = w1.shape[0], w1.shape[1] // 2
    flat = ids.reshape(-1)
    tokens = torch.arange(t, device=x.device).repeat_interleave(k)
    perm = torch.argsort(flat, stable=True)
    counts = torch.histc(flat.float(), bins=e, min=0, max=e - 1)
    offsets = torch.cumsum(counts, 0, dtype=torch.int32)
    h = torch._grouped_mm(x[tokens[perm]], w1.transpose(-2, -1), offs=offsets)
    a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
    y = torch._grouped_mm(a, w2.transpose(-2, -1), offs=offsets) * weights.reshape(-1)[perm, None]
    return torch.zeros_like(x).index_add_(0, tokens[perm], y.to(x.dtype))


def timed(fn, flush: torch.Tensor, graph: bool) -> float:
    """Median us of one call: replays of a CUDA graph of ``fn`` (``graph``), else ``fn`` itself."""
    fn()
    torch.cuda.synchronize()
    run = fn
    if graph:
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            fn()
        run = cuda_graph.replay
    times = []
    for i in range(WARMUP + REPS):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        if i >= WARMUP:
            times.append((start, end))
    torch.cuda.synchronize()
    return 1000 * statistics.median(s.elapsed_time(e) for s, e in times)


def point(m: dict, t: int, beta: float, seed: int, flush: torch.Tensor, weights_cache: dict) -> dict:
    e, k, h, i = m["experts"], m["top_k"], m["hidden"], m["intermediate"]
    if m["model"] not in weights_cache:
        weights_cache.clear()  # one model's weights at a time
        g = torch.Generator(device=DEV).manual_seed(0)
        w1 = (torch.randn(e, 2 * i, h, device=DEV, generator=g) / h**0.5).bfloat16()
        w2 = (torch.randn(e, h, i, device=DEV, generator=g) / i**0.5).bfloat16()
        weights_cache[m["model"]] = (w1, w2)
    w1, w2 = weights_cache[m["model"]]
    x = torch.randn(t, h, device=DEV).bfloat16()
    wts, ids, got_beta = routing(t, e, k, beta, m["renormalize"], seed)
    ref = fm.reference(x, w1, w2, wts, ids)
    active = int(torch.unique(ids).numel())
    weight_bytes, flops = active * 3 * h * i * 2, 6 * t * k * h * i
    row = {"model": m["model"], "T": t, "beta": beta, "beta_got": round(got_beta, 3), "seed": seed, "active": active}
    out = torch.empty_like(x)
    impls = {
        "wavec": lambda: fm.fused_experts(x, w1, w2, wts, ids, dispatch="static", out=out),
        "grouped_mm": lambda: grouped_mm_experts(x, w1, w2, wts, ids),
    }
    if moe_triton is not None:
        impls["vllm_triton"] = lambda: moe_triton.vllm_fused_experts(x, w1, w2, wts, ids)
        row["vllm_cfg"] = moe_triton.config_for(t, e, i)[1]
    for name, fn in impls.items():
        try:
            err = float((fn().float() - ref).abs().max())
            mode = "graph" if name in GRAPHED else "eager"
            us = timed(fn, flush, name in GRAPHED)
        except Exception as exc:  # noqa: BLE001 - a baseline this torch lacks is reported, not fatal
            row[f"{name}_us"] = f"n/a ({type(exc).__name__})"
            continue
        row |= {f"{name}_us": round(us, 2), f"{name}_mode": mode, f"{name}_err": round(err, 5)}
        row |= {f"{name}_TBps": round(weight_bytes / us / 1e6, 3), f"{name}_TFps": round(flops / us / 1e6, 1)}
    for base in ("grouped_mm", "vllm_triton"):
        if isinstance(row.get("wavec_us"), float) and isinstance(row.get(f"{base}_us"), float):
            row[f"speedup_vs_{base}"] = round(row[f"{base}_us"] / row["wavec_us"], 3)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="2 models, T in {1, 16, 256, 1024}, beta in {1, 0.7}, 1 seed")
    p.add_argument("--models", help="comma-separated model names of the shapes file")
    p.add_argument("--csv", help="also write the rows to this CSV file")
    args = p.parse_args()
    names = args.models.split(",") if args.models else (["OLMoE-1B-7B", "Qwen3-30B-A3B"] if args.quick else None)
    tokens, betas, seeds = ([1, 16, 256, 1024], [1.0, 0.7], [0]) if args.quick else (TOKENS, BETAS, [0, 1, 2])
    if moe_triton is None:
        print(f"vllm_triton baseline left out ({MISSING})", flush=True)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=DEV)
    rows, cache = [], {}
    for m in models(names):
        for t in tokens:
            for beta in betas:
                for seed in seeds:
                    row = point(m, t, beta, seed, flush, cache)
                    rows.append(row)
                    print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.csv:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
