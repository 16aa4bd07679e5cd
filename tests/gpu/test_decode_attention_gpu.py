"""GPU tier: split-KV decode attention over a dense cache against torch SDPA in f32 (bottom-right causal
mask within the new tokens): real sizes (S up to 8192, Llama-class GQA, MHA, MQA), odd and ragged
lengths (1, q_len itself, one past a tile), q_len 1..16, the split rule and explicit splits up to 64,
both head dims and dtypes; cache rows past each sequence's end hold large garbage.  The kernels write
into NaN-filled partials and outputs, so every element must be written; the operator runs in a CUDA
graph; bad lengths are named under WAVEC_CHECK_BOUNDS=1."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
import wavec.kernels.torch_ops  # noqa: F401 - registers torch.ops.wavec.*
from tests import dyn_kernels as dk
from wavec.kernels import decode

pytestmark = pytest.mark.gpu
TOL = {"f16": 2e-3, "bf16": 1.6e-2}

CASES = [  # dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits (None: the rule)
    (wc.bf16, [2048], 2048, 1, 32, 8, 128, None),  # B = 1, Llama-3 8B GQA 4
    (wc.bf16, [8192], 8192, 1, 32, 32, 128, None),  # B = 1, MHA
    (wc.f16, [8191, 1, 33, 4097], 8192, 1, 32, 8, 128, None),  # ragged, lengths 1 and odd
    (wc.bf16, [777, 1000, 3], 1024, 3, 32, 8, 128, 5),  # q_len 3: 12 rows, one length = q_len
    (wc.f16, [4096] * 6, 4096, 4, 64, 8, 128, 64),  # GQA 8, 4 new tokens: 32 rows, 64 splits
    (wc.bf16, [16, 1200, 31], 1200, 16, 16, 1, 64, None),  # MQA, 16 new tokens: 256 rows over 4 tiles
    (wc.f16, [100, 3000], 3001, 7, 28, 4, 128, 3),  # GQA 7: rows not a power of two
    (wc.bf16, [5000, 129], 5000, 2, 8, 8, 64, 1),  # d64, one split
]


@pytest.mark.parametrize(
    "dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits",
    CASES,
    ids=[f"{c[0].name}-b{len(c[1])}-s{c[2]}-q{c[3]}-h{c[4]}x{c[5]}-d{c[6]}-sp{c[7]}" for c in CASES],
)
def test_decode_attention_matches_sdpa(dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits) -> None:
    q, k, v, lens = dk.dense_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, dtype, s_max, "cuda")
    want = dk.reference_decode_attention(q, k, v, lens)
    out = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=splits)
    torch.cuda.synchronize()
    assert out.dtype == q.dtype and out.shape == q.shape
    assert not out.isnan().any(), "an output element was not written, or a garbage row leaked in"
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])


@pytest.mark.parametrize("splits", [1, 4, 17])
def test_every_partial_and_output_element_is_written(splits: int) -> None:
    """The two-launch path's kernels by hand into NaN-filled partials and output (one split: the direct
    kernel into the output alone)."""
    q, k, v, lens = dk.dense_kv_inputs([3000, 17, 3], 3, 32, 8, 128, wc.bf16, 3072, "cuda")
    decode.decode_attention(q, k, v, seq_lens=lens, num_splits=splits, one_launch=False)
    run = next(
        r
        for r in decode._DISPATCH.table.values()
        if r.out_shape == tuple(q.shape) and r.splits == splits and r.counters is None
    )
    want = dk.reference_decode_attention(q, k, v, lens, scale=0.08)
    if run.direct:
        out = torch.full_like(q, float("nan"))
        run.split(q, k, v, lens, out, 0.08)
        torch.cuda.synchronize()
        assert splits == 1 and not out.isnan().any()
        torch.testing.assert_close(out.float(), want, rtol=1.6e-2, atol=1.6e-2)
        return
    o_part = torch.full(run.o_shape, float("nan"), device="cuda")
    m_part, l_part = (torch.full(run.s_shape, float("nan"), device="cuda") for _ in range(2))
    out = torch.full_like(q, float("nan"))
    run.split(q, k, v, lens, o_part, m_part, l_part, 0.08)
    b, s, r = run.flat
    run.combine(o_part.view(b, s, r, 128), m_part.view(b, s, r), l_part.view(b, s, r), out.view(b, r, 128))
    torch.cuda.synchronize()
    assert not (o_part.isnan().any() or m_part.isnan().any() or l_part.isnan().any() or out.isnan().any())
    torch.testing.assert_close(out.float(), want, rtol=1.6e-2, atol=1.6e-2)


def test_one_split_direct_in_a_cuda_graph() -> None:
    """B=64 over 8 kv heads: the split rule's one split, written by the split kernel itself; replayed
    into a NaN-filled output with new inputs, and equal to the split-then-combine path."""
    q, k, v, lens = dk.dense_kv_inputs([2048 - 29 * i for i in range(64)], 1, 32, 8, 128, wc.bf16, 2048, "cuda")
    assert decode.num_splits_for(64, 8, 1, 2048, decode.sm_count(q)) == 1
    out = decode.decode_attention(q, k, v, seq_lens=lens)
    run = next(r for r in decode._DISPATCH.table.values() if r.out_shape == tuple(q.shape) and r.direct)
    assert run.combine is None and not run.spaces
    torch.testing.assert_close(out.float(), dk.reference_decode_attention(q, k, v, lens), rtol=1.6e-2, atol=1.6e-2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = decode.decode_attention(q, k, v, seq_lens=lens)
    q.copy_(torch.randn_like(q))
    replayed.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert not replayed.isnan().any()
    want = dk.reference_decode_attention(q, k, v, lens)
    torch.testing.assert_close(replayed.float(), want, rtol=1.6e-2, atol=1.6e-2)


def test_torch_op_in_a_cuda_graph() -> None:
    q, k, v, lens = dk.dense_kv_inputs([2048, 300], 1, 32, 8, 128, wc.f16, 2048, "cuda")
    want = dk.reference_decode_attention(q, k, v, lens)
    op = torch.ops.wavec.decode_attention
    torch.testing.assert_close(op(q, k, v, lens).float(), want, rtol=2e-3, atol=2e-3)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(q, k, v, lens)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


def test_bad_lengths_are_named_under_check_bounds(monkeypatch) -> None:
    q, k, v, lens = dk.dense_kv_inputs([20, 40], 2, 4, 2, 64, wc.f16, 64, "cuda")
    monkeypatch.setenv("WAVEC_CHECK_BOUNDS", "1")
    for bad, text in (([20, 65], r"seq_lens\[1\] = 65"), ([1, 40], r"seq_lens\[0\] = 1")):
        with pytest.raises(wc.WavecError, match=rf"decode_attention: {text} must be in \[q_len, S_max\] = \[2, 64\]"):
            decode.decode_attention(q, k, v, seq_lens=torch.tensor(bad, dtype=torch.int32, device="cuda"))
    out = decode.decode_attention(q, k, v, seq_lens=lens)
    torch.testing.assert_close(out.float(), dk.reference_decode_attention(q, k, v, lens), rtol=2e-3, atol=2e-3)


def test_alibi_slopes_on_gpu() -> None:
    """ALiBi in split-KV decode (dense) at a serving-like shape, against the f32 reference."""
    q, k, v, lens = dk.dense_kv_inputs([3000, 17, 3], 2, 32, 8, 128, wc.bf16, 3072, "cuda")
    slopes = torch.rand(32, device="cuda") * 0.05
    out = decode.decode_attention(q, k, v, seq_lens=lens, alibi_slopes=slopes)
    want = dk.reference_decode_attention(q, k, v, lens, alibi_slopes=slopes)
    torch.testing.assert_close(out.float(), want, rtol=1.6e-2, atol=1.6e-2)
