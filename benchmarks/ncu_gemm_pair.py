"""One wavec wgmma GEMM launch and one cuBLAS launch of the same shape inside a profiler range, for Nsight
Compute to compare side by side (issue #25: where the wgmma GEMM's last 10 % against cuBLAS goes):

    ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy \\
        --section WarpStateStats --section SchedulerStats python benchmarks/ncu_gemm_pair.py 4096x6144x4096

Both run (compiled, warmed up) before the range opens, so only the two measured launches are profiled.
Prints wavec's plan (tile, stages, producer warpgroup, persistent grid) and both results' agreement.
A third argument ``flat`` / ``cluster_m`` / ``cluster_n`` profiles that wavec variant instead of cuBLAS
beside the default (``flat``: the default plan with ``persistent=False``; ``cluster_m`` / ``cluster_n``:
``cluster=(2, 1)`` / ``(1, 2)``, which run on the flat grid), e.g. where the multicast loses:

    ncu ... python benchmarks/ncu_gemm_pair.py 4096x6144x4096 bf16 flat
    ncu ... python benchmarks/ncu_gemm_pair.py 4096x6144x4096 bf16 cluster_m
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from wavec.kernels.gemm import matmul
from wavec.tuning import plan

VARIANTS = {"flat": {"persistent": False}, "cluster_m": {"cluster": (2, 1)}, "cluster_n": {"cluster": (1, 2)}}


def main() -> None:
    m, n, k = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "4096x6144x4096").split("x"))
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[sys.argv[2] if len(sys.argv) > 2 else "bf16"]
    a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(n, k, device="cuda", dtype=dt)
    other = sys.argv[3] if len(sys.argv) > 3 else "cublas"
    kw = VARIANTS.get(other)
    if other != "cublas" and kw is None:
        raise SystemExit(f"variant {other!r}: expected cublas or one of {sorted(VARIANTS)}")

    def second(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.linear(a, b) if kw is None else matmul(a, b, mma="wgmma", out_dtype=dt, **kw)

    for _ in range(3):
        c, ref = matmul(a, b, mma="wgmma", out_dtype=dt), second(a, b)
    torch.cuda.synchronize()
    err = ((c.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    print(f"max |wavec - {other}| / max |{other}|:", err)
    print("wavec plan:", plan.wgmma_plan(m, n, k))
    torch.cuda.cudart().cudaProfilerStart()
    matmul(a, b, mma="wgmma", out_dtype=dt)
    second(a, b)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
