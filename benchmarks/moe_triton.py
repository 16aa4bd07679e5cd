"""The vLLM-algorithm baseline of ``benchmarks/moe.py``: vLLM's published fused-MoE algorithm written in
Triton here (this is not vLLM's code), with vLLM's H100 tile tables (``data/vllm_moe_configs``).

The algorithm: routing preparation (``moe_align_block_size``: vLLM's own op when vLLM is importable, else
wavec's, which implements the same contract at a comparable speed: ``benchmarks/moe_align.py``); one
grouped GEMM kernel used twice, each program a BLOCK_SIZE_M x BLOCK_SIZE_N tile of one token block (one
expert), A rows gathered by ``sorted_id // top_k``, the expert's weight rows, rows written at their
(token, slot) index, padding rows masked, programs past ``num_tokens_post_padded`` returning at once;
SiLU-and-mul between the two (a small Triton kernel); the down-projection multiplies by the routing
weight; the sum over the top-k slots (``torch.sum`` over [T, k, H], as vLLM's ``moe_sum``).  The tiles:
the table entry nearest to T, else vLLM's default rule.

    from benchmarks.moe_triton import vllm_fused_experts
"""

from __future__ import annotations

import functools
import json
import pathlib

import triton
import triton.language as tl

CONFIGS = pathlib.Path(__file__).parent / "data" / "vllm_moe_configs"


@triton.jit
def _moe_gemm(
    a, b, c, weights, sorted_ids, expert_ids, num_post_pad, em, n, k, num_valid, stride_am, stride_be, stride_bn,
    stride_cm, TOP_K: tl.constexpr, MUL_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """C[row] = A[sorted_id // TOP_K] @ B[expert].T (times the routing weight) for one tile."""
    pid = tl.program_id(0)
    rows_padded = tl.load(num_post_pad)
    pid_m_count = tl.cdiv(em, BLOCK_M)
    pid_n_count = tl.cdiv(n, BLOCK_N)
    group = pid // (GROUP_M * pid_n_count)
    first_m = group * GROUP_M
    group_size = tl.minimum(pid_m_count - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * pid_n_count)) % group_size
    pid_n = (pid % (GROUP_M * pid_n_count)) // group_size
    if pid_m * BLOCK_M >= rows_padded:
        return
    offs = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ids = tl.load(sorted_ids + offs)
    valid = ids < num_valid
    expert = tl.load(expert_ids + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_bn = offs_n % n  # wrapped columns are computed and not stored
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a + (ids[:, None] // TOP_K).to(tl.int64) * stride_am + offs_k[None, :]
    b_ptrs = b + expert * stride_be + offs_bn[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        left = k - start
        x = tl.load(a_ptrs, mask=valid[:, None] & (offs_k[None, :] < left), other=0.0)
        w = tl.load(b_ptrs, mask=offs_k[:, None] < left, other=0.0)
        acc = tl.dot(x, w, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if MUL_WEIGHT:
        acc = acc * tl.load(weights + ids, mask=valid, other=0.0)[:, None]
    c_ptrs = c + ids[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c.dtype.element_ty), mask=valid[:, None] & (offs_n[None, :] < n))


@triton.jit
def _silu_and_mul(h, out, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    g = tl.load(h + row * 2 * inter + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(h + row * 2 * inter + inter + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out + row * inter + cols, (g / (1.0 + tl.exp(-g)) * u).to(out.dtype.element_ty), mask=mask)


def default_config(tokens: int, experts: int) -> dict:
    """vLLM's default tiles for bf16/f16 without a tuned table."""
    if tokens <= experts:
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}


@functools.cache
def _table(experts: int, inter: int) -> dict | None:
    path = CONFIGS / f"E={experts},N={inter},device_name=NVIDIA_H100_80GB_HBM3.json"
    return {int(m): c for m, c in json.loads(path.read_text()).items()} if path.exists() else None


def config_for(tokens: int, experts: int, inter: int) -> tuple[dict, str]:
    """(tiles, "table" or "default"): the H100 table's entry nearest to ``tokens``, else the default."""
    table = _table(experts, inter)
    if table is None:
        return default_config(tokens, experts), "default"
    return table[min(table, key=lambda m: abs(m - tokens))], "table"


def _align():
    try:
        from vllm.model_executor.layers.fused_moe.moe_align_block_size import moe_align_block_size as vllm_align
    except Exception:  # noqa: BLE001 - vLLM is optional
        from wavec.kernels.moe_align import moe_align_block_size

        return lambda ids, block, experts: moe_align_block_size(ids, experts, block)[:3]
    return lambda ids, block, experts: vllm_align(ids, block, experts)[:3]


ALIGN = _align()


def _gemm(a, b, c, weights, sorted_ids, expert_ids, ntp, top_k: int, mul_weight: bool, cfg: dict) -> None:
    n, k = b.shape[1], b.shape[2]
    bm, bn = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"]
    grid = (triton.cdiv(sorted_ids.numel(), bm) * triton.cdiv(n, bn),)
    launch = {key: cfg[key] for key in ("num_warps", "num_stages") if key in cfg}
    _moe_gemm[grid](
        a, b, c, weights, sorted_ids, expert_ids, ntp, sorted_ids.numel(), n, k, weights.numel(), a.stride(0),
        b.stride(0), b.stride(1), c.stride(0), TOP_K=top_k, MUL_WEIGHT=mul_weight, BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_K=cfg["BLOCK_SIZE_K"], GROUP_M=cfg["GROUP_SIZE_M"], **launch,
    )  # fmt: skip


def vllm_fused_experts(hidden, w1, w2, topk_weights, topk_ids, config: dict | None = None):
    """The layer ``fused_experts`` computes (SiLU, no expert map), by vLLM's algorithm."""
    t, k = topk_ids.shape
    e, inter = w1.shape[0], w2.shape[2]
    cfg = config or config_for(t, e, inter)[0]
    sorted_ids, expert_ids, ntp = ALIGN(topk_ids, cfg["BLOCK_SIZE_M"], e)
    weights = topk_weights.reshape(-1).float()
    h = hidden.new_empty(t * k, 2 * inter)
    _gemm(hidden, w1, h, weights, sorted_ids, expert_ids, ntp, k, False, cfg)
    a = hidden.new_empty(t * k, inter)
    _silu_and_mul[(t * k, triton.cdiv(inter, 1024))](h, a, inter, BLOCK=1024)
    y = hidden.new_empty(t, k, hidden.shape[1])
    _gemm(a, w2, y.view(t * k, -1), weights, sorted_ids, expert_ids, ntp, 1, True, cfg)
    return y.sum(1)
