"""GEMM 4096^3 beside cuBLAS in the same run, cold compile time, and warm call overhead (H100).

python benchmarks/gemm_smoke.py [--out DIR]
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

import wavec as wc
from wavec.kernels.gemm import make_gemm
from wavec.tuning.plan import DEFAULT_SUBS


def bench(fn, reps: int = 50) -> float:
    """Median milliseconds over ``reps`` runs timed with CUDA events after a warm-up."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ.setdefault("WAVEC_CACHE_DIR", "/tmp/wavec-bench-cache")
    rows = []
    for dtype, mma, tdt in (
        (wc.f16, wc.MMAType.NV_F32_16x8x16_F16, torch.float16),
        (wc.bf16, wc.MMAType.NV_F32_16x8x16_BF16, torch.bfloat16),
    ):
        t0 = time.perf_counter()
        k = wc.compile(make_gemm(dtype, mma_type=mma), DEFAULT_SUBS, backend="cuda", cache=False)
        cold = time.perf_counter() - t0
        for n in (1024, 2048, 4096):
            a = torch.randn(n, n, device="cuda", dtype=tdt)
            b = torch.randn(n, n, device="cuda", dtype=tdt)
            c = torch.empty(n, n, device="cuda")
            ms_w = bench(lambda: k(a, b, c))
            ms_t = bench(lambda: torch.matmul(a, b.T))
            flops = 2 * n**3
            rows.append(
                {
                    "dtype": dtype.name,
                    "n": n,
                    "wavec_tflops": flops / ms_w / 1e9,
                    "cublas_tflops": flops / ms_t / 1e9,
                    "ratio": ms_t / ms_w,
                    "cold_compile_s": cold,
                }
            )
    # warm call overhead: tiny problem, host-side time per call
    k = wc.compile(make_gemm(), DEFAULT_SUBS, backend="cuda")
    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    c = torch.empty(64, 64, device="cuda")
    for _ in range(100):
        k(a, b, c)
    torch.cuda.synchronize()
    n_calls = 2000
    t0 = time.perf_counter()
    for _ in range(n_calls):
        k(a, b, c)
    per_call_us = (time.perf_counter() - t0) / n_calls * 1e6
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n_calls):
        torch.add(a, a)
    torch_add_us = (time.perf_counter() - t0) / n_calls * 1e6
    print(f"{'dtype':6} {'n':>5} {'wavec TF/s':>11} {'cuBLAS TF/s':>12} {'ratio':>6}")
    for r in rows:
        print(f"{r['dtype']:6} {r['n']:5d} {r['wavec_tflops']:11.1f} {r['cublas_tflops']:12.1f} {r['ratio']:6.3f}")
    print(f"cold compile (f16, bf16): {rows[0]['cold_compile_s']:.2f} s, {rows[-1]['cold_compile_s']:.2f} s")
    print(f"warm call overhead: wavec {per_call_us:.1f} us/call, torch.add {torch_add_us:.1f} us/call")
    if args.out:
        with open(os.path.join(args.out, "gemm_smoke.json"), "w") as f:
            json.dump({"rows": rows, "per_call_us": per_call_us, "torch_add_us": torch_add_us}, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
