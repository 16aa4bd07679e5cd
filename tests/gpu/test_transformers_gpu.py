"""``wavec.integrations.transformers`` on CUDA at a larger size: 4-layer Llama / Qwen2 (head dim 128, GQA
4:1), Mixtral, Qwen2-MoE, OLMoE and Qwen3-MoE (8 experts, top-2), bf16, prefill 2×512.  Logits as close to the f32
model's as the stock (SDPA, grouped_mm) bf16 model's; every RMSNorm, attention and experts call runs a
wavec kernel (no fallback); greedy generation of 16 tokens with a KV cache equals the stock model's where
its logits are not near-tied, the decode steps through ``decode_attention`` or ``attention`` on the
uncopied cache."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[test]')")

from tests import hf_models as hm  # noqa: E402
from wavec.integrations import transformers as wt  # noqa: E402

pytestmark = pytest.mark.gpu
LAYERS = 4
SIZE = dict(hidden=2048, layers=LAYERS, heads=16, kv_heads=4, experts=8)


@pytest.fixture(autouse=True)
def _fresh_report():
    wt.report().reset()
    wt.report().modules.clear()
    torch.backends.cuda.matmul.allow_tf32 = False  # the f32 reference in full f32


def _models(family: str, **extra):
    ref = hm.build(family, **SIZE, **extra)
    stock, model = hm.lowered(ref, torch.bfloat16, "cuda"), hm.lowered(ref, torch.bfloat16, "cuda")
    return ref.to("cuda"), stock, model


def _ids(batch: int, seq: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, hm.VOCAB, (batch, seq), generator=g).cuda()


@pytest.mark.parametrize("family", ["llama", "qwen2", "mixtral", "qwen2_moe", "olmoe", "qwen3_moe"])
def test_prefill_logits_all_through_wavec(family):
    ref, stock, model = _models(family)
    ids = _ids(2, 512)
    report = wt.enable(model)
    hm.check_logits(hm.logits(model, ids), hm.logits(stock, ids), hm.logits(ref, ids))
    norms_per_layer = 4 if family in ("qwen3_moe", "olmoe") else 2  # q/k norms
    assert report.calls["rms_norm"] == norms_per_layer * LAYERS + 1
    assert report.calls["attention"] == LAYERS
    if family not in ("llama", "qwen2"):
        assert report.calls["experts"] == LAYERS
    assert report.total_fallbacks() == 0, str(report)


@pytest.mark.parametrize(
    ("family", "decode"), [("llama", "decode_attention"), ("llama", "attention"), ("mixtral", "decode_attention")]
)
def test_greedy_generation_16_tokens(family, decode):
    _, stock, model = _models(family)
    ids, steps = _ids(4, 128, seed=2), 16
    expected, margins = hm.greedy(stock, ids, steps)
    report = wt.enable(model, decode=decode)
    tokens, _ = hm.greedy(model, ids, steps)
    assert hm.check_greedy(tokens, expected, margins, tie=0.05) >= 16
    kind = "decode_attention" if decode == "decode_attention" else "attention (decode)"
    assert report.calls[kind] == LAYERS * (steps - 1)
    assert report.total_fallbacks() == 0, str(report)
