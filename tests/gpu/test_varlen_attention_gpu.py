"""GPU tier: variable-length prefill attention against a per-sequence torch f32 reference: mixed lengths
(1, odd, 0, up to 4000), more queries than keys, both causal alignments, MHA / GQA / MQA, d64 and d128,
f16 and bf16, mma.sync and wgmma (sm_90), sliding windows and the soft-cap; the output is NaN-filled
first, so every element must be written; the torch operator; cu_seqlens checks under WAVEC_CHECK_BOUNDS=1."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
import wavec.kernels.torch_ops  # noqa: F401 - registers torch.ops.wavec.*
import wavec.kernels.varlen as vl
from tests.varlen_ref import packed_inputs, reference

pytestmark = pytest.mark.gpu
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}

CASES = [  # lens_q, lens_k, heads, kv_heads, head_dim, dtype, causal
    ([1, 100, 0, 4000, 777, 333], None, 32, 8, 128, torch.bfloat16, "top_left"),
    ([1, 100, 0, 4000, 777, 333], None, 32, 8, 128, torch.bfloat16, False),
    ([5, 1000, 17], [300, 2048, 17], 16, 16, 64, torch.float16, "bottom_right"),  # chunked prefill
    ([129, 64], [63, 0], 8, 1, 64, torch.bfloat16, "bottom_right"),  # MQA; lq > lk; no keys
    ([3, 2500, 1], [3, 2500, 1], 28, 4, 128, torch.float16, "top_left"),  # GQA 7
]


def _nan_output(q):
    return torch.full((q.shape[0] + 1, *q.shape[1:]), float("nan"), dtype=q.dtype, device=q.device)


@pytest.mark.parametrize("mma", ["mma_sync", "wgmma"])
@pytest.mark.parametrize(
    "lens_q, lens_k, heads, kv_heads, head_dim, dtype, causal",
    CASES,
    ids=[f"{c[5]}-d{c[4]}-h{c[2]}x{c[3]}-{c[6]}-{len(c[0])}seq".replace("torch.", "") for c in CASES],
)
def test_varlen_matches_reference(monkeypatch, mma, lens_q, lens_k, heads, kv_heads, head_dim, dtype, causal):
    if mma == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90")
    monkeypatch.setattr(vl, "_new_output", _nan_output)
    lens_k = lens_k or lens_q
    torch.manual_seed(sum(lens_q) + head_dim)
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, heads, kv_heads, head_dim, dtype, "cuda")
    out = vl.varlen_attention(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, mma=mma)
    torch.cuda.synchronize()
    assert out.shape == q.shape and out.dtype == q.dtype
    assert not out.isnan().any(), "an output element was not written"
    torch.testing.assert_close(out.float(), reference(q, k, v, cu_q, cu_k, causal), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("mma", ["mma_sync", "wgmma"])
@pytest.mark.parametrize(
    "causal, window, softcap",
    [
        ("bottom_right", (256, -1), 0.0),
        ("top_left", (100, -1), 0.0),
        (False, (64, 32), 0.0),
        ("top_left", (-1, -1), 30.0),
    ],
)
def test_windows_and_softcap(monkeypatch, mma, causal, window, softcap) -> None:
    if mma == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90")
    monkeypatch.setattr(vl, "_new_output", _nan_output)
    torch.manual_seed(11)
    lens_q, lens_k = [1, 700, 0, 2049, 63], [1, 900, 5, 2049, 64]
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 16, 4, 128, torch.bfloat16, "cuda")
    out = vl.varlen_attention(q, k, v, cu_q, cu_k, 2049, 2049, causal=causal, window=window, softcap=softcap, mma=mma)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "an output element was not written"
    want = reference(q, k, v, cu_q, cu_k, causal, window=window, softcap=softcap)
    torch.testing.assert_close(out.float(), want, rtol=1.6e-2, atol=1.6e-2)


@pytest.mark.parametrize("mma", ["mma_sync", "wgmma"])
@pytest.mark.parametrize("per_batch,causal", [(False, False), (True, "bottom_right")])
def test_alibi_slopes(monkeypatch, mma, per_batch: bool, causal) -> None:
    if mma == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90")
    monkeypatch.setattr(vl, "_new_output", _nan_output)
    torch.manual_seed(5)
    lens_q, lens_k = [5, 1000, 17], [300, 2048, 17]
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 16, 4, 128, torch.bfloat16, "cuda")
    slopes = torch.rand((3, 16) if per_batch else (16,), device="cuda") * 0.1
    out = vl.varlen_attention(
        q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, alibi_slopes=slopes, mma=mma
    )  # fmt: skip
    want = reference(q, k, v, cu_q, cu_k, causal, alibi_slopes=slopes)
    torch.testing.assert_close(out.float(), want, rtol=1.6e-2, atol=1.6e-2)


def test_torch_op_matches_the_function() -> None:
    torch.manual_seed(1)
    q, k, v, cu_q, cu_k = packed_inputs([7, 300, 64], [7, 300, 64], 8, 2, 128, torch.bfloat16, "cuda")
    got = torch.ops.wavec.varlen_attention(q, k, v, cu_q, cu_k, 300, 300, "bottom_right")
    torch.testing.assert_close(got.float(), reference(q, k, v, cu_q, cu_k, "bottom_right"), rtol=1.6e-2, atol=1.6e-2)


def test_cu_seqlens_checked_under_check_bounds(monkeypatch) -> None:
    q, k, v, cu_q, cu_k = packed_inputs([3, 4], [3, 4], 2, 2, 64, torch.float16, "cuda")
    bad = torch.tensor([0, 5, 4], dtype=torch.int32, device="cuda")
    monkeypatch.setenv("WAVEC_CHECK_BOUNDS", "1")
    with pytest.raises(wc.WavecError, match="cu_seqlens_k decreases"):
        vl.varlen_attention(q, k, v, cu_q, bad, 4, 5)
