"""The library kernels as PyTorch operators: ``torch.ops.wavec.<name>``.

Requires: torch >= 2.4 (``torch.library.custom_op``); importing this module registers the operators once.

Guarantees: each operator calls the library function of the same name (``wavec.kernels.*``), so it
validates its arguments the same way and picks the compiled kernel for the tensors' shapes and device
(CUDA tensors run the GPU kernel, CPU tensors the emulator).  Each has a fake implementation, so
``torch.compile(fullgraph=True)`` traces through it; in-place operators declare what they mutate.  There
is no autograd formula: backward through an operator raises.

Unlike :func:`wavec.register_torch_op`, which registers one compiled kernel with fixed tile sizes, these
operators dispatch per call, because the library picks its configuration from the shapes (the vector
width of a gather follows the row length).
"""

from __future__ import annotations

import torch

from . import decode, dense, elementwise, indexing, moe_align, moe_gemm, moe_routing, rows, varlen
from . import fused_moe as moe
from . import paged_attention as paged

__all__ = [
    "index_select", "embedding", "index_add_", "decode_attention", "paged_attention", "varlen_attention",
    "gather_scatter_matmul", "moe_align_block_size", "topk_softmax", "softmax", "rms_norm", "layer_norm",
    "silu_and_mul", "linear", "fused_experts",
    "fused_moe",
]  # fmt: skip

# its outputs' sizes depend on two integers, so the module registers it with its own schema
moe_align_block_size = moe_align.register_moe_align_op()


@torch.library.custom_op("wavec::index_select", mutates_args=())
def index_select(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``torch.index_select(x, 0, index)`` for a 2-D ``x`` (see :func:`wavec.kernels.indexing.index_select`)."""
    return indexing.index_select(x, index)


@index_select.register_fake
def _index_select_fake(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x.new_empty(index.shape[0], x.shape[1])


@torch.library.custom_op("wavec::embedding", mutates_args=())
def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``torch.nn.functional.embedding(ids, weight)`` (see :func:`wavec.kernels.indexing.embedding`)."""
    return indexing.embedding(ids, weight)


@embedding.register_fake
def _embedding_fake(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return weight.new_empty(*ids.shape, weight.shape[1])


@torch.library.custom_op("wavec::index_add_", mutates_args=("out",))
def index_add_(out: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> None:
    """``out.index_add_(0, index, src)`` in place (see :func:`wavec.kernels.indexing.index_add_`)."""
    indexing.index_add_(out, index, src)


@index_add_.register_fake
def _index_add_fake(out: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> None:
    return None


@torch.library.custom_op("wavec::decode_attention", mutates_args=())
def decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: torch.Tensor | None = None,
    scale: float | None = None,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Split-KV decode attention over a dense cache (see :func:`wavec.kernels.decode_attention.decode_attention`)."""
    return decode.decode_attention(q, k, v, seq_lens=seq_lens, scale=scale, num_splits=num_splits)


@decode_attention.register_fake
def _decode_attention_fake(q, k, v, seq_lens=None, scale=None, num_splits=None) -> torch.Tensor:
    return torch.empty_like(q)


@torch.library.custom_op("wavec::paged_attention", mutates_args=())
def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Decode attention over a paged KV cache (see :func:`wavec.kernels.paged_attention.paged_attention`)."""
    return paged.paged_attention(q, k_cache, v_cache, block_tables, seq_lens, scale=scale, num_splits=num_splits)


@paged_attention.register_fake
def _paged_attention_fake(q, k_cache, v_cache, block_tables, seq_lens, scale=None, num_splits=None) -> torch.Tensor:
    return torch.empty_like(q)


@torch.library.custom_op("wavec::varlen_attention", mutates_args=())
def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: str = "none",
    scale: float | None = None,
    window_left: int = -1,
    window_right: int = -1,
    softcap: float = 0.0,
) -> torch.Tensor:
    """Prefill attention over packed variable-length sequences (see :func:`wavec.kernels.varlen.varlen_attention`);
    ``causal``: "none", "top_left" or "bottom_right" (a schema takes no bool-or-string)."""
    mask = False if causal == "none" else causal
    return varlen.varlen_attention(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        causal=mask, scale=scale, window=(window_left, window_right), softcap=softcap,
    )  # fmt: skip


@varlen_attention.register_fake
def _varlen_attention_fake(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    causal="none",
    scale=None,
    window_left=-1,
    window_right=-1,
    softcap=0.0,
) -> torch.Tensor:
    return torch.empty_like(q)


@torch.library.custom_op("wavec::gather_scatter_matmul", mutates_args=("out",))
def gather_scatter_matmul(
    x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, weights: torch.Tensor, out: torch.Tensor, top_k: int
) -> None:
    """``out[ids // top_k] += weights[:, None] * (x[ids // top_k] @ w.T)`` in place
    (see :func:`wavec.kernels.moe_gemm.gather_scatter_matmul`)."""
    moe_gemm.gather_scatter_matmul(x, ids, w, weights, out, top_k=top_k)


@gather_scatter_matmul.register_fake
def _gather_scatter_matmul_fake(x, ids, w, weights, out, top_k) -> None:
    return None


@torch.library.custom_op("wavec::topk_softmax", mutates_args=())
def topk_softmax(gating_logits: torch.Tensor, k: int, renormalize: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(topk_weights f32 [T, k], topk_ids int32 [T, k])`` of ``softmax(gating_logits)``
    (see :func:`wavec.kernels.moe_routing.topk_softmax`)."""
    return moe_routing.topk_softmax(gating_logits, k, renormalize)


@topk_softmax.register_fake
def _topk_softmax_fake(gating_logits, k, renormalize=False) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = gating_logits.shape[0]
    new = gating_logits.new_empty
    return new(tokens, k, dtype=torch.float32), new(tokens, k, dtype=torch.int32)


@torch.library.custom_op("wavec::softmax", mutates_args=())
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``torch.softmax(x, dim)`` along the last dim (see :func:`wavec.kernels.rows.softmax`)."""
    return rows.softmax(x, dim)


@softmax.register_fake
def _softmax_fake(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("wavec::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim (see :func:`wavec.kernels.rows.rms_norm`)."""
    return rows.rms_norm(x, weight, eps)


@rms_norm.register_fake
def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("wavec::layer_norm", mutates_args=())
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """LayerNorm over the last dim (see :func:`wavec.kernels.rows.layer_norm`)."""
    return rows.layer_norm(x, weight, bias, eps)


@layer_norm.register_fake
def _layer_norm_fake(x: torch.Tensor, weight=None, bias=None, eps: float = 1e-5) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("wavec::silu_and_mul", mutates_args=())
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` (see :func:`wavec.kernels.elementwise.silu_and_mul`)."""
    return elementwise.silu_and_mul(x)


@silu_and_mul.register_fake
def _silu_and_mul_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], x.shape[-1] // 2)


@torch.library.custom_op("wavec::fused_experts", mutates_args=())
def fused_experts(
    hidden: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu",
    apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1,
    expert_map: torch.Tensor | None = None,
    deterministic: bool = True,
) -> torch.Tensor:
    """The MoE experts layer, a new [T, H] tensor (see :func:`wavec.kernels.fused_moe.fused_experts`; the
    tiles are the static choice: no ``config``, ``dispatch`` or ``out`` through the operator)."""
    return moe.fused_experts(
        hidden, w1, w2, topk_weights, topk_ids, activation=activation,
        apply_router_weight_on_input=apply_router_weight_on_input, global_num_experts=global_num_experts,
        expert_map=expert_map, deterministic=deterministic,
    )  # fmt: skip


@fused_experts.register_fake
def _fused_experts_fake(hidden, w1, w2, topk_weights, topk_ids, *args) -> torch.Tensor:
    return torch.empty_like(hidden)


@torch.library.custom_op("wavec::fused_moe", mutates_args=())
def fused_moe(
    hidden: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, router_logits: torch.Tensor, top_k: int, renormalize: bool
) -> torch.Tensor:
    """Softmax routing, top-k, then the experts (see :func:`wavec.kernels.fused_moe.fused_moe`)."""
    return moe.fused_moe(hidden, w1, w2, router_logits, top_k, renormalize)


@fused_moe.register_fake
def _fused_moe_fake(hidden, w1, w2, router_logits, top_k, renormalize) -> torch.Tensor:
    return torch.empty_like(hidden)


@torch.library.custom_op("wavec::linear", mutates_args=())
def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.nn.functional.linear`` (see :func:`wavec.kernels.dense.linear`)."""
    return dense.linear(x, weight, bias)


@linear.register_fake
def _linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[0])
