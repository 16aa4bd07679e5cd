"""Variable-length prefill attention on the emulator (bounds and race checks on) against a per-sequence
torch f32 reference: lengths 1, odd, 0 (queries and/or keys), more queries than keys, both causal
alignments, GQA / MQA, d64 and d128, f16 and bf16, mma.sync and wgmma; and the argument checks."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests.varlen_ref import packed_inputs, reference
from wavec.kernels.varlen import varlen_attention

TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}

CASES = [  # lens_q, lens_k, heads, kv_heads, head_dim, dtype, causal, mma
    ([1, 37, 0, 70], [5, 37, 3, 90], 4, 2, 64, torch.float16, False, "mma_sync"),
    ([1, 37, 0, 70], [5, 37, 3, 90], 4, 2, 64, torch.float16, "top_left", "mma_sync"),
    ([1, 37, 0, 70], [5, 37, 3, 90], 4, 2, 64, torch.float16, "bottom_right", "mma_sync"),
    ([9, 130, 2], [3, 65, 0], 2, 1, 64, torch.bfloat16, "bottom_right", "mma_sync"),  # MQA; lq > lk; no keys
    ([33, 1], [33, 200], 2, 2, 128, torch.bfloat16, "top_left", "mma_sync"),  # d128
    ([17, 0, 80], [17, 4, 80], 4, 1, 64, torch.float16, "bottom_right", "wgmma"),  # wgmma after exit_if
]


@pytest.mark.parametrize(
    "lens_q, lens_k, heads, kv_heads, head_dim, dtype, causal, mma",
    CASES,
    ids=[f"{c[5]}-d{c[4]}-h{c[2]}x{c[3]}-{c[6]}-{c[7]}".replace("torch.", "") for c in CASES],
)
def test_varlen_matches_per_sequence_reference(lens_q, lens_k, heads, kv_heads, head_dim, dtype, causal, mma):
    torch.manual_seed(len(lens_q) * 7 + head_dim)
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, heads, kv_heads, head_dim, dtype)
    out = varlen_attention(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, backend="emulator", mma=mma)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), reference(q, k, v, cu_q, cu_k, causal), rtol=TOL[dtype], atol=TOL[dtype])


WINDOWS = [  # lens_q, lens_k, causal, window, softcap
    ([1, 37, 70], [5, 37, 90], "bottom_right", (16, -1), 0.0),  # sliding window, flash-attn's causal
    ([40, 70], [40, 130], "top_left", (20, -1), 0.0),  # top-left window: the loop starts at its left edge
    ([40, 9, 70], [40, 30, 130], False, (8, 5), 0.0),  # a two-sided window around the bottom-right diagonal
    ([33, 70], [50, 70], "bottom_right", (-1, -1), 5.0),  # soft-cap
]


@pytest.mark.parametrize("lens_q, lens_k, causal, window, softcap", WINDOWS)
def test_windows_and_softcap(lens_q, lens_k, causal, window, softcap) -> None:
    torch.manual_seed(sum(lens_q))
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 4, 2, 64, torch.float16)
    out = varlen_attention(
        q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, window=window, softcap=softcap, backend="emulator"
    )
    want = reference(q, k, v, cu_q, cu_k, causal, window=window, softcap=softcap)
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


ALIBI = [(False, False, 0.0), (True, "bottom_right", 0.0), (True, False, 5.0)]  # per batch, causal, softcap


@pytest.mark.parametrize("per_batch,causal,softcap", ALIBI)
def test_alibi_slopes(per_batch: bool, causal, softcap: float) -> None:
    torch.manual_seed(11)
    lens_q, lens_k = [1, 37, 20], [5, 37, 90]
    q, k, v, cu_q, cu_k = packed_inputs(lens_q, lens_k, 4, 2, 64, torch.float16)
    slopes = torch.rand((3, 4) if per_batch else (4,))
    out = varlen_attention(
        q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, softcap=softcap, alibi_slopes=slopes,
        backend="emulator",
    )  # fmt: skip
    want = reference(q, k, v, cu_q, cu_k, causal, softcap=softcap, alibi_slopes=slopes)
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)
    with pytest.raises(wc.WavecError, match=r"alibi_slopes must be a contiguous float32 tensor \[4\] or \[3, 4\]"):
        varlen_attention(q, k, v, cu_q, cu_k, 37, 90, alibi_slopes=slopes.half(), backend="emulator")


def test_every_output_row_is_written_and_the_spare_row_stays_outside() -> None:
    """A max_seqlen_q larger than every length (tiles wholly past each sequence) and a scale."""
    torch.manual_seed(3)
    q, k, v, cu_q, cu_k = packed_inputs([5, 20], [7, 20], 2, 2, 64, torch.float16)
    out = varlen_attention(q, k, v, cu_q, cu_k, 150, 100, causal="top_left", scale=0.3, backend="emulator")
    want = reference(q, k, v, cu_q, cu_k, "top_left", scale=0.3)
    assert out.shape[0] == 25 and out.is_contiguous()
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


def _args():
    return packed_inputs([3, 4], [3, 4], 2, 2, 64, torch.float16)


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda a: {**a, "cu_seqlens_q": a["cu_seqlens_q"].long()}, "cu_seqlens_q must be an int32"),
        (lambda a: {**a, "cu_seqlens_k": a["cu_seqlens_k"][:2]}, "cu_seqlens_k has 2 entries"),
        (lambda a: {**a, "cu_seqlens_q": a["cu_seqlens_q"][None]}, "cu_seqlens_q must be 1-D"),
        (lambda a: {**a, "cu_seqlens_q": torch.tensor([0, 4, 3], dtype=torch.int32)}, "cu_seqlens_q decreases"),
        (lambda a: {**a, "cu_seqlens_k": torch.tensor([1, 3, 7], dtype=torch.int32)}, r"cu_seqlens_k\[0\] must be 0"),
        (lambda a: {**a, "cu_seqlens_k": torch.tensor([0, 3, 6], dtype=torch.int32)}, r"cu_seqlens_k\[-1\] = 6"),
        (lambda a: {**a, "max_seqlen_q": 3}, "sequence 1 has 4 rows > max_seqlen_q"),
        (lambda a: {**a, "max_seqlen_k": -1}, "max_seqlen_k must be an int"),
        (lambda a: {**a, "q": a["q"].float()}, "q must be float16 or bfloat16"),
        (lambda a: {**a, "k": a["k"].bfloat16()}, "k must be a 3-D"),
        (lambda a: {**a, "v": a["v"][:, :, :32].contiguous()}, "v has shape"),
        (lambda a: {**a, "q": a["q"][None]}, "q must be 3-D"),
        (lambda a: {**a, "q": torch.zeros(7, 3, 64, dtype=torch.float16)}, "3 query heads"),
        (lambda a: {**a, "q": torch.zeros(7, 2, 80, dtype=torch.float16)}, "head_dim must be one of"),
        (lambda a: {**a, "causal": "middle"}, "causal must be one of"),
        (lambda a: {**a, "window": (3,)}, "window: expected"),
        (lambda a: {**a, "softcap": -1.0}, "softcap must be"),
    ],
)
def test_bad_arguments_are_named(change, match) -> None:
    q, k, v, cu_q, cu_k = _args()
    a = {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k, "max_seqlen_q": 4, "max_seqlen_k": 4}
    a = change(a)
    with pytest.raises(wc.WavecError, match=match):
        varlen_attention(**a, backend="emulator")


def test_torch_operator_and_its_fake() -> None:
    """``torch.ops.wavec.varlen_attention`` on CPU tensors (the emulator), ``opcheck`` and FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import wavec.kernels.torch_ops  # noqa: F401 - registers torch.ops.wavec.*

    torch.manual_seed(5)
    q, k, v, cu_q, cu_k = packed_inputs([6, 11], [9, 11], 4, 2, 64, torch.float16)
    got = torch.ops.wavec.varlen_attention(q, k, v, cu_q, cu_k, 11, 11, "bottom_right")
    want = reference(q, k, v, cu_q, cu_k, "bottom_right")
    torch.testing.assert_close(got.float(), want, rtol=2e-3, atol=2e-3)
    torch.library.opcheck(torch.ops.wavec.varlen_attention.default, (q, k, v, cu_q, cu_k, 11, 11, "top_left", 0.2))
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in (q, k, v, cu_q, cu_k)]
        out = torch.ops.wavec.varlen_attention(*fake, 11, 11, "top_left")
    assert out.shape == q.shape and out.dtype == q.dtype
