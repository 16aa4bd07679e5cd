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

``wavec_ra`` is the routing-aware choice for the point's routing (made eagerly, then captured with
``config=``: choose before capture), ``ra_cfg`` its configuration.  ``--regret`` times the whole pool of
each model's fitted table at held-out points and reports the dispatch regret (``moe_profile.summary``).

    python -m benchmarks.moe [--quick] [--models OLMoE-1B-7B,...] [--csv out.csv]
    python -m benchmarks.moe --regret --models OLMoE-1B-7B [--points 8] [--seeds 1]
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import statistics

import torch

from wavec.kernels import fused_moe as fm
from wavec.kernels import moe_dispatch as md
from wavec.tuning import moe as tm
from wavec.tuning import moe_profile as mp

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
GRAPHED = ("wavec", "wavec_ra", "vllm_triton")


def models(names: list[str] | None) -> list[dict]:
    with open(SHAPES) as f:
        rows = [r for r in csv.DictReader(f) if not names or r["model"] in names]
    for r in rows:
        for key in ("experts", "top_k", "hidden", "intermediate"):
            r[key] = int(r[key])
        r["renormalize"] = r["norm_topk_prob"] == "true"
    return rows


def balance(ids: torch.Tensor, experts: int) -> float:
    return mp.balance(ids, experts)


def routing(t: int, e: int, k: int, beta: float, renormalize: bool, seed: int) -> tuple:
    """``wavec.tuning.moe_profile.routing`` (moved there: ``python -m wavec tune moe`` profiles with it)."""
    return mp.routing(t, e, k, beta, renormalize, seed, DEV)


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
    fm.fused_experts(x, w1, w2, wts, ids, out=out)  # routing-aware, eager: its choice for this routing
    ra_cfg = md.dispatch_report()["last"]
    row["ra_cfg"] = ra_cfg.label()
    impls = {
        "wavec": lambda: fm.fused_experts(x, w1, w2, wts, ids, dispatch="static", out=out),
        # chosen before capture (CUDA-graph mode): the configuration routing-aware dispatch picked above
        "wavec_ra": lambda: fm.fused_experts(x, w1, w2, wts, ids, config=ra_cfg, out=out),
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
    for base in ("grouped_mm", "vllm_triton", "wavec"):
        if isinstance(row.get("wavec_ra_us"), float) and isinstance(row.get(f"{base}_us"), float):
            row[f"ra_speedup_vs_{base}"] = round(row[f"{base}_us"] / row["wavec_ra_us"], 3)
    return row


def regret(names: list[str] | None, n_points: int | None, seeds: int, csv_path: str | None) -> None:
    """Dispatch quality at held-out points (T and beta not fitted, other seeds): every pool configuration
    timed (CUDA-graph replay, L2 flushed), the regret of the routing-aware and static choices against
    the best, and routing-aware vs static at beta <= 0.8.  Also checks, per point, that the GPU dispatch
    path picks a configuration of least predicted cost and that its output is within 1e-2 of f32."""
    pts = [(t, b) for t in mp.HELD_OUT_TOKENS for b in mp.HELD_OUT_BETAS]
    if n_points is not None and n_points < len(pts):
        pts = [pts[int(i * len(pts) / n_points)] for i in range(n_points)]
    flush = torch.empty(mp.FLUSH_BYTES, dtype=torch.uint8, device=DEV)
    out_rows = []
    for m in models(names):
        shape = tm.model(m["model"])
        table = md.table_for(shape, torch.device(DEV, torch.cuda.current_device()))
        if table is None:
            print(f"{m['model']}: no fitted table on this GPU; run python -m wavec tune moe --model {m['model']}")
            continue
        w = mp.weights(shape)
        cfgs = [c.cfg for c in table.pool]
        points = []
        for i, (t, b) in enumerate(pts):
            for s in range(seeds):
                p = mp.time_pool(shape, cfgs, t, b, 1000 + 17 * i + s, w, flush, m["renormalize"])
                points.append(p)
                check_dispatch(shape, table, p, w, m["renormalize"])
        rows = mp.regret_rows(table, points)
        print(f"== {m['model']} ({len(table.pool)} configurations, {table.device})")
        print(mp.format_rows(rows, mp.summary(rows)), flush=True)
        out_rows += [{"model": m["model"], **r} for r in rows]
    if csv_path and out_rows:
        with open(csv_path, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(out_rows[0]))
            wr.writeheader()
            wr.writerows(out_rows)


def check_dispatch(shape, table, p, w, renormalize: bool) -> None:
    """The eager routing-aware call on ``p``'s routing picks a configuration of least predicted cost (the
    table's model on the histogram), and its output is within 1e-2 of the f32 reference."""
    x = torch.randn(p.tokens, shape.hidden, device=DEV).to(w[0].dtype)
    wts, ids, _ = mp.routing(p.tokens, shape.experts, shape.top_k, p.beta, renormalize, p.seed, DEV)
    got = fm.fused_experts(x, *w, wts, ids)
    last = md.dispatch_report()["last"]
    cost = table.predict(torch.bincount(ids.flatten().long(), minlength=shape.experts).tolist())
    if cost[[c.cfg for c in table.pool].index(last)] > cost.min() * (1 + 1e-9):
        best = table.pool[int(cost.argmin())].cfg.label()
        raise AssertionError(f"GPU dispatch chose {last.label()}, the table's model {best}")
    err = float((got.float() - fm.reference(x, *w, wts, ids)).abs().max())
    if err > 1e-2:
        raise AssertionError(f"T={p.tokens} beta={p.beta}: max error {err} against f32")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="2 models, T in {1, 16, 256, 1024}, beta in {1, 0.7}, 1 seed")
    p.add_argument("--models", help="comma-separated model names of the shapes file")
    p.add_argument("--csv", help="also write the rows to this CSV file")
    p.add_argument("--regret", action="store_true", help="dispatch regret at held-out points (needs fitted tables)")
    p.add_argument("--points", type=int, help="--regret: this many of the 24 held-out (T, beta) points")
    p.add_argument("--seeds", type=int, default=1, help="--regret: routings per point")
    args = p.parse_args()
    if args.regret:
        regret(args.models.split(",") if args.models else None, args.points, args.seeds, args.csv)
        return
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
