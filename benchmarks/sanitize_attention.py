"""Run every default wgmma attention kernel once, for compute-sanitizer: the tiles ``attention_config``
picks (d128 64x64x1, causal >= 16384 queries 128x128x2 — run at a small length through ``config=``, the
same kernel; d64 128x64x2; queries <= 64 64x128x1), K/V by TMA and the split epilogue, as ``attention()``
runs them, on ragged lengths, GQA, both layouts.  Only wavec kernels and copies run on the GPU (the
reference is computed on the CPU), so the sanitizer's report is about wavec's kernels.

    compute-sanitizer --tool memcheck python benchmarks/sanitize_attention.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_attention.py

Prints one line per case; exits 1 if any output is wrong or unwritten (NaN)."""

from __future__ import annotations

import sys

import torch

from wavec.kernels.attention import attention

# (layout, causal, B, H, KVH, Sq, Skv, D, config or None)
CASES = [
    ("bhsd", False, 1, 4, 2, 200, 333, 128, None),  # 64x64x1, ragged keys
    ("bshd", True, 1, 4, 4, 190, 190, 128, None),  # 64x64x1 causal, ragged queries
    ("bhsd", True, 1, 2, 1, 300, 300, 128, (128, 128, 2)),  # the long-causal tile
    ("bhsd", True, 1, 4, 2, 150, 260, 64, None),  # d64: 128x64x2
    ("bshd", False, 2, 4, 4, 1, 500, 128, None),  # decode: 64x128x1
]


def reference(q, k, v, causal: bool, layout: str) -> torch.Tensor:
    """SDPA in f64 on the CPU, [B, H, S, D] or [B, S, H, D] like q."""
    if layout == "bshd":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    q, k, v = (x.double().cpu() for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(s, -1) @ v
    return o.transpose(1, 2) if layout == "bshd" else o


def main() -> int:
    torch.manual_seed(0)
    bad = 0
    for dt in (torch.float16, torch.bfloat16):
        for layout, causal, b, h, kvh, sq, skv, d, cfg in CASES:
            shape = (lambda heads, s: (b, heads, s, d)) if layout == "bhsd" else (lambda heads, s: (b, s, heads, d))
            q = torch.randn(*shape(h, sq), device="cuda", dtype=dt)
            k = torch.randn(*shape(kvh, skv), device="cuda", dtype=dt)
            v = torch.randn(*shape(kvh, skv), device="cuda", dtype=dt)
            align = "top_left" if causal else False  # the reference's triu mask; True needs sq == skv
            out = attention(q, k, v, causal=align, layout=layout, config=cfg, mma="wgmma").cpu()
            err = (out.double() - reference(q, k, v, causal, layout)).abs().max().item()
            ok = err < (2e-3 if dt == torch.float16 else 1.6e-2) and not out.isnan().any()
            bad += not ok
            print(
                f"{str(dt):15} {layout} causal={causal!s:5} {b}x{h}/{kvh}x{sq}x{skv} d{d} config={cfg} "
                f"max err {err:.1e} {'ok' if ok else 'WRONG'}",
                flush=True,
            )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
