"""One GEMM shape with whichever wavec is first on ``PYTHONPATH``, three ``do_bench`` medians in a row,
each beside cuBLAS (``F.linear``), bf16 and f16: run it for the old and the new tree in turn, twice, to
tell a code change from the GPU's clocks (``regress_aligned.py`` times each tree once, in its own process).

    for i in 1 2; do for t in old new; do
        PYTHONPATH=TREE_$t python benchmarks/regress_pair.py 4096x6144x4096 $t
    done; done

Prints ``LABEL dtype M N K`` then ``wavec/cuBLAS`` microseconds per repeat."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
import triton

from wavec.kernels.gemm import matmul


def main() -> None:
    m, n, k = (int(v) for v in sys.argv[1].split("x"))
    label = sys.argv[2] if len(sys.argv) > 2 else "wavec"
    for dt in (torch.bfloat16, torch.float16):
        a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(n, k, device="cuda", dtype=dt)
        torch.testing.assert_close(
            matmul(a, b, mma="wgmma", out_dtype=dt).float(), F.linear(a, b).float(), atol=0.5, rtol=2e-2
        )
        times = []
        for _ in range(3):
            w = triton.testing.do_bench(lambda: matmul(a, b, mma="wgmma", out_dtype=dt), warmup=50, rep=200)
            times.append((w, triton.testing.do_bench(lambda: F.linear(a, b), warmup=50, rep=200)))
        print(label, dt, m, n, k, " ".join(f"{1000 * x:.1f}/{1000 * y:.1f}" for x, y in times), flush=True)


if __name__ == "__main__":
    main()
