"""Where the next stage's copies go in an mma.sync GEMM loop with fragment prefetch, and how deep the
pipeline is: an experiment beside cuBLAS, not a production knob (it patches ``schedule_loops``).

    python benchmarks/mma_sync_schedules.py [--n 4096] [--dtype f16] [--tiles 128x256x64x2x4,...]
                                            [--stages 3,4] [--places step1,top,split,last] [--groups 8]

``step1``: copies and commit right before K step 1's first mma (``schedule_loops`` before 2026-11-24); ``top``
issues them first thing in the body (with the prefetch the body starts with K step 0's mmas on fragments
already in registers); ``split`` puts half before step 1 and half before step 2 (what ``schedule_loops`` does
now in a GEMM body); ``last`` puts them before
the last K step (next to the stage wait).  Fresh random inputs, ``do_bench`` medians, one process.
"""

import argparse
import time

import torch
from triton.testing import do_bench

import wavec as wc
import wavec.passes.schedule_loops as sl
from wavec.frontend.ops import AsyncCommit, AsyncCopy
from wavec.kernels import gemm as gm

_ORIGINAL = sl._schedule


def _placed(where: str):
    def schedule(body) -> None:
        _ORIGINAL(body)
        steps = sl.k_steps(body)
        copies = [n for n in body.nodes if n.meta.get("op") is AsyncCopy]
        commit = next((n for n in body.nodes if n.meta.get("op") is AsyncCommit), None)
        if not copies or commit is None or len(steps) < 3:
            return
        if where == "step1":
            groups = [(steps[1][0], copies)]
        elif where == "top":
            anchor = next(n for n in body.nodes if n.op != "placeholder").next  # after the stage wait
            groups = [(anchor, copies)]
        elif where == "split":
            half = len(copies) // 2
            groups = [(steps[1][0], copies[:half]), (steps[2][0], copies[half:])]
        else:
            groups = [(steps[-1][0], copies)]
        for anchor, group in groups:
            for c in group:
                anchor.prepend(c)
        groups[-1][0].prepend(commit)

    return schedule


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--tiles", default="128x256x64x2x4,256x128x64x4x2")
    ap.add_argument("--stages", default="3,4")
    ap.add_argument("--places", default="step1,top,split,last")
    ap.add_argument("--groups", default="8")
    args = ap.parse_args()
    wdt, mma, tdt = {
        "f16": (wc.f16, wc.MMAType.NV_F32_16x8x16_F16, torch.float16),
        "bf16": (wc.bf16, wc.MMAType.NV_F32_16x8x16_BF16, torch.bfloat16),
    }[args.dtype]
    n = args.n
    a, b = (torch.randn(n, n, device="cuda", dtype=tdt) for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=tdt)
    ref = a.float() @ b.float().T
    cublas = do_bench(lambda: torch.matmul(a, b.T), warmup=50, rep=300, return_mode="median")
    rows = []
    for tile in args.tiles.split(","):
        bm, bn, bk, w0, w1 = (int(x) for x in tile.split("x"))
        for st in (int(s) for s in args.stages.split(",")):
            for group in (int(g) for g in args.groups.split(",")):
                for where in args.places.split(","):
                    sl._schedule = _placed(where)
                    try:
                        t0 = time.perf_counter()
                        subs = {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: st, gm.GROUP_M: group}
                        k = wc.compile(
                            gm.make_gemm(wdt, mma_type=mma, waves=(w0, w1), out_dtype=wdt),
                            subs,
                            backend="cuda",
                            cache=False,
                        )
                        ct = time.perf_counter() - t0
                    finally:
                        sl._schedule = _ORIGINAL
                    c.fill_(float("nan"))
                    k(a, b, c)
                    err = float((c.float() - ref).norm() / ref.norm())
                    ms = do_bench(lambda: k(a, b, c), warmup=50, rep=300, return_mode="median")
                    m = k.metadata
                    rows.append((f"{tile} s{st} g{group} {where}", ms, err, m.registers, m.spills, ct))
    print(f"cuBLAS {2 * n**3 / cublas / 1e9:.1f} TFLOP/s at {n}^3 {args.dtype}")
    print(f"{'config':34} {'TF/s':>7} {'x cuBLAS':>8} {'err':>8} {'regs':>4} {'spill':>5} {'compile':>7}")
    for name, ms, err, regs, spills, ct in rows:
        print(f"{name:34} {2 * n**3 / ms / 1e9:7.1f} {cublas / ms:8.3f} {err:8.1e} {regs!s:>4} {spills!s:>5} {ct:7.2f}")


if __name__ == "__main__":
    main()
