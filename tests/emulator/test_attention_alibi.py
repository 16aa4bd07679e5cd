"""ALiBi slopes in ``attention`` (issue #23 item 3): the bias ``-slope * |i + Skv - Sq - j|`` (flash-attn's
``alibi_slopes``) on the scaled scores, per head [H] or per batch and head [B, H], with every mask mode,
soft-capping, grouped-query heads and both layouts; against an f64 reference, every element written."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.kernels import attention as at


def reference(q, k, v, slopes, causal, scale: float, softcap: float = 0.0) -> torch.Tensor:
    """[B, H, Sq, Dv] in f64 for bhsd inputs (k and v with KVH heads)."""
    b, h, m, _ = q.shape
    n, group = k.shape[2], h // k.shape[1]
    kk, vv = (t.double().repeat_interleave(group, 1) for t in (k, v))
    s = q.double() @ kk.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i, j = torch.arange(m)[:, None], torch.arange(n)[None, :]
    per = slopes.double().view(-1 if slopes.dim() == 2 else 1, h, 1, 1)
    s = s - per * (i + n - m - j).abs()
    if causal:
        s = s.masked_fill(j > (i if causal == "top_left" else i + n - m), float("-inf"))
    return torch.softmax(s, -1) @ vv


CASES = [  # (B, H, KVH, Sq, Skv, D, causal, per batch, softcap, layout)
    (2, 4, 2, 40, 72, 64, False, False, 0.0, "bhsd"),
    (1, 2, 2, 33, 70, 64, "bottom_right", True, 0.0, "bhsd"),
    (2, 2, 1, 64, 64, 128, "top_left", False, 0.0, "bshd"),
    (1, 2, 2, 20, 50, 64, False, True, 30.0, "bshd"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[6] or 'full'}-{c[9]}-d{c[5]}-cap{c[8]:g}")
def test_alibi_matches_reference(case) -> None:
    b, h, kvh, m, n, d, causal, per_batch, softcap, layout = case
    g = torch.Generator().manual_seed(m * n)
    q = torch.randn(b, h, m, d, generator=g).half()
    k, v = (torch.randn(b, kvh, n, d, generator=g).half() for _ in range(2))
    slopes = torch.rand((b, h) if per_batch else (h,), generator=g)
    args = (q, k, v) if layout == "bhsd" else tuple(t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = at.attention(
        *args, causal=causal, softcap=softcap, alibi_slopes=slopes, layout=layout, mma="mma_sync",
        backend="emulator",
    )  # fmt: skip
    if layout == "bshd":
        out = out.transpose(1, 2)
    assert not out.isnan().any()
    want = reference(q, k, v, slopes, causal, d**-0.5, softcap)
    torch.testing.assert_close(out.double(), want, atol=2e-3, rtol=2e-3)


def test_bad_slopes_name_the_argument() -> None:
    q = torch.randn(1, 2, 16, 64).half()
    for bad in (torch.rand(3), torch.rand(2).half(), torch.rand(2, 2), [0.5, 0.25]):
        with pytest.raises(wc.WavecError, match=r"alibi_slopes must be a contiguous float32 tensor \[2\] or \[1, 2\]"):
            at.attention(q, q, q, alibi_slopes=bad, mma="mma_sync", backend="emulator")


@pytest.mark.parametrize("mma,target", [("mma_sync", "sm_80"), ("wgmma", "sm_90a"), ("mfma", "gfx942")])
def test_alibi_kernels_compile(mma: str, target: str) -> None:
    pytest.importorskip("iree.compiler")
    causal = "bottom_right"
    subs, waves = at.attention_config(128 if mma != "mfma" else 64, None, None, mma, causal)
    kernel = at.make_attention(wc.f16, "bhsd", causal, waves, mma, alibi="bh")
    backend = "rocm" if target.startswith("gfx") else "cuda"
    assert wc.compile(kernel, subs, target=target, backend=backend, cache=False).artifact.binary
