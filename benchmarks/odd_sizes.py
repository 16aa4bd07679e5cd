"""Odd GEMM sizes (issue #20 item 1) beside the next aligned size and cuBLAS, in one run (H100).

K = 4095 and N = 50257 are not multiples of the 16-byte vector width: ``matmul`` launches the narrow
variant for them, or for an odd K with M, N >= ``PAD_K_MIN_MN`` pads K with zeros (``pads_k``); the goal
is >= 0.85x the next aligned size's throughput (K = 4096, N = 50264).  Odd-K rows also time the narrow
variant alone (``narrow``), to check ``pads_k``'s threshold.

python benchmarks/odd_sizes.py [--out DIR]
"""

import argparse
import json
import os

import torch
import triton.testing

from wavec.kernels import gemm as gm
from wavec.kernels.gemm import matmul

# (name, (M, N, K) odd, (M, N, K) next aligned)
SHAPES = [
    ("K=4095", (4096, 4096, 4095), (4096, 4096, 4096)),
    ("N=50257", (4096, 50257, 4096), (4096, 50264, 4096)),
    ("decode N=50257", (16, 50257, 4096), (16, 50264, 4096)),
    ("K=4094", (4096, 4096, 4094), (4096, 4096, 4096)),
]


def bench(fn) -> float:
    """Median milliseconds (``triton.testing.do_bench``, as the other benchmarks time)."""
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def run_narrow(m: int, n: int, k: int) -> float:
    """TFLOP/s of ``matmul`` with padding off (the narrow variant for an odd K)."""
    saved, gm.PAD_K_MIN_MN = gm.PAD_K_MIN_MN, 1 << 62
    gm._DISPATCH.clear()
    try:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16)
        return 2 * m * n * k / bench(lambda: matmul(a, b)) / 1e9
    finally:
        gm.PAD_K_MIN_MN = saved
        gm._DISPATCH.clear()


def run(m: int, n: int, k: int) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    ref = (a.float() @ b.float().T).double()
    c = matmul(a, b)
    err = ((c.double() - ref).norm() / ref.norm()).item()
    ms = bench(lambda: matmul(a, b))
    ms_cublas = bench(lambda: torch.matmul(a, b.T))
    flops = 2 * m * n * k
    return {"shape": [m, n, k], "ms": ms, "tflops": flops / ms / 1e9, "cublas_ms": ms_cublas, "rel_err": err}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ.setdefault("WAVEC_CACHE_DIR", "/tmp/wavec-bench-cache")
    rows = []
    for name, odd, aligned in SHAPES:
        o, al = run(*odd), run(*aligned)
        ratio = o["tflops"] / al["tflops"]
        narrow = run_narrow(*odd) if gm.pads_k(*odd) else None
        rows.append({"name": name, "odd": o, "aligned": al, "ratio": ratio, "narrow_tflops": narrow})
        print(
            f"{name:16s} odd {o['tflops']:7.1f} TFLOP/s (cuBLAS {o['cublas_ms']:.3f} ms)  aligned "
            f"{al['tflops']:7.1f} TFLOP/s  ratio {ratio:.2f} {'ok' if ratio >= 0.85 else 'BELOW 0.85'}  "
            f"err {o['rel_err']:.1e}" + (f"  narrow variant {narrow:.1f} TFLOP/s" if narrow else "")
        )
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "odd_sizes.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
