"""Attention forward benchmark: wavec beside torch SDPA (FLASH_ATTENTION and CUDNN_ATTENTION backends) and
a Triton fused-attention kernel (benchmarks/triton_attention.py), timed in one run.

Shapes: benchmarks/data/attention_shapes.csv (causal "both" rows run causal and not).  Before timing, every
implementation is checked against SDPA's math backend in f32 on one shape per (dtype, causal, head dim).
Each timing is the median of CUDA-event timings (triton.testing.do_bench) after warm-up, on fresh random
inputs, rotating input sets when one set fits in L2.  TFLOP/s counts 4·B·H·Sq·Skv·D flops (half for
causal).  Writes attention.csv and attention.png under --out and prints the geomean ratios of wavec to
each baseline per (causal, head dim), then a short table.  wavec's time also stands against the
performance model's P80 ceiling (``wavec.perf.standing``; ``p80_ceiling``, ``p80_gap`` in the CSV), and
the underperforming shapes (efficiency more than ``GAP`` below it) are listed.

    python benchmarks/attention.py --out DIR [--dtypes f16,bf16] [--time-budget SECONDS] [--layout bhsd]
        [--mma mma_sync|wgmma] [--head-dims 128] [--wavec-configs sweep]
"""

import argparse
import csv
import math
import pathlib
import sys
import time

SHAPES_CSV = pathlib.Path(__file__).parent / "data" / "attention_shapes.csv"
L2_BYTES = 50 * 2**20
IMPLS = ("wavec", "flash", "cudnn", "triton")


def load_shapes(path: pathlib.Path) -> list[dict]:
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            causals = {"both": (False, True), "true": (True,), "false": (False,)}[r["causal"].strip().lower()]
            for causal in causals:
                rows.append(
                    {
                        "suite": r["suite"],
                        "b": int(r["batch"]),
                        "h": int(r["q_heads"]),
                        "kvh": int(r["kv_heads"]),
                        "sq": int(r["seq_q"]),
                        "skv": int(r["seq_kv"]),
                        "d": int(r["head_dim"]),
                        "causal": causal,
                    }
                )
    return rows


def flops(s: dict) -> float:
    f = 4.0 * s["b"] * s["h"] * s["sq"] * s["skv"] * s["d"]
    return f / 2 if s["causal"] else f


def implementations(torch, layout: str, wavec_config=None, mma: str | None = None) -> dict:
    """name -> fn(q, k, v, causal) on [B, H, S, D] tensors (wavec in ``layout``; transposed views are
    made once per input set, outside the timing)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton_attention import triton_attention

    from wavec.kernels.attention import attention

    def sdpa(backend):
        def run(q, k, v, causal):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])

        return run

    def wavec(q, k, v, causal):
        return attention(q, k, v, causal=causal, layout=layout, config=wavec_config, mma=mma)

    return {
        "wavec": wavec,
        "flash": sdpa(SDPBackend.FLASH_ATTENTION),
        "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "triton": lambda q, k, v, causal: triton_attention(q, k, v, causal),
    }


def make_sets(torch, s: dict, tdt, layout: str) -> list[tuple]:
    per_set = (s["b"] * (s["h"] * s["sq"] * 2 + 2 * s["kvh"] * s["skv"]) * s["d"]) * 2
    n = max(1, min(8, 2 * L2_BYTES // max(per_set, 1)))
    sets = []
    for _ in range(n):
        q = torch.randn(s["b"], s["h"], s["sq"], s["d"], device="cuda", dtype=tdt)
        k = torch.randn(s["b"], s["kvh"], s["skv"], s["d"], device="cuda", dtype=tdt)
        v = torch.randn(s["b"], s["kvh"], s["skv"], s["d"], device="cuda", dtype=tdt)
        wq = (q, k, v) if layout == "bhsd" else tuple(x.transpose(1, 2).contiguous() for x in (q, k, v))
        sets.append(((q, k, v), wq))
    return sets


def check(torch, impls: dict, s: dict, tdt, layout: str) -> dict:
    """Max abs error of each implementation against SDPA math in f32 (inf when it fails to run)."""
    import torch.nn.functional as F

    (q, k, v), wq = make_sets(torch, s, tdt, layout)[0]
    g = s["h"] // s["kvh"]
    ref = F.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1), is_causal=s["causal"]
    )
    errs = {}
    for name, fn in impls.items():
        try:
            out = fn(*(wq if name == "wavec" else (q, k, v)), s["causal"])
            if name == "wavec" and layout == "bshd":
                out = out.transpose(1, 2)
            errs[name] = (out.float() - ref).abs().max().item()
        except Exception as exc:  # noqa: BLE001 - a backend that does not support the shape is reported
            print(f"  {name}: failed on the check shape: {type(exc).__name__}: {str(exc)[:120]}")
            errs[name] = math.inf
    return errs


def time_shape(torch, do_bench, impls: dict, s: dict, tdt, layout: str, usable: set) -> dict:
    import itertools

    sets = make_sets(torch, s, tdt, layout)
    out = {}
    for name, fn in impls.items():
        if name not in usable:
            out[name] = math.nan
            continue
        pick = (lambda st: st[1]) if name == "wavec" else (lambda st: st[0])
        it = itertools.cycle([pick(st) for st in sets])
        try:
            fn(*pick(sets[0]), s["causal"])  # compile / autotune outside the timing
            ms = do_bench(lambda: fn(*next(it), s["causal"]), warmup=25, rep=100, return_mode="median")
        except Exception as exc:  # noqa: BLE001 - reported, the other implementations still run
            print(f"  {name} failed: {type(exc).__name__}: {str(exc)[:120]}")
            ms = math.nan
        out[name] = ms
        if name == "wavec" and ms == ms:  # the performance model's P80 ceiling for the same call
            from wavec.perf.standing import standing

            args = pick(sets[0])
            out["wavec_standing"] = standing(lambda: fn(*args, s["causal"]), ms * 1e-3, torch.cuda.get_device_name())
    return out


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def summarize(results: list[dict]) -> list[str]:
    lines = [
        f"{'dtype':>5} {'causal':>6} {'d':>4} {'shapes':>6} {'x flash':>8} {'x cudnn':>8} {'x triton':>9} "
        f"{'wavec TF/s':>10}"
    ]
    groups = sorted({(r["dtype"], r["causal"], r["d"]) for r in results})
    for dt, causal, d in groups:
        rs = [r for r in results if (r["dtype"], r["causal"], r["d"]) == (dt, causal, d)]
        ratio = {b: geomean([r[f"{b}_ms"] / r["wavec_ms"] for r in rs]) for b in ("flash", "cudnn", "triton")}
        tf = geomean([r["wavec_tflops"] for r in rs])
        lines.append(
            f"{dt:>5} {str(causal):>6} {d:>4} {len(rs):>6} {ratio['flash']:8.2f} {ratio['cudnn']:8.2f} "
            f"{ratio['triton']:9.2f} {tf:10.1f}"
        )
    return lines


def plot(results: list[dict], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [
        f"{r['dtype']} {'C' if r['causal'] else 'F'} b{r['b']}h{r['h']}/{r['kvh']} {r['sq']}x{r['skv']} d{r['d']}"
        for r in results
    ]
    fig, ax = plt.subplots(figsize=(max(10, 0.45 * len(results)), 6))
    width = 0.2
    for i, name in enumerate(IMPLS):
        ax.bar(
            [x + (i - 1.5) * width for x in range(len(results))],
            [r[f"{name}_tflops"] for r in results],
            width,
            label=name,
        )
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.set_title("attention forward (causal counts half the flops)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".", help="directory for attention.csv and attention.png")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--layout", default="bhsd", choices=("bhsd", "bshd"), help="wavec's memory layout")
    ap.add_argument("--shapes", default=str(SHAPES_CSV))
    ap.add_argument("--time-budget", type=float, default=None, help="seconds; later shapes are skipped")
    ap.add_argument(
        "--wavec-configs",
        default="heuristic",
        choices=("heuristic", "sweep"),
        help="sweep: also time every candidate tile of wavec.kernels.attention.CONFIGS and keep the "
        "fastest per shape (reported in the CSV)",
    )
    ap.add_argument(
        "--mma",
        default=None,
        choices=("mma_sync", "wgmma"),
        help="wavec's matrix instruction (default: wavec.kernels.attention.default_mma, wgmma on sm_90 GPUs)",
    )
    ap.add_argument("--head-dims", default=None, help="only these head dims, e.g. 128")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("attention benchmark: no CUDA GPU visible; it times GPU kernels only (see --help)")
        return 2
    from triton.testing import do_bench

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    shapes = load_shapes(pathlib.Path(args.shapes))
    if args.head_dims:
        shapes = [s for s in shapes if s["d"] in {int(d) for d in args.head_dims.split(",")}]
    from wavec.kernels.attention import default_mma

    args.mma = args.mma or default_mma(torch.empty(1, device="cuda"))
    impls = implementations(torch, args.layout, mma=args.mma)
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16}
    print(
        f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {len(shapes)} shape/causal rows, "
        f"wavec mma {args.mma}"
    )
    start = time.time()
    results, usable = [], {}
    for dt in args.dtypes.split(","):
        tdt = dtypes[dt]
        for s in shapes:
            if args.time_budget and time.time() - start > args.time_budget:
                print(f"time budget of {args.time_budget:.0f} s spent: skipping the remaining shapes")
                break
            group = (dt, s["causal"], s["d"])
            if group not in usable:  # correctness check on a small shape of this group before timing it
                # causal: equal lengths (SDPA's flash backend refuses causal masks on unequal ones), still
                # not a multiple of the tile, so the masked edge is checked
                sq, skv = (200, 200) if s["causal"] else (min(s["sq"], 256), 384)
                small = dict(s, b=1, h=4, kvh=4 if s["kvh"] == s["h"] else 2, sq=sq, skv=skv)
                errs = check(torch, impls, small, tdt, args.layout)
                tol = 1e-2 if dt == "f16" else 4e-2
                usable[group] = {n for n, e in errs.items() if e <= tol}
                print(f"check {group}: " + ", ".join(f"{n} {e:.1e}" for n, e in errs.items()))
            ms = time_shape(torch, do_bench, impls, s, tdt, args.layout, usable[group])
            r = dict(s, dtype=dt, wavec_config="heuristic")
            if args.wavec_configs == "sweep" and "wavec" in usable[group]:
                from wavec.kernels.attention import CONFIGS, WGMMA_CONFIGS

                for cfg in (WGMMA_CONFIGS if args.mma == "wgmma" else CONFIGS)[s["d"]]:
                    alt = time_shape(
                        torch,
                        do_bench,
                        {"wavec": implementations(torch, args.layout, cfg, args.mma)["wavec"]},
                        s,
                        tdt,
                        args.layout,
                        {"wavec"},
                    )["wavec"]
                    if alt < ms["wavec"]:
                        ms["wavec"], r["wavec_config"] = alt, "x".join(map(str, cfg))
            st = ms.get("wavec_standing")
            r["p80_ceiling"] = st.cell() if st is not None else "n/a"
            r["p80_gap"] = st.gap if st is not None and st.gap is not None else math.nan
            for name in IMPLS:
                r[f"{name}_ms"] = ms[name]
                r[f"{name}_tflops"] = flops(s) / (ms[name] * 1e-3) / 1e12 if ms[name] == ms[name] else math.nan
            results.append(r)
            print(
                f"{dt} {'causal' if s['causal'] else 'full  '} b{s['b']:>2} h{s['h']:>2}/{s['kvh']:<2} "
                f"{s['sq']:>5}x{s['skv']:<5} d{s['d']:<3} "
                + " ".join(f"{n} {r[f'{n}_tflops']:6.1f}" for n in IMPLS)
                + f" TFLOP/s; wavec of P80 ceiling {r['p80_ceiling']}"
            )
    fields = (
        ["suite", "dtype", "b", "h", "kvh", "sq", "skv", "d", "causal", "wavec_config"]
        + [f"{n}_{u}" for n in IMPLS for u in ("ms", "tflops")]
        + ["p80_ceiling", "p80_gap"]
    )
    with open(out_dir / "attention.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(results)
    if results:
        plot(results, out_dir / "attention.png")
    if args.wavec_configs == "sweep":
        import collections

        wins = collections.Counter((r["d"], r["wavec_config"]) for r in results)
        print(
            "\nfastest wavec tile (BLOCK_M x BLOCK_N x waves[x stages]) per head dim: "
            + ", ".join(f"d{d} {cfg}: {n}" for (d, cfg), n in sorted(wins.items(), key=str))
        )
    from wavec.perf.standing import GAP

    under = [
        f"{r['dtype']} {'causal' if r['causal'] else 'full'} b{r['b']} {r['sq']}x{r['skv']} d{r['d']}"
        f" (gap {r['p80_gap']:.2f})"
        for r in results
        if r["p80_gap"] > GAP
    ]
    print(f"\nunderperforming (efficiency more than {GAP} below the P80 ceiling): {', '.join(under) or 'none'}")
    print("\ngeomean speed of wavec relative to each baseline (>1: wavec faster)")
    print("\n".join(summarize(results)))
    print(f"\nwrote {out_dir / 'attention.csv'} and {out_dir / 'attention.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
