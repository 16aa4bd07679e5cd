"""Per-tile fixed cost of the mma.sync GEMM: the 128x256 prefetch tile at short and long K with C in f16
and f32 (same instructions, twice the bytes per store), beside cuBLAS, for ncu and do_bench.

    python benchmarks/epilogue_probe.py [--m 4096] [--n 4096] [--ks 64,256,4096] [--once]

``--once`` launches each kernel once (for ncu) instead of timing.  If a store's pattern (8 rows x 16 bytes
per warp instruction for f16) rather than its bytes limits the epilogue, f32 C costs about what f16 does.
"""

import argparse

import torch
from triton.testing import do_bench

import wavec as wc
from wavec.kernels import gemm as gm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--ks", default="64,256,4096")
    ap.add_argument("--once", action="store_true")
    args = ap.parse_args()
    subs = {gm.BLOCK_M: 128, gm.BLOCK_N: 256, gm.BLOCK_K: 64, gm.NUM_STAGES: 3, gm.GROUP_M: 8}
    kernels = {
        out: wc.compile(gm.make_gemm(wc.f16, waves=(2, 4), out_dtype=out), subs, backend="cuda")
        for out in (wc.f16, wc.f32)
    }
    m, n = args.m, args.n
    print(f"{'M x N x K':>18} {'C':>4} {'wavec us':>9} {'cuBLAS us':>9} {'C bytes / wavec time (TB/s)':>28}")
    for k in (int(x) for x in args.ks.split(",")):
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16)
        for out, kernel in kernels.items():
            tdt = torch.float16 if out == wc.f16 else torch.float32
            c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
            kernel(a, b, c)
            if args.once:
                continue
            ref = a.float() @ b.float().T
            assert float((c.float() - ref).norm() / ref.norm()) < 1e-2 and not c.isnan().any()
            us = do_bench(lambda: kernel(a, b, c), warmup=25, rep=200, return_mode="median") * 1e3
            cub = do_bench(lambda: torch.matmul(a, b.T), warmup=25, rep=200, return_mode="median") * 1e3  # f16 C
            rate = c.numel() * c.element_size() / us / 1e6
            print(f"{m:>6}x{n}x{k:<6} {out.name:>4} {us:9.1f} {cub:9.1f} {rate:28.2f}")


if __name__ == "__main__":
    main()
