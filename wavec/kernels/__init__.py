"""The wavec kernel library (written against the public API only).

``from wavec.kernels import matmul, index_select, ...``: each name is imported from its module on first use,
so ``import wavec.kernels`` stays light.  ``attention``, ``paged_attention`` and ``fused_moe`` are their
modules' names (``wavec.kernels.attention.attention``, ``wavec.kernels.fused_moe.fused_moe``): a package
attribute named like a submodule is the submodule once that is imported, so they are not exported here.
Each also exists as ``torch.ops.wavec.<name>`` once ``wavec.kernels.torch_ops`` is imported.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "matmul": "gemm",
    "register_attention_op": "attention",
    "decode_attention": "decode",
    "varlen_attention": "varlen",
    "index_select": "indexing",
    "embedding": "indexing",
    "index_add_": "indexing",
    "gather_scatter_matmul": "moe_gemm",
    "moe_align_block_size": "moe_align",
    "topk_softmax": "moe_routing",
    "softmax": "rows",
    "rms_norm": "rows",
    "layer_norm": "rows",
    "silu_and_mul": "elementwise",
    "linear": "dense",
    "fused_experts": "fused_moe",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
