"""Variable-length prefill attention (``wavec.kernels.varlen_attention``) against SDPA flash over the
equivalent padded batch, one run, medians of ``triton.testing.do_bench``.

Each row draws B sequence lengths uniformly from 100..4000 (a fixed seed per row), packs them for wavec
([total, H, D] with cu_seqlens) and pads them to the longest for SDPA ([B, H, max, D] with the flash backend:
its padded rows are computed and discarded, which is what a caller without a varlen kernel pays; flash has
no mask argument, so the padded keys are not masked: same work, timing anchor only).  TFLOP/s count the
useful work only (4 · Σ len_q · len_k · H · D, halved for causal).

Run from the repository root: ``python -m benchmarks.varlen_attention [--quick]``; on sm_90 both mma.sync and wgmma are
timed and the faster one is compared."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from wavec.kernels.varlen import varlen_attention

ROWS = [  # batch, q heads, kv heads, head dim, causal
    (8, 32, 8, 128, True),
    (8, 32, 8, 128, False),
    (16, 32, 8, 128, True),
    (8, 16, 16, 64, True),
    (32, 32, 8, 128, True),
]


def _us(fn) -> float:
    return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def row(batch: int, heads: int, kv_heads: int, d: int, causal: bool, mmas: list[str]) -> str:
    gen = torch.Generator().manual_seed(batch * 1000 + d)
    lens = torch.randint(100, 4001, (batch,), generator=gen).tolist()
    total, longest = sum(lens), max(lens)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q = torch.randn(total, heads, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(total, kv_heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    mask = "top_left" if causal else False
    times = {m: _us(lambda m=m: varlen_attention(q, k, v, cu, cu, longest, longest, causal=mask, mma=m)) for m in mmas}
    mma, t_wc = min(times.items(), key=lambda kv: kv[1])
    qp, kp, vp = (torch.zeros(batch, longest, x.shape[1], d, device="cuda", dtype=x.dtype) for x in (q, k, v))
    for b, n in enumerate(lens):
        s = int(cu[b])
        qp[b, :n], kp[b, :n], vp[b, :n] = q[s : s + n], k[s : s + n], v[s : s + n]
    qp, kp, vp = (x.transpose(1, 2) for x in (qp, kp, vp))
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            t_fl = _us(lambda: F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal, enable_gqa=True))
        flash = f"{t_fl:.0f} | {t_fl / t_wc:.2f}x"
    except RuntimeError as exc:  # flash refuses some shapes / GPUs: say so instead of timing another kernel
        flash = f"n/a ({str(exc).splitlines()[0][:40]}) | -"
    flops = 4 * sum(n * n for n in lens) * heads * d / (2 if causal else 1)
    desc = f"B={batch} H={heads}/{kv_heads} d{d} {'causal' if causal else 'full'} tokens={total} max={longest}"
    each = " / ".join(f"{times[m]:.0f}" for m in mmas)
    return f"| {desc} | {each} | {mma} | {flops / t_wc / 1e6:.0f} | {flash} |"


def main() -> None:
    quick = "--quick" in sys.argv
    hopper = torch.cuda.get_device_capability() == (9, 0)
    mmas = ["mma_sync", "wgmma"] if hopper else ["mma_sync"]
    print(f"{torch.cuda.get_device_name()}, bf16")
    print(f"| shape | wavec us ({' / '.join(mmas)}) | best | wavec TFLOP/s | SDPA flash (padded) us | wavec speed-up |")
    print("|---|---|---|---|---|---|")
    for r in ROWS[:2] if quick else ROWS:
        print(row(*r, mmas), flush=True)


if __name__ == "__main__":
    main()
