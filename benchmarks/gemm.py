"""GEMM benchmark: wavec beside cuBLAS (torch.matmul) and an autotuned Triton matmul, in one run.

Shapes: ../shared/data/gemm_shapes.csv (deduplicated) plus squares 1024-8192, f16 and bf16.  Each
timing is the median of CUDA-event timings (triton.testing.do_bench) after warm-up, on fresh random
inputs; for problems whose inputs fit in L2 several input sets are rotated so no repetition reuses L2.
The three are timed in ``--rounds`` interleaved rounds (wavec, cuBLAS, Triton, wavec, ...) and each keeps
the median of its rounds, so a clock or power dip during one timing does not decide a ratio; the GPU is
kept busy for a second before the first shape so it starts at its running clock.
All three write C in the input dtype (cuBLAS's ``torch.matmul``; wavec ``out_dtype``; Triton stores its
f32 accumulator cast), or f32 for wavec and Triton with ``--out-dtype f32``.  For decode shapes
(M <= 16) the achieved bandwidth is reported against a device-to-device copy measured in the same run.
Writes gemm.csv, gemm.png (TFLOP/s per shape), roofline.png and ceiling.png (wavec's time against the
analytical ceiling of its configuration, ``wavec.tuning.ceiling``; the CSV's ``wavec_pct_ceiling``) under --out.
Each shape also stands against the performance model's P80 ceiling (``wavec.perf.standing``: ``p80_ceiling``,
``p80_gap``), and the underperforming shapes (efficiency more than ``GAP`` below it) are listed last.

    python benchmarks/gemm.py --out DIR [--dtypes f16,bf16] [--max-shapes N] [--models Llama-2-7B,...]
                              [--time-budget SECONDS] [--mma mma_sync|wgmma] [--squares] [--copy auto|cp.async]
                              [--tuned DIR]

``--mma wgmma`` times the Hopper warpgroup-MMA GEMM (sm_90a; ``wavec.kernels.gemm.wgmma_plan`` picks
its tiles and schedule); ``--squares`` times only the 1024^3 ... 8192^3 squares; ``--copy cp.async`` keeps the wgmma
GEMM on cp.async instead of TMA (``SchedulingConstraint.async_copy``).  ``--tuned DIR`` (the ``tuning/``
folder ``benchmarks/tune_gemm.py --mma ...`` writes under its --out) also times wavec with the tuner's
configurations (``wavec.tuning.gemm.matmul``: the measured bucket, else the stored cost model, else the
heuristic), reported in separate columns (``tuned_*``, ``tuned_source``) and summary rows beside the
heuristic's, so the heuristic's figures stay what they are.
"""

import argparse
import csv
import itertools
import math
import os
import pathlib
import sys
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from triton_matmul import triton_matmul  # noqa: E402

from wavec.kernels.gemm import matmul as wavec_matmul  # noqa: E402
from wavec.perf.standing import GAP, standing  # noqa: E402
from wavec.tuning.ceiling import gemm_ceiling  # noqa: E402
from wavec.tuning.plan import MMA_KINDS, gemm_config, splitk_config, wgmma_config, wgmma_plan  # noqa: E402

SHAPES_CSV = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "gemm_shapes.csv"
L2_BYTES = 50 * 2**20
TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16}


def load_shapes(models: list[str] | None, max_shapes: int | None) -> list[tuple[str, int, int, int]]:
    rows, seen = [], set()
    # ../shared does not travel to the GPU machine: benchmarks/data holds a copy.
    path = SHAPES_CSV if SHAPES_CSV.exists() else pathlib.Path(__file__).parent / "data" / "gemm_shapes.csv"
    with open(path) as f:
        for r in csv.DictReader(f):
            key = (int(r["M"]), int(r["N"]), int(r["K"]))
            if (models and r["model"] not in models) or key in seen:
                continue
            seen.add(key)
            rows.append((f"{r['model']}/{r['layer']}", *key))
    rows = rows[:max_shapes] if max_shapes else rows
    return [(f"square{n}", n, n, n) for n in (1024, 2048, 4096, 8192)] + rows


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + written)."""
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x), warmup=25, rep=100, return_mode="median")
    return 2 * x.numel() * 4 / (ms * 1e-3)


def inputs(m, n, k, tdt):
    per_set = (m * k + n * k) * 2 + m * n * 4
    sets = max(1, min(16, math.ceil(2 * L2_BYTES / per_set)))
    return [
        (torch.randn(m, k, device="cuda", dtype=tdt), torch.randn(n, k, device="cuda", dtype=tdt)) for _ in range(sets)
    ]


def time_rotating(fn, sets, rep: int = 100) -> float:
    it = itertools.cycle(sets)
    return do_bench(lambda: fn(*next(it)), warmup=25, rep=rep, return_mode="median")


def time_rounds(fns: list, sets_per_fn: list, rounds: int) -> list[float]:
    """Median over ``rounds`` interleaved rounds of each function's rotating-input timing."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for t, fn, sets in zip(times, fns, sets_per_fn):
            t.append(time_rotating(fn, sets, rep=max(20, 100 // rounds)))
    return [sorted(t)[len(t) // 2] for t in times]


def warm_gpu(seconds: float = 1.0) -> None:
    """Run matmuls for ``seconds`` so the first timed shape does not meet an idle GPU's clocks."""
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(10):
            x @ x
        torch.cuda.synchronize()


def bench_shape(
    name,
    m,
    n,
    k,
    dt,
    bw,
    rates=None,
    mma: str = "mma_sync",
    copy: str = "auto",
    tuned: str | None = None,
    out_dtype: str = "input",
    rounds: int = 3,
) -> dict:
    tdt = TORCH_DT[dt]
    odt = tdt if out_dtype == "input" else torch.float32
    sets = inputs(m, n, k, tdt)
    a, b = sets[0]
    ref = a.float() @ b.float().T

    def matmul(x, y):
        return wavec_matmul(x, y, mma=mma, async_copy=copy, out_dtype=odt)

    out = matmul(a, b)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    c_sets = [(x, y, torch.empty(m, n, device="cuda", dtype=odt)) for x, y in sets]
    triton_matmul(*c_sets[0])  # autotune outside the timing
    t_w, t_c, t_t = time_rounds(
        [matmul, lambda x, y: torch.matmul(x, y.T), triton_matmul], [sets, sets, c_sets], rounds
    )
    flops = 2 * m * n * k
    subs, waves = (wgmma_config if mma == "wgmma" and m > 16 else gemm_config)(m, n, k)
    split = f" split={splitk_config(m, n, k)[2]}" if m <= 16 else ""  # matmul's split-K for decode shapes
    if mma == "wgmma" and m > 16 and copy == "auto":  # the schedule flags matmul takes from wgmma_plan
        plan = wgmma_plan(m, n, k)
        split += " ws" * plan.warp_specialize + " persistent" * plan.persistent + " split-epi" * plan.split_epilogue
    row = {
        "shape": name,
        "dtype": dt,
        "M": m,
        "N": n,
        "K": k,
        "rel_err": err,
        "mma": mma,
        "copy": copy,
        "wavec_ms": t_w,
        "cublas_ms": t_c,
        "triton_ms": t_t,
        "wavec_tflops": flops / t_w / 1e9,
        "cublas_tflops": flops / t_c / 1e9,
        "triton_tflops": flops / t_t / 1e9,
        "wavec_vs_cublas": t_c / t_w,
        "wavec_vs_triton": t_t / t_w,
        "config": f"{[v for v in subs.values()]} waves={waves}{split}",
        "out_dtype": str(odt).removeprefix("torch."),
    }
    if rates is not None:  # the analytical bound for wavec's configuration (wavec.tuning.ceiling)
        named = {str(key): v for key, v in subs.items()}
        bm, bn = named["BLOCK_M"], named["BLOCK_N"]
        row["ceiling_ms"] = gemm_ceiling(m, n, k, bm, bn, waves, rates=rates)["bound"] * 1e3
        row["wavec_pct_ceiling"] = 100.0 * row["ceiling_ms"] / t_w
    st = standing(lambda: matmul(a, b), t_w * 1e-3, torch.cuda.get_device_name())  # the model's P80 ceiling
    row["p80_ceiling"] = st.cell()
    row["p80_gap"] = st.gap if st.gap is not None else float("nan")
    if tuned:
        row.update(bench_tuned(sets, ref, m, n, k, dt, mma, tuned, t_c, t_t, odt))
    if m <= 16:
        bytes_moved = (m * k + n * k) * 2 + m * n * odt.itemsize
        row["wavec_bw_frac"] = bytes_moved / (t_w * 1e-3) / bw
    return row


def bench_tuned(sets, ref, m, n, k, dt, mma: str, directory: str, t_c: float, t_t: float, odt) -> dict:
    """wavec with the tuning cache's configuration for this shape (and where it came from)."""
    import wavec as wc
    from wavec.tuning.gemm import dispatch
    from wavec.tuning.gemm import matmul as tuned_matmul

    a, b = sets[0]
    kind = "mma_sync" if mma == "wgmma" and m <= 16 else mma  # decode: mma.sync tiles, as matmul does
    subs, waves, source = dispatch(m, n, k, {"f16": wc.f16, "bf16": wc.bf16}[dt], mma=kind, directory=directory)

    def fn(x, y):
        return tuned_matmul(x, y, mma=mma, directory=directory, out_dtype=odt)

    out = fn(a, b)
    t = time_rotating(fn, sets)
    return {
        "tuned_ms": t,
        "tuned_vs_cublas": t_c / t,
        "tuned_vs_triton": t_t / t,
        "tuned_source": source,
        "tuned_rel_err": ((out.float() - ref).norm() / ref.norm()).item(),
        "tuned_config": f"{[v for v in subs.values()]} waves={waves}",
    }


def plot(rows, out: pathlib.Path, bw: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for dt in sorted({r["dtype"] for r in rows}):
        sub = [r for r in rows if r["dtype"] == dt]
        fig, ax = plt.subplots(figsize=(max(8, len(sub) * 0.25), 4))
        x = range(len(sub))
        for key, label in (("cublas_tflops", "cuBLAS"), ("triton_tflops", "Triton"), ("wavec_tflops", "wavec")):
            ax.plot(x, [r[key] for r in sub], "o-", ms=3, label=label)
        ax.set_xticks(list(x))
        ax.set_xticklabels([f"{r['M']}x{r['N']}x{r['K']}" for r in sub], rotation=90, fontsize=5)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"GEMM {dt}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"gemm_{dt}.png", dpi=120)
    fig, ax = plt.subplots(figsize=(6, 4))
    peak = max(r["cublas_tflops"] for r in rows)
    ai = [2 * r["M"] * r["N"] * r["K"] / ((r["M"] * r["K"] + r["N"] * r["K"]) * 2 + r["M"] * r["N"] * 4) for r in rows]
    xs = [10 ** (e / 10) for e in range(0, 41)]
    ax.loglog(
        xs, [min(peak, x * bw / 1e12) for x in xs], "k-", label=f"roofline ({bw / 1e12:.2f} TB/s, {peak:.0f} TF/s)"
    )
    ax.loglog(ai, [r["wavec_tflops"] for r in rows], ".", label="wavec")
    ax.loglog(ai, [r["cublas_tflops"] for r in rows], ".", label="cuBLAS")
    ax.set_xlabel("FLOP / byte")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "roofline.png", dpi=120)
    plot_ceiling(rows, out)


def plot_ceiling(rows, out: pathlib.Path) -> None:
    """wavec's measured time against the analytical ceiling of its configuration, log-log, y = x."""
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "ceiling_ms" in r]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(6, 5))
    lo = min(r["ceiling_ms"] for r in rows) / 1.5
    hi = max(max(r["wavec_ms"], r["ceiling_ms"]) for r in rows) * 1.5
    ax.loglog([lo, hi], [lo, hi], "k-", lw=0.8, label="y = x (at the ceiling)")
    for dt in sorted({r["dtype"] for r in rows}):
        sub = [r for r in rows if r["dtype"] == dt]
        ax.loglog([r["ceiling_ms"] for r in sub], [r["wavec_ms"] for r in sub], ".", label=f"wavec {dt}")
    ax.set_xlabel("ceiling (ms)")
    ax.set_ylabel("measured (ms)")
    ax.set_title("GEMM: wavec vs its analytical ceiling")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "ceiling.png", dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--max-shapes", type=int, default=None)
    ap.add_argument("--models", default=None)
    ap.add_argument("--time-budget", type=float, default=None, help="seconds; later shapes are skipped")
    ap.add_argument("--mma", choices=MMA_KINDS, default="mma_sync", help="wgmma: Hopper warpgroup MMA (sm_90a)")
    ap.add_argument("--squares", action="store_true", help="only the square shapes 1024^3 ... 8192^3")
    ap.add_argument("--copy", default="auto", help="SchedulingConstraint.async_copy: auto (TMA on wgmma), cp.async")
    ap.add_argument(
        "--out-dtype",
        default="input",
        choices=("input", "f32"),
        help="C's dtype for wavec and Triton (cuBLAS's torch.matmul always writes the input dtype)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per shape (median kept)")
    ap.add_argument(
        "--tuned",
        default=None,
        help="tuning-cache folder (tune_gemm.py's OUT/tuning): also time "
        "wavec with the tuned configurations, reported separately (compiled as the tuner did: "
        "async copies 'auto', whatever --copy says)",
    )
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WAVEC_CACHE_DIR", "/tmp/wavec-bench-cache")
    torch.manual_seed(0)
    bw = copy_bandwidth()
    from wavec.tuning.ceiling import device_rates, measure_rates

    rates = device_rates(torch.cuda.get_device_name(), measure_rates())
    shapes = load_shapes(args.models.split(",") if args.models else None, args.max_shapes)
    if args.squares:
        shapes = [s for s in shapes if s[0].startswith("square")]
    rows = []
    warm_gpu()
    t0 = time.time()
    dtypes = args.dtypes.split(",")
    for i, dt in enumerate(dtypes):
        for name, m, n, k in shapes:
            # each dtype gets an equal share of the budget, so every dtype is summarised
            if args.time_budget and time.time() - t0 > args.time_budget * (i + 1) / len(dtypes):
                print(f"time budget reached: skipping the remaining {dt} shapes")
                break
            rows.append(
                bench_shape(name, m, n, k, dt, bw, rates, args.mma, args.copy, args.tuned, args.out_dtype, args.rounds)
            )
            r = rows[-1]
            print(
                f"{dt:4} {m:5d} {n:6d} {k:6d}  wavec {r['wavec_tflops']:6.1f}  cuBLAS {r['cublas_tflops']:6.1f}  "
                f"triton {r['triton_tflops']:6.1f}  x{r['wavec_vs_cublas']:.2f}  "
                f"{r['wavec_pct_ceiling']:5.1f}% ceil  P80 {r['p80_ceiling']}  err {r['rel_err']:.1e}"
                + (f"  tuned x{r['tuned_vs_cublas']:.2f} ({r['tuned_source']})" if "tuned_ms" in r else ""),
                flush=True,
            )
    with open(out / "gemm.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)
    plot(rows, out, bw)
    print(f"\ncopy bandwidth {bw / 1e12:.2f} TB/s; {len(rows)} rows in {time.time() - t0:.0f} s")
    print(
        f"{'dtype':5} {'geomean x cuBLAS':>17} {'geomean x Triton':>17} {'4096^3':>7} {'8192^3':>7} "
        f"{'decode BW frac (median)':>24} {'% ceiling (median)':>19}"
    )
    for dt in dtypes:
        sub = [r for r in rows if r["dtype"] == dt]
        if not sub:
            continue
        gm = math.exp(sum(math.log(r["wavec_vs_cublas"]) for r in sub) / len(sub))
        gt = math.exp(sum(math.log(r["wavec_vs_triton"]) for r in sub) / len(sub))
        sq = {r["M"]: r["wavec_vs_cublas"] for r in sub if r["M"] == r["N"] == r["K"]}
        dec = sorted(r["wavec_bw_frac"] for r in sub if "wavec_bw_frac" in r)
        med = dec[len(dec) // 2] if dec else float("nan")
        pct = sorted(r["wavec_pct_ceiling"] for r in sub)[len(sub) // 2]
        print(
            f"{dt:5} {gm:17.3f} {gt:17.3f} {sq.get(4096, float('nan')):7.3f} {sq.get(8192, float('nan')):7.3f} "
            f"{med:24.3f} {pct:19.1f}"
        )
    under = [f"{r['dtype']} {r['M']}x{r['N']}x{r['K']} (gap {r['p80_gap']:.2f})" for r in rows if r["p80_gap"] > GAP]
    print(f"underperforming (efficiency more than {GAP} below the P80 ceiling): {', '.join(under) or 'none'}")
    print_tuned_summary(rows, dtypes)


def print_tuned_summary(rows: list, dtypes: list) -> None:
    """Geomeans of the tuned configurations (``--tuned``), beside the heuristic's, per dtype."""
    if not any("tuned_ms" in r for r in rows):
        return
    print(
        f"\n{'dtype':5} {'tuned x cuBLAS':>15} {'tuned x Triton':>15} {'heuristic x cuBLAS':>19} "
        f"{'shapes':>7}  configuration source (cache / model / heuristic)"
    )
    for dt in dtypes:
        sub = [r for r in rows if r["dtype"] == dt and "tuned_ms" in r]
        if not sub:
            continue

        def geo(key):
            return math.exp(sum(math.log(r[key]) for r in sub) / len(sub))

        src = {s: sum(r["tuned_source"] == s for r in sub) for s in ("cache", "model", "heuristic")}
        print(
            f"{dt:5} {geo('tuned_vs_cublas'):15.3f} {geo('tuned_vs_triton'):15.3f} {geo('wavec_vs_cublas'):19.3f} "
            f"{len(sub):7d}  {src['cache']} / {src['model']} / {src['heuristic']}"
        )


if __name__ == "__main__":
    main()
