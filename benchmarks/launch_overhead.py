"""Host time per call of wavec's GEMM entry points beside torch.matmul, on problems so small that the GPU
waits for the host (the time per call is the launch path's, not the kernel's).

    python benchmarks/launch_overhead.py [--calls 2000]

Rows: ``matmul`` (mma.sync and wgmma, the whole Python path: dispatch, output allocation, binding,
tensor maps, cuLaunchKernel), the compiled kernel called directly with C given, and torch.matmul.  Each
is the median of 5 repetitions of ``--calls`` back-to-back calls ended by one synchronize.
"""

import argparse
import statistics
import time

import torch

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, schedule, wgmma_plan


def per_call_us(fn, calls: int) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    reps = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        reps.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(reps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    a = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    c = torch.empty(128, 128, device="cuda", dtype=torch.float16)
    plan = wgmma_plan(128, 128, 64)
    direct = wc.compile(
        gm.make_gemm(
            wc.f16,
            mma_type=WGMMA_FOR_DTYPE["f16"],
            waves=plan.waves,
            out_dtype=wc.f16,
            sched=schedule(
                prefetch_fragments=True,
                warp_specialize=plan.warp_specialize,
                persistent=plan.persistent,
                split_epilogue=plan.split_epilogue,
            ),
        ),
        plan.subs,
        backend="cuda",
        target="sm_90a",
    )
    rows = [
        ("matmul(mma='mma_sync')", lambda: gm.matmul(a, b, out_dtype=torch.float16)),
        ("matmul(mma='wgmma')", lambda: gm.matmul(a, b, mma="wgmma", out_dtype=torch.float16)),
        ("compiled wgmma kernel(a, b, c)", lambda: direct(a, b, c)),
        ("torch.matmul(a, b.T)", lambda: torch.matmul(a, b.T)),
    ]
    print(f"{'entry point (128x128x64 f16)':34} {'us/call':>8}")
    for name, fn in rows:
        print(f"{name:34} {per_call_us(fn, args.calls):8.1f}")


if __name__ == "__main__":
    main()
