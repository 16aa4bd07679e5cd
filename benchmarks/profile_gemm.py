"""Run one wavec GEMM launch (for ncu / cuobjdump): writes the cubin and MLIR to --out.

python benchmarks/profile_gemm.py --out DIR [--n 4096] [--config 128,256,64,3,2,4]
"""

import argparse
import pathlib

import torch

import wavec as wc
from wavec.kernels.gemm import BLOCK_K, BLOCK_M, BLOCK_N, GROUP_M, NUM_STAGES, make_gemm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--config", default="128,256,64,3,2,4")
    args = ap.parse_args()
    bm, bn, bk, s, w0, w1 = (int(x) for x in args.config.split(","))
    subs = {BLOCK_M: bm, BLOCK_N: bn, BLOCK_K: bk, NUM_STAGES: s, GROUP_M: 8}
    k = wc.compile(make_gemm(waves=(w0, w1)), subs, backend="cuda", cache=False)
    out = pathlib.Path(args.out)
    (out / "gemm.cubin").write_bytes(k.artifact.binary)
    (out / "gemm.mlir").write_text(k.mlir)
    n = args.n
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty(n, n, device="cuda")
    for _ in range(3):
        k(a, b, c)
    torch.cuda.synchronize()
    print("registers", k.metadata.registers, "spills", k.metadata.spills)


if __name__ == "__main__":
    main()
