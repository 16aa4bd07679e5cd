"""The fused MoE layer's kernels inside one profiler range, for Nsight Compute to say where wavec's wgmma
GEMMs lose against the vLLM-algorithm Triton kernel (issue #21: Qwen3-30B-A3B at T = 4096 ran at 0.79x of
that baseline with vLLM's H100 table, session 18):

    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats --section Occupancy \\
        --section LaunchStats --section MemoryWorkloadAnalysis python benchmarks/ncu_moe.py Qwen3-30B-A3B 4096

Both implementations run (compiled, checked against the f32 reference and warmed up) before the range
opens, then once each inside it: wavec's static choice (``fused_experts(dispatch="static")``: align, up,
down, combine) and ``moe_triton.vllm_fused_experts`` (align, GEMM, SiLU-and-mul, GEMM, sum).  bf16,
balanced routing.  Prints the configurations and errors.
"""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0])

from benchmarks import moe  # noqa: E402
from wavec.kernels import fused_moe as fm  # noqa: E402
from wavec.kernels import moe_dispatch as md  # noqa: E402


def main() -> None:
    name, t = (sys.argv[1], int(sys.argv[2])) if len(sys.argv) > 2 else ("Qwen3-30B-A3B", 4096)
    (m,) = moe.models([name])
    e, k, h, i = m["experts"], m["top_k"], m["hidden"], m["intermediate"]
    w1 = (torch.randn(e, 2 * i, h, device="cuda") / h**0.5).bfloat16()
    w2 = (torch.randn(e, h, i, device="cuda") / i**0.5).bfloat16()
    x = torch.randn(t, h, device="cuda").bfloat16()
    wts, ids, _ = moe.routing(t, e, k, 1.0, m["renormalize"], seed=t)
    ref = fm.reference(x, w1, w2, wts, ids)
    impls = {"wavec": lambda: fm.fused_experts(x, w1, w2, wts, ids, dispatch="static")}
    if moe.moe_triton is not None:
        impls["vllm_triton"] = lambda: moe.moe_triton.vllm_fused_experts(x, w1, w2, wts, ids)
    for label, fn in impls.items():
        err = float((fn().float() - ref).abs().max())
        print(f"{label}: max err {err:.4f}", flush=True)
    print(f"wavec config {md.dispatch_report()['last'].label()}; vllm config {moe.moe_triton.config_for(t, e, i)}")
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for fn in impls.values():
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
