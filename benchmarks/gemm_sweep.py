"""Sweep wavec GEMM tile configurations at one shape beside cuBLAS (used to pick the shape heuristic).

    python benchmarks/gemm_sweep.py [--n 4096] [--dtype f16] [--mma mma_sync|wgmma] [--swizzle auto,none]
                                    [--copy auto] [--ws] [--persistent] [--configs BMxBNxBKxSxW0xW1,...]

``--mma wgmma`` sweeps the Hopper warpgroup-MMA tiles (sm_90a; waves are warpgroups, 64-row multiples)
and each operand layout of ``--swizzle`` ("auto": 128-byte swizzle where BLOCK_K rows are 128 bytes,
"none": core matrices) and each global->shared copy of ``--copy`` (``SchedulingConstraint.async_copy``:
"auto" = TMA where it applies, "cp.async"; e.g. ``--copy auto,cp.async`` compares them; "ws" = TMA with a
warp-specialized producer warpgroup, ``SchedulingConstraint.warp_specialize``; ``--ws`` adds "ws" to the
list).  ``--configs`` replaces the grid of tiles by the listed ones.  ``--persistent`` times every TMA
configuration also with a persistent grid (``SchedulingConstraint.persistent``; rows marked "+p").
``--prefetch off,on`` (mma.sync) times each tile without and with ``SchedulingConstraint.prefetch_fragments``
(swizzle column "pf").
"""

import argparse
import itertools
import time

import torch
from triton.testing import do_bench

import wavec as wc
from wavec.kernels.gemm import make_gemm
from wavec.tuning.plan import MMA_KINDS, WGMMA_FOR_DTYPE, schedule

SYMS = (wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K, wc.sym.NUM_STAGES, wc.sym.GROUP_M)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--configs", default="", help="e.g. 128x256x64x3x2x8,256x128x64x3x4x2 (default: a grid)")
    ap.add_argument("--mma", choices=MMA_KINDS, default="mma_sync")
    ap.add_argument("--swizzle", default="auto,none", help="wgmma operand layouts to sweep")
    ap.add_argument(
        "--copy",
        default="auto",
        help="async copies to sweep: auto (TMA where it applies), cp.async, "
        "tma-mbarrier, tma-barrier, ws (TMA from a producer warpgroup)",
    )
    ap.add_argument("--ws", action="store_true", help="also sweep the warp-specialized TMA kernel (--copy ...,ws)")
    ap.add_argument(
        "--prefetch",
        default="off",
        help="mma.sync: off,on = without / with the next iteration's "
        "first fragments read during the last K step (SchedulingConstraint.prefetch_fragments)",
    )
    ap.add_argument(
        "--persistent",
        action="store_true",
        help="also time each TMA copy with a persistent grid (copy column '<copy>+p')",
    )
    args = ap.parse_args()
    if args.ws and "ws" not in args.copy.split(","):
        args.copy += ",ws"
    dt = {
        "f16": (wc.f16, wc.MMAType.NV_F32_16x8x16_F16, torch.float16),
        "bf16": (wc.bf16, wc.MMAType.NV_F32_16x8x16_BF16, torch.bfloat16),
    }[args.dtype]
    target = None
    if args.mma == "wgmma":
        dt, target = (dt[0], WGMMA_FOR_DTYPE[args.dtype], dt[2]), "sm_90a"
    n = args.n
    a = torch.randn(n, n, device="cuda", dtype=dt[2])
    b = torch.randn(n, n, device="cuda", dtype=dt[2])
    c = torch.empty(n, n, device="cuda")
    ref = a.float() @ b.float().T
    cublas = do_bench(lambda: torch.matmul(a, b.T), warmup=50, rep=200, return_mode="median")
    rows = []
    tiles = (
        [
            (128, 128, (2, 1)),
            (128, 256, (2, 1)),
            (256, 128, (2, 1)),
            (128, 128, (1, 1)),
            (64, 256, (1, 1)),
            (256, 128, (4, 1)),
        ]
        if args.mma == "wgmma"
        else [(128, 128, (2, 2)), (128, 256, (2, 4)), (256, 128, (4, 2)), (64, 128, (2, 2)), (128, 64, (2, 2))]
    )
    copies = args.copy.split(",")
    if args.persistent:
        copies += [f"{cp}+p" for cp in copies if cp != "cp.async"]
    swizzles = [(sw, cp) for sw in (args.swizzle.split(",") if args.mma == "wgmma" else ["auto"]) for cp in copies]
    if args.mma == "mma_sync":  # the swizzle slot carries the fragment prefetch (mma.sync has no wgmma layouts)
        swizzles = [("pf" if pf == "on" else "auto", cp) for pf in args.prefetch.split(",") for _sw, cp in swizzles]
    configs = [
        (bm, bn, bk, w, s, sw)
        for (bm, bn, w), bk, s, sw in itertools.product(
            tiles, [32, 64], [2, 3, 4] if args.mma == "mma_sync" else [3, 4, 5], swizzles
        )
    ]
    if args.configs:
        configs = [
            (bm, bn, bk, (w0, w1), s, sw)
            for bm, bn, bk, s, w0, w1 in (tuple(int(x) for x in c.split("x")) for c in args.configs.split(","))
            for sw in swizzles
        ]
    for bm, bn, bk, w, s, (sw, cp) in configs:
        subs = dict(zip(SYMS, (bm, bn, bk, s, 8)))
        try:
            t0 = time.perf_counter()
            base = cp.removesuffix("+p")
            k = wc.compile(
                make_gemm(
                    dt[0],
                    mma_type=dt[1],
                    waves=w,
                    sched=schedule(
                        operand_swizzle="auto" if sw == "pf" else sw,
                        async_copy="tma" if base == "ws" else base,
                        warp_specialize=base == "ws",
                        persistent=cp.endswith("+p"),
                        prefetch_fragments=sw == "pf",
                    ),
                ),
                subs,
                backend="cuda",
                target=target,
                cache=False,
            )
            ct = time.perf_counter() - t0
            c.fill_(float("nan"))
            k(a, b, c)
            err = ((c - ref).norm() / ref.norm()).item()
            ms = do_bench(lambda: k(a, b, c), warmup=50, rep=200, return_mode="median")
        except Exception as e:  # noqa: BLE001 - report and go on with the sweep
            print(f"{(bm, bn, bk, w, s, sw, cp)} failed: {str(e).splitlines()[0][:120]}")
            continue
        m = k.metadata
        copy = cp if m.tensor_maps else "cp.async"  # "auto" and "tma" use TMA only where it applies
        rows.append(
            (
                (bm, bn, bk, w, s, sw, copy),
                2 * n**3 / ms / 1e9,
                cublas / ms,
                err,
                m.registers,
                m.spills,
                m.shared_bytes,
                ct,
            )
        )
    print(f"cuBLAS {2 * n**3 / cublas / 1e9:.1f} TFLOP/s at {n}^3 {args.dtype}")
    print(
        f"{'config (BM, BN, BK, waves, stages, swizzle, copy)':56} "
        f"{'TF/s':>7} {'ratio':>6} {'err':>8} {'regs':>5} {'spill':>5} {'smem':>7} {'compile':>7}"
    )
    for cfg, tf, ratio, err, regs, sp, sm, ct in sorted(rows, key=lambda r: -r[1]):
        print(f"{str(cfg):56} {tf:7.1f} {ratio:6.3f} {err:8.1e} {regs!s:>5} {sp!s:>5} {sm:7d} {ct:7.2f}")


if __name__ == "__main__":
    main()
