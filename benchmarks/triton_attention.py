"""A fused-attention forward kernel in Triton, in the style of the Triton tutorial (online softmax in f32
with exp2, K and V tiles streamed through a pipelined loop), autotuned over a few tile / warp / stage
configurations: the Triton baseline of benchmarks/attention.py.

Layout [B, H, S, D] (any strides), grouped-query heads (kv head = q head // (H // KVH)), causal masks
aligned top-left like torch; causal loops run the blocks below the diagonal without masks and the
diagonal blocks with them.
"""

import torch
import triton
import triton.language as tl

_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bm, bn, w, s in [
        (128, 64, 4, 3),
        (128, 64, 8, 3),
        (128, 128, 8, 3),
        (64, 64, 4, 4),
        (128, 32, 4, 4),
        (64, 128, 4, 3),
    ]
]


@triton.jit
def _scan(
    acc,
    m_i,
    l_i,
    q,
    k_base,
    v_base,
    s_kn,
    s_vn,
    offs_m,
    start,
    stop,
    n_kv,
    qk_scale,
    BLOCK_N: tl.constexpr,
    HEAD: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    """Fold key blocks [start, stop) into the running (acc, m, l); masks only when asked."""
    offs_d = tl.arange(0, HEAD)
    for lo in range(start, stop, BLOCK_N):
        lo = tl.multiple_of(lo, BLOCK_N)
        offs_n = lo + tl.arange(0, BLOCK_N)
        keep_n = offs_n < n_kv
        kt = tl.load(k_base + offs_n[None, :] * s_kn + offs_d[:, None], mask=keep_n[None, :], other=0.0)
        s = tl.dot(q, kt) * qk_scale
        if MASKED:
            keep = keep_n[None, :]
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + offs_n[:, None] * s_vn + offs_d[None, :], mask=keep_n[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, m_i, l_i


@triton.autotune(configs=_CONFIGS, key=["n_q", "n_kv", "HEAD", "CAUSAL"])
@triton.jit
def _attention_fwd(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    s_qb,
    s_qh,
    s_qm,
    s_kb,
    s_kh,
    s_kn,
    s_vb,
    s_vh,
    s_vn,
    s_ob,
    s_oh,
    s_om,
    n_heads,
    group,
    n_q,
    n_kv,
    qk_scale,
    HEAD: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    kvh = h // group
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD)
    q_base = q_ptr + b * s_qb + h * s_qh
    q = tl.load(q_base + offs_m[:, None] * s_qm + offs_d[None, :], mask=offs_m[:, None] < n_q, other=0.0)
    k_base = k_ptr + b * s_kb + kvh * s_kh
    v_base = v_ptr + b * s_vb + kvh * s_vh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD], tl.float32)
    if CAUSAL:
        # blocks wholly below the diagonal need no mask; the diagonal blocks (and the ragged end) do
        stop = tl.minimum(n_kv, (pid_m + 1) * BLOCK_M)
        full = tl.minimum(pid_m * BLOCK_M, (n_kv // BLOCK_N) * BLOCK_N) // BLOCK_N * BLOCK_N
        acc, m_i, l_i = _scan(
            acc, m_i, l_i, q, k_base, v_base, s_kn, s_vn, offs_m, 0, full, n_kv, qk_scale, BLOCK_N, HEAD, False, True
        )
        acc, m_i, l_i = _scan(
            acc, m_i, l_i, q, k_base, v_base, s_kn, s_vn, offs_m, full, stop, n_kv, qk_scale, BLOCK_N, HEAD, True, True
        )
    else:
        full = (n_kv // BLOCK_N) * BLOCK_N
        acc, m_i, l_i = _scan(
            acc, m_i, l_i, q, k_base, v_base, s_kn, s_vn, offs_m, 0, full, n_kv, qk_scale, BLOCK_N, HEAD, False, False
        )
        acc, m_i, l_i = _scan(
            acc, m_i, l_i, q, k_base, v_base, s_kn, s_vn, offs_m, full, n_kv, n_kv, qk_scale, BLOCK_N, HEAD, True, False
        )
    out = acc / l_i[:, None]
    o_base = o_ptr + b * s_ob + h * s_oh
    tl.store(
        o_base + offs_m[:, None] * s_om + offs_d[None, :], out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < n_q
    )


def triton_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, scale: float | None = None
) -> torch.Tensor:
    """Attention for [B, H, S, D] tensors (the last dim contiguous), like torch SDPA with is_causal."""
    b, h, n_q, d = q.shape
    kvh, n_kv = k.shape[1], k.shape[2]
    scale = d**-0.5 if scale is None else scale
    o = torch.empty_like(q)

    def grid(meta):
        return (triton.cdiv(n_q, meta["BLOCK_M"]), b * h)

    _attention_fwd[grid](
        q,
        k,
        v,
        o,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        o.stride(0),
        o.stride(1),
        o.stride(2),
        h,
        h // kvh,
        n_q,
        n_kv,
        scale * 1.4426950408889634,
        HEAD=d,
        CAUSAL=causal,
    )
    return o
