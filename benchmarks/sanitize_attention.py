"""Run every default wgmma attention kernel once, for compute-sanitizer: the tiles ``attention_config``
picks (d128 64x64x1, causal >= 16384 queries 128x128x2 — run at a small length through ``config=``, the
same kernel; d64 128x64x2; queries <= 64 64x128x1), K/V by TMA and the split epilogue, as ``attention()``
runs them, on ragged lengths, GQA, both layouts.  Only wavec kernels and copies run on the GPU (the
reference is computed on the CPU), so the sanitizer's report is about wavec's kernels.

    compute-sanitizer --tool memcheck python benchmarks/sanitize_attention.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_attention.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_attention.py --overlap

``--overlap``: every kernel with ``intra_wg_overlap=True`` (3 stages; the head dims TMA serves, 64 and
multiples of it).

Then the mask modes and head dims (``MASK_CASES``: bottom-right causal, windows with three key loops, the
soft-cap, d80 / d192 / d256 and Dv != D) against ``tests/attention_ref.reference`` on the CPU.

Prints one line per case; exits 1 if any output is wrong or unwritten (NaN)."""

from __future__ import annotations

import argparse
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


# (causal, window, softcap, B, H, KVH, Sq, Skv, D, Dv), BHSD
MASK_CASES = [
    ("bottom_right", (-1, -1), 0.0, 1, 4, 2, 150, 333, 128, 128),  # a chunk at the end of a cache
    ("bottom_right", (-1, -1), 0.0, 1, 2, 2, 300, 170, 128, 128),  # 130 queries see no key
    ("bottom_right", (100, -1), 0.0, 1, 4, 1, 200, 450, 128, 128),  # three key loops
    (False, (50, 20), 30.0, 1, 2, 2, 190, 190, 64, 64),  # window both sides + soft-cap
    ("bottom_right", (-1, -1), 0.0, 1, 4, 2, 100, 210, 80, 80),  # cp.async (D not a multiple of 64)
    ("bottom_right", (64, -1), 0.0, 1, 2, 1, 100, 210, 192, 128),  # Dv != D
    (False, (-1, -1), 0.0, 1, 2, 2, 77, 130, 256, 256),
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--overlap", action="store_true", help="intra_wg_overlap=True (the rotated key loops)")
    overlap = ap.parse_args().overlap
    torch.manual_seed(0)
    bad = 0
    for dt in (torch.float16, torch.bfloat16):
        for layout, causal, b, h, kvh, sq, skv, d, cfg in CASES:
            shape = (lambda heads, s: (b, heads, s, d)) if layout == "bhsd" else (lambda heads, s: (b, s, heads, d))
            q = torch.randn(*shape(h, sq), device="cuda", dtype=dt)
            k = torch.randn(*shape(kvh, skv), device="cuda", dtype=dt)
            v = torch.randn(*shape(kvh, skv), device="cuda", dtype=dt)
            align = "top_left" if causal else False  # the reference's triu mask; True needs sq == skv
            out = attention(
                q, k, v, causal=align, layout=layout, config=cfg, mma="wgmma", intra_wg_overlap=overlap
            ).cpu()
            err = (out.double() - reference(q, k, v, causal, layout)).abs().max().item()
            ok = err < (2e-3 if dt == torch.float16 else 1.6e-2) and not out.isnan().any()
            bad += not ok
            print(
                f"{str(dt):15} {layout} causal={causal!s:5} {b}x{h}/{kvh}x{sq}x{skv} d{d} config={cfg} "
                f"max err {err:.1e} {'ok' if ok else 'WRONG'}",
                flush=True,
            )
    sys.path.insert(0, __file__.rsplit("/", 2)[0])
    from tests.attention_ref import reference as masked_reference
    from tests.attention_ref import visible

    for causal, window, cap, b, h, kvh, sq, skv, d, dv in MASK_CASES:
        if overlap and d % 64:
            continue  # cp.async staging: the rotation needs TMA
        q, k, v = (torch.randn(b, n, s, x, device="cuda") for n, s, x in ((h, sq, d), (kvh, skv, d), (kvh, skv, dv)))
        q, k, v = q.half(), k.half(), v.half()
        out = attention(q, k, v, causal=causal, window=window, softcap=cap, mma="wgmma", intra_wg_overlap=overlap)
        out = out.cpu()
        ok_mask = visible(sq, skv, causal or None, *window)
        want = masked_reference(q.cpu().double(), k.cpu().double(), v.cpu().double(), ok_mask, softcap=cap)
        err = (out.double() - want).abs().max().item()
        ok = err < 2e-3 and not out.isnan().any()
        bad += not ok
        print(f"f16 {causal} window={window} cap={cap} {b}x{h}/{kvh}x{sq}x{skv} d{d}/{dv} max err {err:.1e} "
              f"{'ok' if ok else 'WRONG'}", flush=True)  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
