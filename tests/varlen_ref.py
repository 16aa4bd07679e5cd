"""Inputs and a per-sequence torch f32 reference for the variable-length attention tests (emulator, GPU)."""

from __future__ import annotations

import torch


def packed_inputs(lens_q, lens_k, heads: int, kv_heads: int, head_dim: int, dtype, device="cpu"):
    """Random q [total_q, heads, D], k / v [total_k, kv_heads, D] and int32 cu_seqlens of the lengths."""
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32, device=device)
    q = torch.randn(sum(lens_q), heads, head_dim, device=device).to(dtype)
    k = torch.randn(sum(lens_k), kv_heads, head_dim, device=device).to(dtype)
    v = torch.randn(sum(lens_k), kv_heads, head_dim, device=device).to(dtype)
    return q, k, v, cu_q, cu_k


def reference(
    q, k, v, cu_q, cu_k, causal=False, scale=None, window=(-1, -1), softcap=0.0, alibi_slopes=None
) -> torch.Tensor:
    """softmax(q kᵀ · scale) v per sequence in f32 (a query that sees no key: 0); ``window``, ``softcap`` and
    ``alibi_slopes`` ([H] or [B, H]) as flash-attn's (the window's diagonal bottom-right unless causal says
    top-left; ALiBi's always bottom-right)."""
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    group = q.shape[1] // k.shape[1]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    bq, bk = cu_q.tolist(), cu_k.tolist()
    for b in range(len(bq) - 1):
        qs = q[bq[b] : bq[b + 1]].float().transpose(0, 1)
        ks = k[bk[b] : bk[b + 1]].float().repeat_interleave(group, 1).transpose(0, 1)
        vs = v[bk[b] : bk[b + 1]].float().repeat_interleave(group, 1).transpose(0, 1)
        lq, lk = qs.shape[1], ks.shape[1]
        if not lq:
            continue
        i = torch.arange(lq, device=q.device)[:, None]
        j = torch.arange(lk, device=q.device)[None, :]
        diag = i if causal == "top_left" else i + lk - lq
        see = j <= diag if causal else (j >= 0) & (i >= 0)
        if window[0] >= 0:
            see &= j >= diag - window[0]
        if window[1] >= 0 and not causal:
            see &= j <= diag + window[1]
        s = qs @ ks.transpose(1, 2) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        if alibi_slopes is not None:
            slope = (alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes).float().view(-1, 1, 1)
            s = s - slope * (i + lk - lq - j).abs()
        s = s.masked_fill(~see, float("-inf"))
        out[bq[b] : bq[b + 1]] = (torch.softmax(s, -1).nan_to_num(0.0) @ vs).transpose(0, 1)
    return out
