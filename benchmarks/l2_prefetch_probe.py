"""Probe: does the ``cp.async`` L2 prefetch qualifier (``.L2::64B`` / ``128B`` / ``256B``, PTX ISA 7.4,
sm_80+) raise the split-KV decode kernel's and the mma.sync GEMM's bandwidth?  Nsight Compute showed the
decode split kernel at a 36 % L2 hit rate against cuDNN's 1 % on the same K/V stream (session 13).

The qualifier is added to every ``cp.async.{ca,cg}.shared.global`` in the PTX before ptxas (a patch of
``wavec.codegen.ptxas.assemble``, which the compiler imports per compile; this process only, caching off),
then decode (CUDA graph, input sets rotated past the L2) and an mma.sync GEMM are timed.  One variant a process:

    python benchmarks/l2_prefetch_probe.py {none,64,128,256} [--shapes 16x2048,32x2048] [--layout bhsd]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

os.environ["WAVEC_CACHE_DISABLE"] = "1"

import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import wavec.codegen.ptxas  # noqa: E402
from wavec.kernels import decode  # noqa: E402
from wavec.kernels.gemm import matmul  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_tiles import _graph_us, cache  # noqa: E402

_CP_ASYNC = re.compile(r"\bcp\.async\.(ca|cg)\.shared\.global(?=[\s\[])")


def patch(size: str) -> None:
    if size == "none":
        return
    original = wavec.codegen.ptxas.assemble

    def assemble(ptx: str, arch: str):
        return original(_CP_ASYNC.sub(lambda m: f"cp.async.{m.group(1)}.shared.global.L2::{size}B", ptx), arch)

    wavec.codegen.ptxas.assemble = assemble


def decode_us(batch: int, ctx: int, layout: str) -> float:
    sets = [
        (torch.randn(batch, 1, 32, 128, device="cuda", dtype=torch.bfloat16),
         cache(batch, ctx, 8, layout), cache(batch, ctx, 8, layout))
        for _ in range(max(1, min(8, (200 << 20) // (4 * batch * ctx * 8 * 128))))
    ]  # fmt: skip
    return _graph_us(lambda q, k, v: decode.decode_attention(q, k, v), sets)


def gemm_us(m: int, n: int, k: int) -> float:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    return 1e3 * do_bench(lambda: matmul(a, b, mma="mma_sync", out_dtype=a.dtype), return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("size", choices=("none", "64", "128", "256"))
    ap.add_argument("--shapes", default="16x2048,32x2048,8x2048")
    ap.add_argument("--layout", default="bhsd", choices=("bshd", "bhsd"))
    ap.add_argument("--gemms", default="4096x4096x4096,16x4096x4096")
    args = ap.parse_args()
    patch(args.size)
    cols = [f"decode {s} {args.layout}" for s in args.shapes.split(",")]
    cols += [f"mma.sync {g}" for g in args.gemms.split(",") if g]
    vals = [decode_us(*(int(x) for x in s.split("x")), args.layout) for s in args.shapes.split(",")]
    vals += [gemm_us(*(int(x) for x in g.split("x"))) for g in args.gemms.split(",") if g]
    print(f"L2 prefetch {args.size}: " + ", ".join(f"{c} {v:.1f} us" for c, v in zip(cols, vals)), flush=True)


if __name__ == "__main__":
    main()
