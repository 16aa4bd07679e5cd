"""One wavec split-KV decode call (split kernel and combine) and one SDPA cuDNN call of the same shape inside
a profiler range, for Nsight Compute to compare (issues #23 / #24: mid-batch decode against cuDNN):

    ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \\
        python benchmarks/ncu_decode_pair.py 32x2048 [bshd|bhsd] [BLOCK_NxWAVESxSTAGES] [splits]

GQA 32/8, d128, bf16, q_len 1.  ``bhsd``: the caches are transposed views of [B, Hkv, S, D] (transformers'
layout; SDPA reads them contiguous), ``bshd``: contiguous [B, S, Hkv, D] (SDPA gets a contiguous copy in
its layout).  Everything is compiled and warmed up before the range opens.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from wavec.kernels import decode


def main() -> None:
    batch, ctx = (int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "32x2048").split("x"))
    layout = sys.argv[2] if len(sys.argv) > 2 else "bhsd"
    config = tuple(int(v) for v in sys.argv[3].split("x")) if len(sys.argv) > 3 else None
    splits = int(sys.argv[4]) if len(sys.argv) > 4 else None
    heads, kv_heads, d, dt = 32, 8, 128, torch.bfloat16
    q = torch.randn(batch, 1, heads, d, device="cuda", dtype=dt)
    if layout == "bhsd":
        k, v = (torch.randn(batch, kv_heads, ctx, d, device="cuda", dtype=dt).transpose(1, 2) for _ in range(2))
    else:
        k, v = (torch.randn(batch, ctx, kv_heads, d, device="cuda", dtype=dt) for _ in range(2))
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def ours():
        return decode.decode_attention(q, k, v, config=config, num_splits=splits)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)

    for _ in range(3):
        out, ref = ours(), cudnn()
    torch.cuda.synchronize()
    err = (out.float() - ref.transpose(1, 2).float()).abs().max().item()
    print(f"B={batch} S={ctx} {layout} config {config} splits {splits}: max |wavec - cuDNN| {err:.2e}")
    torch.cuda.cudart().cudaProfilerStart()
    ours()
    cudnn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
