"""Run every schedule of ``wgmma_plan`` (the default Hopper GEMM kernels) once, for compute-sanitizer:

    compute-sanitizer --tool memcheck python benchmarks/sanitize_gemm.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_gemm.py

Each shape is chosen so the plan picks a different tile and schedule (64-row tiles with a TMA producer
warpgroup, 128x128 warp-specialized on a persistent grid, 128x160 and 128x256 persistent), with M, N and K
edges that are not multiples of the tile, compiled as ``matmul`` compiles them (C in f32 here); every
result is checked against torch in float64 (and that every element was written), so a run that the
sanitizer passes is also a correct one.  Exits 1 on a wrong result.

``--prefetch``: instead, the mma.sync tiles with ``SchedulingConstraint.prefetch_fragments`` (the stage
wait and barrier before the last K step, the next iteration's first fragments read after them), with
2-4 stages and 1-4 K steps per iteration, on the same ragged shapes, C in f32 and in the input dtype (16-byte
stores where N % 8 == 0, ``widen_stores``; the narrow ones otherwise).

``--cluster``: instead, ``matmul(mma="wgmma", cluster=(2, 1) | (1, 2))`` (2-workgroup clusters that
TMA-multicast the shared operand, ``SchedulingConstraint.cluster``) on the same ragged shapes, C in the
input dtype, against torch in float64 (``_check``).
"""

import sys

import torch

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, schedule, wgmma_plan

WC_DT = {torch.float16: wc.f16, torch.bfloat16: wc.bf16}

SHAPES = [(40, 300, 600), (64, 20000, 136), (130, 2000, 600), (500, 4096, 600), (2000, 1280, 600), (4000, 4000, 328)]


PREFETCH_TILES = [((256, 128, 64, 3), (4, 2)), ((128, 128, 32, 4), (2, 2)), ((64, 128, 16, 2), (2, 2))]


def _check(kernel, m: int, n: int, k: int, dt, label: str, out=torch.float32) -> bool:
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(n, k, device="cuda", dtype=dt)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=out)
    kernel(a, b, c)
    ref = a.double() @ b.double().T
    err = ((c.double() - ref).norm() / ref.norm()).item()
    ok = err < (1e-5 if out == torch.float32 else 1e-2) and not c.isnan().any()
    print(f"{str(dt):15} {m:5}x{n:5}x{k:4} {label} rel err {err:.1e} {'ok' if ok else 'WRONG'}")
    return ok


def prefetch_main() -> int:
    bad = 0
    torch.manual_seed(0)
    for dt in (torch.float16, torch.bfloat16):
        mma = wc.MMAType.NV_F32_16x8x16_F16 if dt == torch.float16 else wc.MMAType.NV_F32_16x8x16_BF16
        for (bm, bn, bk, st), waves in PREFETCH_TILES:
            subs = {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: st, gm.GROUP_M: 8}
            for out in (torch.float32, dt):  # C in the input dtype: 16-byte stores (widen_stores) where N % 8 == 0
                kernel = wc.compile(
                    gm.make_gemm(
                        WC_DT[dt],
                        mma_type=mma,
                        waves=waves,
                        out_dtype=wc.f32 if out == torch.float32 else WC_DT[dt],
                        sched=schedule(prefetch_fragments=True),
                    ),
                    subs,
                    backend="cuda",
                )
                for m, n, k in SHAPES[:4] + [(130, 2002, 600)]:
                    bad += not _check(kernel, m, n, k, dt, f"mma.sync {bm}x{bn}x{bk} s{st} prefetch C {out}", out)
    return 1 if bad else 0


def cluster_main() -> int:
    bad = 0
    torch.manual_seed(0)
    for dt in (torch.float16, torch.bfloat16):
        for cluster in ((2, 1), (1, 2)):

            def kernel(a, b, c, cluster=cluster):  # matmul returns C: copied into _check's NaN-filled one
                c.copy_(gm.matmul(a, b, mma="wgmma", cluster=cluster))

            for m, n, k in SHAPES:
                bad += not _check(kernel, m, n, k, dt, f"cluster {cluster}", dt)
    return 1 if bad else 0


def main() -> int:
    if "--prefetch" in sys.argv[1:]:
        return prefetch_main()
    if "--cluster" in sys.argv[1:]:
        return cluster_main()
    bad = 0
    torch.manual_seed(0)
    for dt in (torch.float16, torch.bfloat16):
        for m, n, k in SHAPES:
            plan = wgmma_plan(m, n, k)
            a = torch.randn(m, k, device="cuda", dtype=dt)
            b = torch.randn(n, k, device="cuda", dtype=dt)
            gemm = gm.make_gemm(
                WC_DT[dt],
                mma_type=WGMMA_FOR_DTYPE[WC_DT[dt].name],
                waves=plan.waves,
                sched=schedule(
                    prefetch_fragments=True,
                    warp_specialize=plan.warp_specialize,
                    persistent=plan.persistent,
                    split_epilogue=plan.split_epilogue,
                ),
            )
            kernel = wc.compile(gemm, plan.subs, backend="cuda", target="sm_90a")
            c = torch.full((m, n), float("nan"), device="cuda")
            kernel(a, b, c)
            ref = a.double() @ b.double().T
            err = ((c.double() - ref).norm() / ref.norm()).item()
            ok = err < 1e-5 and not c.isnan().any()
            bad += not ok
            tile = "x".join(str(v) for v in plan.subs.values())
            print(
                f"{str(dt):15} {m:5}x{n:5}x{k:4} tile {tile:18} ws={plan.warp_specialize!s:5} "
                f"persistent={plan.persistent!s:5} rel err {err:.1e} {'ok' if ok else 'WRONG'}"
            )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
