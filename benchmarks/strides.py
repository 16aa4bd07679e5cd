"""Strides (issue #20 item 1): dense vs sliced vs transposed inputs, in one run (H100).

The dense rows are the kernels as before (identity layouts, the same binaries and launch path): they must
stay within 2% of a run of this script on ``main`` (``--dense-only`` runs just them there, where views are
rejected).  Sliced inputs (outer strides launch values, 16-byte accesses kept) should be close to dense;
transposed ones (innermost stride a launch value: element-wise access) are correct but slower.  Each row:
median time (``triton.testing.do_bench``), GB/s or TFLOP/s, and the ratio to dense.  ``launch`` rows time the
host side alone (a 2x8 copy, microseconds per call), dense vs a sliced view.

python benchmarks/strides.py [--dense-only] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import triton.testing

import wavec as wc
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm
from wavec.kernels import rows


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def host_us(fn, n: int = 2000) -> float:
    """Microseconds per call of ``fn`` on the host (the queue never fills at this size)."""
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def f16(*shape) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.float16)


def copy_rows(dense_only: bool) -> list[dict]:
    kernel = wc.compile(ew.make_copy(wc.f16), ew.DEFAULT_SUBS, backend="cuda")
    m, n = 8192, 8192
    cases = {"dense": f16(m, n)}
    if not dense_only:
        cases["sliced [:, :N] of 2N"] = f16(m, 2 * n)[:, :n]
        cases["pitch N+4"] = f16(m, n + 4)[:, :n]
        cases["transposed"] = f16(n, m).t()
    out, rows_ = torch.empty(m, n, device="cuda", dtype=torch.float16), []
    for name, src in cases.items():
        ms = bench(lambda src=src: kernel(src, out))
        rows_.append({"kernel": "copy 8192x8192 f16", "case": name, "ms": ms, "gbps": 2 * m * n * 2 / ms / 1e6})
    small, small_out = f16(2, 8), f16(2, 8)
    host = {"dense": lambda: kernel(small, small_out)}
    if not dense_only:
        wide = f16(2, 64)[:, 8:16]
        host["sliced"] = lambda: kernel(wide, small_out)
    for name, fn in host.items():
        rows_.append({"kernel": "launch 2x8 copy", "case": name, "us": host_us(fn)})
    return rows_


def gemm_rows(dense_only: bool) -> list[dict]:
    subs = {gm.BLOCK_M: 128, gm.BLOCK_N: 128, gm.BLOCK_K: 32, gm.NUM_STAGES: 3, gm.GROUP_M: 8}
    kernel = wc.compile(gm.make_gemm(wc.f16, 32, wc.MMAType.NV_F32_16x8x16_F16, (2, 2)), subs, backend="cuda")
    m = n = k = 4096
    cases = {"dense": (f16(m, k), f16(n, k))}
    if not dense_only:
        cases["sliced a (pitch 2K)"] = (f16(m, 2 * k)[:, :k], f16(n, k))
        cases["transposed b (x @ w)"] = (f16(m, k), f16(k, n).t())
    c, out = torch.empty(m, n, device="cuda"), []
    for name, (a, b) in cases.items():
        ms = bench(lambda a=a, b=b: kernel(a, b, c))
        out.append({"kernel": "gemm 4096^3 f16 mma.sync", "case": name, "ms": ms, "tflops": 2 * m * n * k / ms / 1e9})
    return out


def attention_rows(dense_only: bool) -> list[dict]:
    from wavec.kernels.attention import attention

    b, s, h, d = 4, 4096, 32, 128
    qkv = f16(b, s, 3, h, d)
    cases = {"dense bshd": tuple(qkv[:, :, i].contiguous() for i in range(3))}
    if not dense_only:
        cases["packed qkv views (bshd)"] = tuple(qkv[:, :, i] for i in range(3))
    out = []
    for name, (q, k, v) in cases.items():
        ms = bench(lambda q=q, k=k, v=v: attention(q, k, v, causal=True, layout="bshd"))
        flops = 4 * b * h * s * s * d / 2
        out.append({"kernel": "attention causal 4x4096x32x128", "case": name, "ms": ms, "tflops": flops / ms / 1e9})
    return out


def softmax_rows(dense_only: bool) -> list[dict]:
    m, n = 16384, 4096
    cases = {"dense": f16(m, n)}
    if not dense_only:
        cases["head slice of a packed [M, 3N]"] = f16(m, 3 * n)[:, n : 2 * n]
    out = []
    for name, x in cases.items():
        ms = bench(lambda x=x: rows.softmax(x))
        out.append({"kernel": "softmax 16384x4096 f16", "case": name, "ms": ms, "gbps": 2 * m * n * 2 / ms / 1e6})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dense-only", action="store_true", help="only the dense rows (to compare with main)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ.setdefault("WAVEC_CACHE_DIR", "/tmp/wavec-bench-cache")
    results = []
    for part in (copy_rows, gemm_rows, attention_rows, softmax_rows):
        got = part(args.dense_only)
        dense = got[0]
        for row in got:
            rate = "gbps" if "gbps" in row else "tflops" if "tflops" in row else "us"
            if rate != "us":
                row["vs_dense"] = row[rate] / dense[rate]
            value = f"{row[rate]:9.1f} {'GB/s' if rate == 'gbps' else 'TFLOP/s' if rate == 'tflops' else 'us/call'}"
            ratio = f"  {row['vs_dense']:.3f}x dense" if "vs_dense" in row else ""
            print(f"{row['kernel']:34s} {row['case']:30s} {value}{ratio}")
        results += got
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        name = "strides_dense.json" if args.dense_only else "strides.json"
        with open(os.path.join(args.out, name), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
