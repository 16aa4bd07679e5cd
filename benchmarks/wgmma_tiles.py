"""Time every wgmma GEMM variant (tile x stages x copy scheme) at a set of shapes beside cuBLAS, in one run:
the measured table of ``wavec.kernels.gemm.wgmma_plan``.

    python benchmarks/wgmma_tiles.py --out DIR [--dtype f16] [--shapes 64x4096x4096,...]
                                     [--variants 128x256x64x4x2:ws+p,...] [--rounds 2]

A variant is BMxBNxBKxSTAGESxW0 and a scheme: ``tma`` (TMA, ``async_copy="auto"``) or a ``+``-joined set of
``ws`` (a TMA producer warpgroup, ``warp_specialize``), ``p`` (persistent grid) and ``e``
(``split_epilogue``: one bounds test per thread, then C's stores unguarded), e.g. ``ws+p+e``.  Every variant
is compiled once (compile failures and ptxas refusals are reported and skipped), checked against cuBLAS's output at each
shape (relative error above 1e-2 is reported as WRONG and not timed), then timed with rotating inputs in
``--rounds`` interleaved rounds with cuBLAS (median kept).  Writes tiles.csv (one row per shape and
variant: TFLOP/s, ratio to cuBLAS, registers, shared bytes) and prints, per shape, the best variant.
"""

import argparse
import csv
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from gemm import TORCH_DT, inputs, time_rounds, warm_gpu  # noqa: E402

import wavec as wc  # noqa: E402
from wavec.kernels.gemm import make_gemm  # noqa: E402
from wavec.tuning.plan import WGMMA_FOR_DTYPE, schedule  # noqa: E402

SYMS = (wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K, wc.sym.NUM_STAGES, wc.sym.GROUP_M)
# The shape file's weak rows (M 64-8192, benchmarks/results/wgmma_h100/shapefile_f16) and the squares.
SHAPES = (
    "64x4096x4096,64x8192x8192,64x5120x13824,128x4096x4096,128x8192x8192,128x5120x5120,512x4096x4096,"
    "512x10240x8192,512x27648x5120,2048x5120x5120,2048x32000x4096,2048x1280x8192,4096x8192x8192,"
    "8192x8192x1024,4096x4096x4096,8192x5120x5120"
)
VARIANTS = (
    "64x64x64x4x1:tma,64x64x64x4x1:ws,64x128x64x4x1:tma,64x128x64x4x1:ws,64x256x64x4x1:tma,"
    "64x256x64x4x1:ws,128x128x64x4x2:tma,128x128x64x4x2:ws,128x128x64x4x2:ws+p,128x256x64x4x2:tma,"
    "128x256x64x4x2:ws,128x256x64x4x2:p,128x256x64x4x2:ws+p,256x128x64x4x2:ws,256x128x64x4x2:ws+p,"
    "128x192x64x4x2:ws"
)


def parse_variant(text: str) -> tuple[dict, tuple[int, int], set]:
    tile, scheme = text.split(":")
    bm, bn, bk, s, w0 = (int(x) for x in tile.split("x"))
    flags = set(scheme.split("+"))
    if not flags <= {"tma", "ws", "p", "e"}:
        raise SystemExit(f"variant {text!r}: scheme must be tma or '+'-joined ws, p, e")
    return dict(zip(SYMS, (bm, bn, bk, s, 8))), (w0, 1), flags


def compile_variant(dt: str, text: str):
    subs, waves, flags = parse_variant(text)
    kernel = make_gemm(
        getattr(wc, dt),
        mma_type=WGMMA_FOR_DTYPE[dt],
        waves=waves,
        out_dtype=getattr(wc, dt),
        sched=schedule(
            prefetch_fragments=True,
            async_copy="tma",
            warp_specialize="ws" in flags,
            persistent="p" in flags,
            split_epilogue="e" in flags,
        ),
    )
    return wc.compile(kernel, subs, backend="cuda", target="sm_90a", cache=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="f16", choices=tuple(TORCH_DT))
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--variants", default=VARIANTS)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tdt = TORCH_DT[args.dtype]
    kernels = {}
    for text in args.variants.split(","):
        t0 = time.perf_counter()
        try:
            kernels[text] = compile_variant(args.dtype, text)
        except Exception as e:  # noqa: BLE001 - report and go on with the others
            print(f"{text}: not compiled: {str(e).splitlines()[0][:160]}")
            continue
        md = kernels[text].metadata
        print(f"{text}: {time.perf_counter() - t0:.1f} s, {md.registers} registers, {md.shared_bytes} B shared")
    warm_gpu()
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        sets = inputs(m, n, k, tdt)
        ref = torch.matmul(*[t if i == 0 else t.T for i, t in enumerate(sets[0])]).float()
        names, fns, c_sets = [], [], []
        for text, kern in kernels.items():
            c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
            kern(*sets[0], c)
            err = ((c.float() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:  # also NaN: an element never written
                print(f"{shape} {text}: WRONG, relative error {err:.3g}")
                rows.append({"shape": shape, "variant": text, "rel_err": err})
                continue
            names.append(text)
            fns.append(lambda x, y, c, kern=kern: kern(x, y, c))
            c_sets.append([(x, y, torch.empty(m, n, device="cuda", dtype=tdt)) for x, y in sets])
        times = time_rounds(fns + [lambda x, y: torch.matmul(x, y.T)], c_sets + [sets], args.rounds)
        t_cublas = times[-1]
        flops = 2 * m * n * k
        for text, t in zip(names, times):
            md = kernels[text].metadata
            rows.append(
                {
                    "shape": shape,
                    "M": m,
                    "N": n,
                    "K": k,
                    "variant": text,
                    "ms": t,
                    "cublas_ms": t_cublas,
                    "tflops": flops / t / 1e9,
                    "vs_cublas": t_cublas / t,
                    "registers": md.registers,
                    "shared_bytes": md.shared_bytes,
                    "grid": str(md.grid) if hasattr(md, "grid") else "",
                }
            )
        best = min(zip(times, names))
        print(
            f"{shape:>16} cuBLAS {flops / t_cublas / 1e9:6.1f} TF/s  best {best[1]:22} {t_cublas / best[0]:.3f}  "
            + " ".join(
                f"{nm.split(':')[0].rsplit('x', 2)[0]}:{nm.split(':')[1]}={t_cublas / t:.2f}"
                for nm, t in zip(names, times)
            )
        )
    keys = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99)
    with open(out / "tiles.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
