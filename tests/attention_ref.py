"""The reference the attention tests compare with: SDPA in f32 with the mask built explicitly in torch (not
wavec's ``MaskSpec`` logic), and the soft-cap and the rows that see no key spelled out."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def visible(sq: int, skv: int, align: str | None, left: int = -1, right: int = -1, device=None) -> torch.Tensor:
    """[sq, skv] bool: query i sees key j.  ``align``: None (no causal mask), "top_left" (j <= i) or
    "bottom_right" (j <= i + skv - sq); ``left`` / ``right``: flash-attn's window around the diagonal (-1:
    unbounded), whose diagonal is bottom-right unless ``align`` is "top_left"."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(skv, device=device)[None, :]
    diag = i if align == "top_left" else i + (skv - sq)
    ok = torch.ones(sq, skv, dtype=torch.bool, device=device)
    if align is not None:
        ok &= j <= diag
    if right >= 0:
        ok &= j <= diag + right
    if left >= 0:
        ok &= j >= diag - left
    return ok


def reference(q, k, v, ok: torch.Tensor | None = None, scale: float | None = None, softcap: float = 0.0):
    """O for BHSD q, k, v (GQA: k, v with fewer heads) in f32 where ``ok`` (broadcast [sq, skv]) says which
    keys each query sees; rows that see no key are 0 (wavec's and flash-attn's convention)."""
    g = q.shape[1] // k.shape[1]
    q, k, v = q.float(), k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if softcap:
        s = softcap * torch.tanh(q @ k.transpose(-1, -2) * (scale / softcap))
        if ok is not None:
            s = s.masked_fill(~ok, float("-inf"))
        out = torch.softmax(s, -1) @ v
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=ok, scale=scale)
    if ok is not None:
        out = torch.where(ok.any(-1)[:, None], out, 0.0)  # SDPA gives NaN (older torch) or 0 there
    return out
