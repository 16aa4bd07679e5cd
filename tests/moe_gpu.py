"""Shared pieces of the MoE GPU tests (swap-AB and split-K): seeded model-like inputs on the device and the
output check (every element written, the dtype's tolerance against the f32 reference)."""

from __future__ import annotations

import torch

TOL = {torch.bfloat16: 2e-2, torch.float16: 5e-3}


def inputs(
    t: int, h: int, i: int, e: int, k: int, dtype=torch.bfloat16, skew: float = 0.0, seed: int = 0,
    weight_scale: float = 1.0,
):  # fmt: skip
    """hidden [t, h], w1 [e, 2i, h], w2 [e, h, i], top-k weights (times ``weight_scale``) and int32 ids
    from softmax logits skewed by ``skew`` per expert rank."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(t, h, device="cuda", generator=g).to(dtype)
    w1 = (torch.randn(e, 2 * i, h, device="cuda", generator=g) / h**0.5).to(dtype)
    w2 = (torch.randn(e, h, i, device="cuda", generator=g) / i**0.5).to(dtype)
    logits = torch.randn(t, e, device="cuda", generator=g) - skew * torch.arange(e, device="cuda")
    weights, ids = torch.topk(torch.softmax(logits, -1), k)
    return x, w1, w2, weights * weight_scale, ids.to(torch.int32)


def check(got: torch.Tensor, want: torch.Tensor, dtype) -> None:
    assert torch.isfinite(got).all(), "an output element was not written"
    torch.testing.assert_close(got.float(), want, rtol=TOL[dtype], atol=TOL[dtype])
