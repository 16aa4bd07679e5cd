"""Decode GEMM sweep (M <= 16): the old decode tiles (with and without ``prefetch_fragments``), split-K
with S in {1, 2, 4, 8} at two tile widths, the split rule's choice (``wavec.kernels.gemm.splitk_config``),
cuBLAS (``torch.matmul``) and a device copy.

Each timing is the median of ``triton.testing.do_bench`` (CUDA events, warm-up) over input sets rotated past
the 50 MB L2; C in the input dtype (as cuBLAS).  Bandwidth = (A + B + C bytes) / time, reported against a
device-to-device copy measured in the same run.  Prints one short table per shape (and a CSV with --csv).

    python benchmarks/decode_sweep.py [--dtype f16|bf16] [--splits 1,2,4,8] [--widths 64,128] [--csv PATH]
                                      [--shapes 1x4096x4096,16x4096x11008,...]   (M x N x K, C = A @ B.T)
"""

import argparse
import csv
import itertools
import math

import torch
from triton.testing import do_bench

from wavec.kernels import gemm as gm
from wavec.tuning.plan import splitk_config

SHAPES = [(1, 4096, 4096), (16, 4096, 11008), (1, 8192, 8192), (16, 5120, 13824), (1, 14336, 4096), (16, 128256, 4096)]
L2_BYTES = 50 * 2**20
TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16}
WAVES = {64: (1, 2), 128: (1, 4)}


def copy_bandwidth() -> float:
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x), warmup=25, rep=100, return_mode="median")
    return 2 * x.numel() * 4 / (ms * 1e-3)


def time_rotating(fn, sets) -> float:
    it = itertools.cycle(sets)
    return do_bench(lambda: fn(*next(it)), warmup=25, rep=100, return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="f16", choices=list(TORCH_DT))
    ap.add_argument("--splits", default="1,2,4,8")
    ap.add_argument("--widths", default="64,128")
    ap.add_argument("--shapes", default=None, help="comma-separated MxNxK")
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    tdt = TORCH_DT[args.dtype]
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")] if args.shapes else SHAPES
    splits = [int(s) for s in args.splits.split(",")]
    widths = [int(w) for w in args.widths.split(",")]
    bw = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name()}; copy bandwidth {bw / 1e12:.2f} TB/s; {args.dtype} in and out")
    rows = []
    for m, n, k in shapes:
        per_set = (m * k + n * k) * 2
        sets = [
            (torch.randn(m, k, device="cuda", dtype=tdt), torch.randn(n, k, device="cuda", dtype=tdt))
            for _ in range(max(1, min(16, math.ceil(2 * L2_BYTES / per_set))))
        ]
        a, b = sets[0]
        ref = a.double() @ b.double().T
        nbytes = per_set + m * n * tdt.itemsize
        subs, waves, rule = splitk_config(m, n, k)
        variants = [
            ("old tiles (split 1)", dict(split=1)),
            ("old tiles, no prefetch", dict(split=1, prefetch_fragments=False)),
            (f"rule: 16x{subs[gm.BLOCK_N]} S={rule}", dict(split="auto")),
        ]
        for bn in widths:
            for s in splits:
                cfg = ({**subs, gm.BLOCK_N: bn}, WAVES[bn])
                variants.append((f"16x{bn} S={s}", dict(split=s, config=cfg)))
        variants.append(("cuBLAS", None))
        t_cublas = time_rotating(lambda x, y: torch.matmul(x, y.T), sets)
        bn, bk = subs[gm.BLOCK_N], subs[gm.BLOCK_K]
        print(f"\n{m}x{n}x{k} ({math.ceil(n / bn)} tiles of 16x{bn}, {math.ceil(k / bk)} K steps of {bk})")
        print(f"  {'variant':24s} {'us':>8s} {'TB/s':>6s} {'x copy':>7s} {'x cuBLAS':>8s} {'rel err':>8s}")
        for name, kw in variants:
            if kw is None:
                fn, t = (lambda x, y: torch.matmul(x, y.T)), t_cublas
                err = ((fn(a, b).double() - ref).norm() / ref.norm()).item()
            else:

                def fn(x, y, kw=kw):
                    return gm.matmul(x, y, out_dtype=tdt, **kw)

                # compile before timing and check the result once
                err = ((fn(a, b).double() - ref).norm() / ref.norm()).item()
                t = time_rotating(fn, sets)
            rate = nbytes / (t * 1e-3)
            print(f"  {name:24s} {t * 1e3:8.1f} {rate / 1e12:6.2f} {rate / bw:7.3f} {t_cublas / t:8.3f} {err:8.1e}")
            rows.append(
                {
                    "M": m,
                    "N": n,
                    "K": k,
                    "dtype": args.dtype,
                    "variant": name,
                    "us": t * 1e3,
                    "tb_s": rate / 1e12,
                    "x_copy": rate / bw,
                    "x_cublas": t_cublas / t,
                    "rel_err": err,
                }
            )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
