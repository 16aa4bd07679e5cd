"""Route a Hugging Face transformers model's RMSNorms, attention and MoE experts through wavec kernels.

``enable(model)`` (transformers >= 4.57; 5.x has the experts interface):

* **RMSNorm**: every module whose class name ends in ``RMSNorm`` with a ``weight`` and a
  ``variance_epsilon`` / ``eps`` runs ``wavec.kernels.rms_norm`` (its ``forward`` is replaced on the
  instance).  Norms that scale by ``1 + weight`` (Gemma-style, found in the class's source) or have no
  weight keep their own forward, and each of their calls is counted as a fallback.
* **Attention**: registers ``"wavec"`` with transformers' ``AttentionInterface`` (and ``sdpa_mask`` under
  the same name in ``AttentionMaskInterface``, so unpadded prefill and decode get no mask) and sets the
  model's ``attn_implementation`` to it.  Prefill without a mask runs ``wavec.kernels.attention.attention``
  (causal where the module is); a single query token without a mask runs ``decode_attention``.  Masks
  (padding, chunked prefill), dropout, ``output_attentions``, sliding windows that bite, packed
  sequences, float32 and head dims wavec has no kernel for run transformers' SDPA function instead;
  softcap / attention sinks / position biases, which SDPA ignores or rejects, run the model's own
  ``eager_attention_forward``.
* **MoE experts**: registers ``"wavec"`` with transformers' ``ExpertsInterface`` (Mixtral, Qwen2-MoE,
  Qwen3-MoE, OLMoE, ... experts decorated with ``use_experts_implementation``) running
  ``wavec.kernels.fused_experts`` on ``gate_up_proj`` [E, 2I, H] / ``down_proj`` [E, H, I]; biases,
  transposed or interleaved weights, non-SiLU or custom gates, post-expert norms, expert parallelism and
  float32 run transformers' ``batched_mm`` experts instead.

Every call is counted: ``report()`` gives, per op kind, the calls that ran a wavec kernel and the
fallbacks by reason.  Nothing falls back silently.  ``enable(model, linears=True)`` also routes every
``torch.nn.Linear`` with f16/bf16 weights through ``wavec.kernels.linear`` (off by default: the GEMM is
still slower than cuBLAS).
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

NAME = "wavec"
_LOW = (torch.float16, torch.bfloat16)


@dataclass
class Report:
    """Calls through wavec (``calls[kind]``) and fallbacks (``fallbacks[kind][reason]``) since the last
    ``reset()``; ``modules`` counts what ``enable`` routed (``"rms_norm"``, ``"experts"``, ...)."""

    calls: Counter[str] = field(default_factory=Counter)
    fallbacks: dict[str, Counter[str]] = field(default_factory=dict)
    modules: Counter[str] = field(default_factory=Counter)

    def wavec(self, kind: str) -> None:
        self.calls[kind] += 1

    def fallback(self, kind: str, reason: str) -> None:
        self.fallbacks.setdefault(kind, Counter())[reason] += 1

    def total_fallbacks(self, kind: str | None = None) -> int:
        kinds = [kind] if kind is not None else list(self.fallbacks)
        return sum(sum(self.fallbacks.get(k, Counter()).values()) for k in kinds)

    def reset(self) -> None:
        """Zero the call and fallback counts (``modules`` stays: it describes the enabled model)."""
        self.calls.clear()
        self.fallbacks.clear()

    def __str__(self) -> str:
        lines = ["wavec transformers integration: kind, wavec calls, fallbacks (reason: count)"]
        for kind in sorted(set(self.calls) | set(self.fallbacks)):
            reasons = ", ".join(f"{r}: {n}" for r, n in sorted(self.fallbacks.get(kind, Counter()).items()))
            lines.append(f"  {kind}: {self.calls[kind]} wavec, {self.total_fallbacks(kind)} fallback ({reasons})")
        lines.append(f"  routed modules: {dict(self.modules)}")
        return "\n".join(lines)


_REPORT = Report()
DECODE_KERNELS = ("decode_attention", "attention")
_SETTINGS = {"decode": "decode_attention"}  # process-wide, as the registered attention function is


def report() -> Report:
    """The process-wide report (the object ``enable`` returns)."""
    return _REPORT


# ---- RMSNorm -------------------------------------------------------------------------------------------


def _norm_eps(module: torch.nn.Module) -> float | None:
    for attr in ("variance_epsilon", "eps"):
        eps = getattr(module, attr, None)
        if isinstance(eps, (int, float)):
            return float(eps)
    return None


def _norm_unsupported(module: torch.nn.Module) -> str | None:
    """Why ``module`` (a ``*RMSNorm``) cannot be replaced by ``x·rsqrt(mean(x²) + eps)·weight``, or None."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        return "no 1-D weight"
    if _norm_eps(module) is None:
        return "no variance_epsilon / eps"
    try:
        source = inspect.getsource(type(module).forward).replace(" ", "")
    except (OSError, TypeError):
        return "forward source unavailable"
    if any(s in source for s in ("1.0+self.weight", "1+self.weight", "self.weight+1")):
        return "scales by 1 + weight"
    return None


def _wavec_norm_forward(module: torch.nn.Module, original: Callable) -> Callable:
    from wavec.kernels import rms_norm

    eps = _norm_eps(module)

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        if hidden_states.dtype != module.weight.dtype:
            _REPORT.fallback("rms_norm", f"input {hidden_states.dtype} differs from weight {module.weight.dtype}")
            return original(hidden_states)
        _REPORT.wavec("rms_norm")
        return rms_norm(hidden_states, module.weight, eps)

    return forward


def _counted_forward(kind: str, reason: str, original: Callable) -> Callable:
    def forward(*args: Any, **kwargs: Any) -> Any:
        _REPORT.fallback(kind, reason)
        return original(*args, **kwargs)

    return forward


def _patch_norms(model: torch.nn.Module) -> None:
    for module in model.modules():
        if not type(module).__name__.endswith("RMSNorm") or hasattr(module, "_wavec_original_forward"):
            continue
        original = module.forward
        reason = _norm_unsupported(module)
        if reason is None:
            module.forward = _wavec_norm_forward(module, original)
            _REPORT.modules["rms_norm"] += 1
        else:
            module.forward = _counted_forward("rms_norm", reason, original)
            _REPORT.modules["rms_norm (fallback)"] += 1
        module._wavec_original_forward = original  # type: ignore[assignment]


# ---- linear layers -------------------------------------------------------------------------------------


def _wavec_linear_forward(module: torch.nn.Linear, original: Callable) -> Callable:
    from wavec.kernels import linear

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != module.weight.dtype:
            _REPORT.fallback("linear", f"input {x.dtype} differs from weight {module.weight.dtype}")
            return original(x)
        _REPORT.wavec("linear")
        return linear(x, module.weight, module.bias)

    return forward


def _patch_linears(model: torch.nn.Module) -> None:
    """Every ``torch.nn.Linear`` with f16/bf16 weights calls ``wavec.kernels.linear``; others keep their
    forward and count as fallbacks."""
    for module in model.modules():
        if type(module) is not torch.nn.Linear or hasattr(module, "_wavec_original_forward"):
            continue
        original = module.forward
        if module.weight.dtype in (torch.float16, torch.bfloat16):
            module.forward = _wavec_linear_forward(module, original)  # type: ignore[method-assign]
            _REPORT.modules["linear"] += 1
        else:
            module.forward = _counted_forward("linear", f"weight {module.weight.dtype}", original)  # type: ignore[method-assign]
            _REPORT.modules["linear (fallback)"] += 1
        module._wavec_original_forward = original  # type: ignore[assignment]


# ---- attention -----------------------------------------------------------------------------------------

# keyword arguments SDPA ignores or rejects: these run the model's eager attention
_EAGER_ONLY = ("softcap", "s_aux", "sinks", "position_bias")


def _attention_unsupported(module, query, key, value, mask, dropout, kwargs) -> str | None:
    from wavec.kernels.attention import HEAD_DIMS

    for name in _EAGER_ONLY:
        if kwargs.get(name) is not None:
            return name
    if mask is not None:
        return "attention mask (padding, chunked prefill or window)"
    if dropout and module.training:
        return "dropout"
    if kwargs.get("output_attentions"):
        return "output_attentions"
    window = kwargs.get("sliding_window")
    if window is not None and key.shape[2] > window:
        return "sliding window"
    if kwargs.get("cu_seq_lens_q") is not None:
        return "packed sequences"
    if query.dtype not in _LOW or key.dtype != query.dtype or value.dtype != query.dtype:
        return f"dtype {str(query.dtype).removeprefix('torch.')}"
    if query.shape[-1] not in HEAD_DIMS or value.shape[-1] not in HEAD_DIMS or key.shape[-1] != query.shape[-1]:
        return f"head dims {query.shape[-1]}/{value.shape[-1]}"
    if query.shape[1] % key.shape[1]:
        return "query heads not a multiple of key/value heads"
    return None


def _eager_mask(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, causal: bool):
    """The additive mask an ``eager_attention_forward`` expects, from what the ``"wavec"`` (``sdpa_mask``)
    mask function gave: None where SDPA would use ``is_causal`` (top-left, as SDPA's crop of trailing
    keys), a bool mask (True: attend) otherwise."""
    if mask is None:
        if not causal:
            return None
        mask = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=query.device).tril()[None, None]
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
        ~mask, torch.finfo(query.dtype).min
    )


def _fallback(module, reason: str, query, key, value, mask, dropout, scaling, is_causal, kwargs):
    """SDPA, or the module's own eager attention for what SDPA ignores or rejects (``_EAGER_ONLY``)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if reason not in _EAGER_ONLY:
        return sdpa_attention_forward(
            module, query, key, value, mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    eager = getattr(inspect.getmodule(type(module)), "eager_attention_forward", None)
    if eager is None:
        from wavec.errors import OptionError

        raise OptionError(
            option="attn_implementation",
            message=f"wavec attention: {reason} is not supported and {type(module).__name__}'s module has no "
            "eager_attention_forward to fall back to; use attn_implementation='eager'",
        )
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True)) and query.shape[2] > 1
    mask = _eager_mask(query, key, mask, causal)
    return eager(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)


def wavec_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: q [B, H, Sq, D], k / v [B, KVH, Skv, D]; returns
    ([B, Sq, H, Dv], None).  Causality follows ``sdpa_attention_forward``: causal only for Sq > 1 without a
    mask, keys past Sq cropped then (an empty static cache's prefill)."""
    reason = _attention_unsupported(module, query, key, value, attention_mask, dropout, kwargs)
    if reason is not None:
        _REPORT.fallback("attention", reason)
        return _fallback(module, reason, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs)
    q_len, kv_len = query.shape[2], key.shape[2]
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True)) and q_len > 1
    if causal and kv_len > q_len:
        key, value = key[:, :, :q_len], value[:, :, :q_len]
    if q_len == 1 and _SETTINGS["decode"] == "attention":
        from wavec.kernels.attention import attention

        # the cache as transformers keeps it, [B, KVH, S, D], any strides (a cropped or preallocated cache
        # is a view: the kernel's strided variant reads it in place)
        _REPORT.wavec("attention (decode)")
        o = attention(query, key, value, scale=scaling, layout="bhsd")
        return o.transpose(1, 2), None
    # [B, S, H, D] views (no copy of the cache: the kernels take strides); the output comes out [B, S, H, D]
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    if q_len == 1 and k.shape[-1] in (64, 128) and v.shape[-1] == k.shape[-1]:
        from wavec.kernels import decode_attention

        _REPORT.wavec("decode_attention")
        return decode_attention(q, k, v, scale=scaling), None
    from wavec.kernels.attention import attention

    _REPORT.wavec("attention")
    return attention(q, k, v, causal=causal, scale=scaling, layout="bshd"), None


# ---- MoE experts ---------------------------------------------------------------------------------------


def _is_silu(module: torch.nn.Module) -> bool:
    act = getattr(module, "act_fn", None)
    return isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"


def _experts_unsupported(module: torch.nn.Module, hidden: torch.Tensor) -> str | None:
    from transformers.integrations.moe import _default_apply_gate

    from wavec.kernels.fused_moe import MAX_EXPERTS

    flags = (
        ("no gate", not getattr(module, "has_gate", True)),
        ("bias", getattr(module, "has_bias", False)),
        ("transposed weights", getattr(module, "is_transposed", False)),
        ("interleaved gate/up", not getattr(module, "is_concatenated", True)),
        ("post-expert norm", getattr(module, "has_post_expert_norm", False)),
        ("expert parallel", getattr(module, "_is_expert_parallel", False)),
        ("custom gate", getattr(type(module), "_apply_gate", _default_apply_gate) is not _default_apply_gate),
        ("activation not SiLU", not _is_silu(module)),
    )
    for reason, flag in flags:
        if flag:
            return reason
    w1, w2 = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not isinstance(w1, torch.Tensor) or not isinstance(w2, torch.Tensor) or w1.dim() != 3:
        return "no gate_up_proj / down_proj tensors"
    if hidden.dtype not in _LOW or w1.dtype != hidden.dtype or w2.dtype != hidden.dtype:
        return f"dtype {str(hidden.dtype).removeprefix('torch.')}"
    experts, two_i, h = w1.shape
    if h % 8 or (two_i // 2) % 8 or experts >= MAX_EXPERTS:
        return f"sizes H={h}, I={two_i // 2}, E={experts}"
    return None


def wavec_experts_forward(
    module: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """transformers' experts-function signature: hidden [T, H], top-k ids and weights [T, k] -> [T, H]."""
    reason = _experts_unsupported(module, hidden_states)
    if reason is not None:
        from transformers.integrations.moe import batched_mm_experts_forward

        _REPORT.fallback("experts", reason)
        return batched_mm_experts_forward(module, hidden_states, top_k_index, top_k_weights)
    from wavec.kernels import fused_experts

    w1: torch.Tensor = module.gate_up_proj  # type: ignore[assignment]
    w2: torch.Tensor = module.down_proj  # type: ignore[assignment]
    _REPORT.wavec("experts")
    return fused_experts(
        hidden_states.contiguous(),
        w1.contiguous(),
        w2.contiguous(),
        top_k_weights.contiguous(),
        top_k_index.contiguous(),
    )


# ---- enable / disable ----------------------------------------------------------------------------------


def register() -> bool:
    """Register ``"wavec"`` with transformers' attention (and mask) interfaces and, where it exists, its
    experts interface; True when the experts interface exists."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, wavec_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    try:
        from transformers.integrations.moe import ExpertsInterface
    except ImportError:
        return False
    ExpertsInterface.register(NAME, wavec_experts_forward)
    return True


def _has_experts(model: Any) -> bool:
    return any(hasattr(m, "is_concatenated") and hasattr(m, "gate_up_proj") for m in model.modules())


def enable(
    model: Any,
    *,
    norms: bool = True,
    attention: bool = True,
    experts: bool = True,
    linears: bool = False,
    decode: str = "decode_attention",
) -> Report:
    """Route ``model``'s RMSNorms, attention and MoE experts through wavec (module docstring); returns the
    process-wide ``Report``.  ``linears``: its ``torch.nn.Linear`` layers too (off by default: wavec's
    GEMM is 0.90x cuBLAS over LLM shapes on an H100, so routing them would slow a model down until it is
    not).  ``decode``: the kernel for one-token steps (process-wide): "decode_attention"
    (split-KV flash decoding; the [B, KVH, S, D] cache is copied to [B, S, KVH, D] per call, as the kernel
    takes dense BSHD only) or "attention" (the prefill kernel with one query row, on the cache as it is)."""
    if decode not in DECODE_KERNELS:
        from wavec.errors import OptionError

        raise OptionError(option="decode", message=f"expected one of {DECODE_KERNELS}, got {decode!r}")
    _SETTINGS["decode"] = decode
    has_experts_interface = register()
    config = getattr(model, "config", None)
    if not hasattr(model, "_wavec_previous") and config is not None:
        previous = (getattr(config, "_attn_implementation", None), getattr(config, "_experts_implementation", None))
        model._wavec_previous = previous
    if norms:
        _patch_norms(model)
    if linears:
        _patch_linears(model)
    if attention:
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(NAME)
        else:
            model.config._attn_implementation = NAME
        _REPORT.modules["attention"] += 1
    if experts and _has_experts(model):
        if not has_experts_interface or not hasattr(model, "set_experts_implementation"):
            from wavec.errors import OptionError

            raise OptionError(option="experts", message="this transformers has no ExpertsInterface; pass experts=False")
        model.set_experts_implementation(NAME)
        _REPORT.modules["experts"] += sum(1 for m in model.modules() if hasattr(m, "is_concatenated"))
    return _REPORT


def disable(model: Any) -> None:
    """Undo ``enable``: the norms' and linears' own forwards and the attention / experts implementations set
    before."""
    for module in model.modules():
        if hasattr(module, "_wavec_original_forward"):
            del module.forward
            del module._wavec_original_forward
    attn, experts = getattr(model, "_wavec_previous", ("sdpa", "eager"))
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) == NAME:
        model.set_attn_implementation(attn or "sdpa")
    if getattr(config, "_experts_implementation", None) == NAME:
        model.set_experts_implementation(experts or "eager")
    if hasattr(model, "_wavec_previous"):
        del model._wavec_previous
    _REPORT.modules.clear()
