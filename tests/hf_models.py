"""Tiny random-initialised transformers models (built from their config classes, no downloads) and the
checks the emulator and GPU integration tests share: logits against an f32 copy of the stock model, and
greedy generation equal to the stock model's up to its first near-tied step."""

from __future__ import annotations

import copy

import torch

VOCAB = 128


def build(
    family: str, hidden: int = 256, layers: int = 2, heads: int = 4, kv_heads: int = 2, experts: int = 4, **extra
):
    """An eval-mode f32 ``family`` ("llama", "qwen2", "mixtral", "qwen2_moe", "olmoe", "qwen3_moe",
    "gpt_oss") causal LM with head dim
    ``hidden // heads`` (MoE: ``experts`` experts, top-2); ``extra`` overrides config fields."""
    import transformers as tf

    torch.manual_seed(0)
    common = dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=256,
        intermediate_size=2 * hidden,
    )
    moe = dict(intermediate_size=hidden // 2, num_experts_per_tok=2)
    kinds = {
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, {}),
        "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM, {}),
        "mixtral": (tf.MixtralConfig, tf.MixtralForCausalLM, dict(moe, num_local_experts=experts)),
        "qwen2_moe": (
            tf.Qwen2MoeConfig,
            tf.Qwen2MoeForCausalLM,
            dict(moe, num_experts=experts, moe_intermediate_size=hidden // 2, shared_expert_intermediate_size=hidden),
        ),
        "olmoe": (tf.OlmoeConfig, tf.OlmoeForCausalLM, dict(moe, num_experts=experts)),
        "gpt_oss": (tf.GptOssConfig, tf.GptOssForCausalLM, dict(moe, num_local_experts=experts)),
        "qwen3_moe": (
            tf.Qwen3MoeConfig,
            tf.Qwen3MoeForCausalLM,
            dict(moe, num_experts=experts, moe_intermediate_size=hidden // 2),
        ),
    }
    config_cls, model_cls, specific = kinds[family]
    config = config_cls(**{**common, **specific, **extra})
    return model_cls(config).eval()


def lowered(model, dtype: torch.dtype, device: str = "cpu"):
    """A copy of ``model`` in ``dtype`` on ``device`` (the original stays the f32 reference)."""
    return copy.deepcopy(model).to(device=device, dtype=dtype)


def logits(model, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits.float()


def check_logits(wavec_out: torch.Tensor, stock_out: torch.Tensor, ref32: torch.Tensor) -> None:
    """wavec's logits are as close to the f32 model's as the stock low-precision model's (within 1.5x of its
    error, plus a bf16 ulp of the largest logit) in max and mean, and finite everywhere."""
    assert torch.isfinite(wavec_out).all()
    ulp = ref32.abs().max().item() * 2**-8
    stock_err, wavec_err = (stock_out - ref32).abs(), (wavec_out - ref32).abs()
    assert wavec_err.max() <= 1.5 * stock_err.max() + ulp, (wavec_err.max(), stock_err.max())
    assert wavec_err.mean() <= 1.5 * stock_err.mean() + ulp / 16, (wavec_err.mean(), stock_err.mean())


def greedy(model, ids: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(generated tokens [B, steps], each step's top-2 logit margin [B, steps]) of greedy decoding with a
    KV cache (prefill, then one-token decode steps)."""
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=steps,
            min_new_tokens=steps,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
    scores = torch.stack([s.float() for s in out.scores], 1)  # [B, steps, V]
    top2 = scores.topk(2, -1).values
    return out.sequences[:, ids.shape[1] :], top2[..., 0] - top2[..., 1]


def check_greedy(wavec_tokens: torch.Tensor, stock_tokens: torch.Tensor, margins: torch.Tensor, tie: float) -> int:
    """Tokens equal per row, except from a step whose stock top-2 margin is below ``tie`` (a near tie) where
    they differ: either token is right there and later steps see different prefixes; returns how many
    tokens were compared."""
    compared = 0
    for row in range(stock_tokens.shape[0]):
        for step in range(stock_tokens.shape[1]):
            compared += 1
            if margins[row, step] < tie:
                if wavec_tokens[row, step] != stock_tokens[row, step]:
                    break
                continue
            assert wavec_tokens[row, step] == stock_tokens[row, step], (row, step, wavec_tokens, stock_tokens)
    return compared
