"""Re-time the two wgmma race shapes whose f16 picks were timed once at 2-7x their bf16 twins
(``benchmarks/rank_regrets.py``'s suspects, session 10's ``tune_wg``): per shape the ranking model's pick
and the race's f16 and bf16 bests, in both dtypes, three ``do_bench`` medians each beside cuBLAS, with the
error against an f32 product (docs/perf_model.md, "wgmma ranking (session 11)").

    python benchmarks/retime_wgmma_suspects.py
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
import triton

from wavec.frontend.symbols import sym
from wavec.kernels.gemm import matmul

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refit_cost_model import parse_label  # noqa: E402

CASES = {
    (128, 12288, 4096): [
        "BLOCK_K=64 BLOCK_M=128 BLOCK_N=128 GROUP_M=8 NUM_STAGES=5 waves=[1, 1]",
        "BLOCK_K=64 BLOCK_M=128 BLOCK_N=128 GROUP_M=8 NUM_STAGES=5 waves=[2, 1]",
        "BLOCK_K=64 BLOCK_M=64 BLOCK_N=192 GROUP_M=8 NUM_STAGES=5 waves=[1, 1]",
    ],
    (2048, 12288, 4096): [
        "BLOCK_K=64 BLOCK_M=256 BLOCK_N=192 GROUP_M=8 NUM_STAGES=4 waves=[2, 1]",
        "BLOCK_K=64 BLOCK_M=128 BLOCK_N=256 GROUP_M=8 NUM_STAGES=4 waves=[2, 1]",
        "BLOCK_K=64 BLOCK_M=256 BLOCK_N=192 GROUP_M=8 NUM_STAGES=4 waves=[4, 1]",
    ],
}


def parse(label: str) -> tuple[dict, tuple[int, ...]]:
    """(subs, waves) of a race label, read by the race loader's ``refit_cost_model.parse_label``."""
    cand = parse_label(label)
    return {sym(k): v for k, v in cand.subs_dict.items()}, tuple(cand.kwargs_dict["waves"])


def main() -> None:
    for (m, n, k), labels in CASES.items():
        for dt in (torch.float16, torch.bfloat16):
            a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(n, k, device="cuda", dtype=dt)
            ref = F.linear(a.float(), b.float())
            cub = 1000 * triton.testing.do_bench(lambda: F.linear(a, b), warmup=25, rep=100)
            for lab in labels:
                try:
                    cfg = parse(lab)
                    c = matmul(a, b, config=cfg, mma="wgmma")
                    err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
                    ts = [
                        1000
                        * triton.testing.do_bench(lambda: matmul(a, b, config=cfg, mma="wgmma"), warmup=25, rep=100)
                        for _ in range(3)
                    ]
                    print(
                        f"{m}x{n}x{k} {str(dt)[6:]:8} {lab:70} "
                        + " ".join(f"{t:.1f}" for t in ts)
                        + f" us  cuBLAS {cub:.1f}  err {err:.1e}",
                        flush=True,
                    )
                except Exception as e:
                    print(f"{m}x{n}x{k} {str(dt)[6:]} {lab} FAILED {type(e).__name__}: {str(e)[:150]}", flush=True)


if __name__ == "__main__":
    main()
