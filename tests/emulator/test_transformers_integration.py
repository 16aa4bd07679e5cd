"""``wavec.integrations.transformers`` on the emulator: tiny random-initialised Llama, Qwen2, Mixtral,
Qwen2-MoE (shared expert), OLMoE, Qwen3-MoE (q/k RMSNorms) and GPT-OSS (sinks, biased experts: fallbacks)
models built from their config classes, bf16.  Logits are as close to the f32 model's as the stock bf16
model's; the report counts the wavec calls (RMSNorm, prefill attention, decode attention, experts) and the
fallbacks with their reasons (padding masks, float32, sinks, expert biases, ``1 + weight`` norms); greedy
generation equals the stock model's where its logits are not near-tied; ``disable`` restores the stock
forward."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[test]')")

from tests import hf_models as hm  # noqa: E402
from wavec.integrations import transformers as wt  # noqa: E402

LAYERS = 2


@pytest.fixture(autouse=True)
def _fresh_report():
    wt.report().reset()
    wt.report().modules.clear()


def _ids(batch: int = 2, seq: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, hm.VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_dense_logits_and_report(family):
    ref = hm.build(family)
    stock, model = hm.lowered(ref, torch.bfloat16), hm.lowered(ref, torch.bfloat16)
    ids = _ids()
    report = wt.enable(model)
    hm.check_logits(hm.logits(model, ids), hm.logits(stock, ids), hm.logits(ref, ids))
    assert report.calls == {"rms_norm": 2 * LAYERS + 1, "attention": LAYERS}
    assert report.total_fallbacks() == 0
    assert report.modules == {"rms_norm": 2 * LAYERS + 1, "attention": 1}
    assert model.config._attn_implementation == "wavec"


@pytest.mark.parametrize("decode", ["decode_attention", "attention"])
def test_llama_greedy_generation_and_decode(decode):
    ref = hm.build("llama")
    stock, model = hm.lowered(ref, torch.bfloat16), hm.lowered(ref, torch.bfloat16)
    ids, steps = _ids(batch=1, seq=16, seed=3), 8
    expected, margins = hm.greedy(stock, ids, steps)
    report = wt.enable(model, decode=decode)
    tokens, _ = hm.greedy(model, ids, steps)
    assert hm.check_greedy(tokens, expected, margins, tie=0.05) >= 4
    decode_kind = "decode_attention" if decode == "decode_attention" else "attention (decode)"
    assert report.calls == {
        "attention": LAYERS,  # the prefill
        decode_kind: LAYERS * (steps - 1),  # one-token steps over the KV cache
        "rms_norm": (2 * LAYERS + 1) * steps,
    }
    assert report.total_fallbacks() == 0


def test_decode_option_is_checked():
    from wavec.errors import OptionError

    with pytest.raises(OptionError, match="decode"):
        wt.enable(hm.build("llama", layers=1), decode="paged")


def test_padding_mask_falls_back_to_sdpa_and_is_counted():
    ref = hm.build("llama")
    stock, model = hm.lowered(ref, torch.bfloat16), hm.lowered(ref, torch.bfloat16)
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding in the first sequence
    report = wt.enable(model)
    out, expected = hm.logits(model, ids, mask), hm.logits(stock, ids, mask)
    keep = mask.bool()  # the padded positions' logits are meaningless in both
    hm.check_logits(out[keep], expected[keep], hm.logits(ref, ids, mask)[keep])
    assert report.calls["attention"] == 0
    assert report.fallbacks["attention"] == {"attention mask (padding, chunked prefill or window)": LAYERS}
    assert report.calls["rms_norm"] == 2 * LAYERS + 1


def test_float32_attention_and_experts_fall_back():
    ref = hm.build("mixtral")
    model = hm.lowered(ref, torch.float32)
    ids = _ids(batch=1)
    report = wt.enable(model)
    torch.testing.assert_close(hm.logits(model, ids), hm.logits(ref, ids), atol=1e-4, rtol=1e-4)
    assert report.fallbacks["attention"] == {"dtype float32": LAYERS}
    assert report.fallbacks["experts"] == {"dtype float32": LAYERS}
    assert report.calls == {"rms_norm": 2 * LAYERS + 1}  # rms_norm has an f32 kernel


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe", "olmoe", "qwen3_moe"])
def test_moe_experts_through_fused_experts(family):
    ref = hm.build(family)
    stock, model = hm.lowered(ref, torch.bfloat16), hm.lowered(ref, torch.bfloat16)
    ids = _ids()
    report = wt.enable(model)
    hm.check_logits(hm.logits(model, ids), hm.logits(stock, ids), hm.logits(ref, ids))
    assert report.calls["experts"] == LAYERS
    assert report.calls["attention"] == LAYERS
    assert report.modules["experts"] == LAYERS
    assert report.total_fallbacks() == 0, str(report)


def test_gpt_oss_sinks_and_biased_experts_fall_back_counted():
    """Attention sinks run the model's eager attention (with the causal mask SDPA would imply), biased
    transposed experts with a clamped gate run transformers' batched_mm: logits and greedy tokens as stock."""
    ref = hm.build("gpt_oss")
    stock, model = hm.lowered(ref, torch.bfloat16), hm.lowered(ref, torch.bfloat16)
    ids = _ids()
    expected, margins = hm.greedy(stock, ids[:1], 4)
    report = wt.enable(model)
    hm.check_logits(hm.logits(model, ids), hm.logits(stock, ids), hm.logits(ref, ids))
    assert report.calls == {"rms_norm": 2 * LAYERS + 1}
    assert report.fallbacks == {"attention": {"s_aux": LAYERS}, "experts": {"bias": LAYERS}}
    tokens, _ = hm.greedy(model, ids[:1], 4)
    assert hm.check_greedy(tokens, expected, margins, tie=0.05) >= 2


def test_offset_rms_norm_is_counted_not_replaced():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    net = torch.nn.Sequential(LlamaRMSNorm(96), GemmaRMSNorm(96)).to(torch.bfloat16)
    torch.nn.init.normal_(net[0].weight)
    torch.nn.init.normal_(net[1].weight)
    x = torch.randn(3, 5, 96).to(torch.bfloat16)
    with torch.no_grad():
        expected = net(x)
        report = wt.enable(net, attention=False)
        out = net(x)

    def norm(v: torch.Tensor, eps: float) -> torch.Tensor:
        v = v.float()
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)

    first = (norm(x, net[0].variance_epsilon) * net[0].weight.float()).to(torch.bfloat16)
    ref = norm(first, net[1].eps) * (1.0 + net[1].weight.float())
    torch.testing.assert_close(out.float(), ref, atol=6e-2, rtol=2e-2)
    torch.testing.assert_close(out, expected, atol=3e-2, rtol=2e-2)
    assert report.calls == {"rms_norm": 1}
    assert report.fallbacks["rms_norm"] == {"scales by 1 + weight": 1}
    assert report.modules == {"rms_norm": 1, "rms_norm (fallback)": 1}


def test_disable_restores_stock():
    ref = hm.build("llama", layers=1)
    model = hm.lowered(ref, torch.bfloat16)
    ids = _ids(batch=1)
    expected = hm.logits(model, ids)
    wt.enable(model)
    wt.disable(model)
    report = wt.report()
    report.reset()
    assert torch.equal(hm.logits(model, ids), expected)
    assert model.config._attn_implementation == "sdpa"
    assert report.calls == {} and report.total_fallbacks() == 0


def test_linears_opt_in():
    """``linears=True``: every projection and the LM head run ``wavec.kernels.linear``, counted."""
    ref = hm.build("llama")
    stock, model = hm.lowered(ref, torch.bfloat16), hm.lowered(ref, torch.bfloat16)
    ids = _ids()
    report = wt.enable(model, linears=True)
    hm.check_logits(hm.logits(model, ids), hm.logits(stock, ids), hm.logits(ref, ids))
    per_layer = 7  # q, k, v, o, gate, up, down
    assert report.calls["linear"] == per_layer * LAYERS + 1 and report.modules["linear"] == per_layer * LAYERS + 1
    assert report.total_fallbacks() == 0
    wt.disable(model)
    assert all(not hasattr(m, "_wavec_original_forward") for m in model.modules())
