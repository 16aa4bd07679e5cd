"""GPU tier: paged decode attention against torch in f32 over the gathered cache, fresh random block
tables (permutations of the cache's blocks), ragged lengths (1, multiples of the page size, long), q_len
1..16, MHA / GQA / MQA, both head dims and page sizes 16 and 32; garbage block-table entries and NaN cache
rows past each sequence's end; outputs NaN-filled first, so every element must be written."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
import wavec.kernels.torch_ops  # noqa: F401 - registers torch.ops.wavec.*
from tests import dyn_kernels as dk
from wavec.kernels.paged_attention import paged_attention

pytestmark = pytest.mark.gpu
TOL = {"f16": 2e-3, "bf16": 1.6e-2}

CASES = [  # dtype, seq_lens, q_len, heads, kv_heads, head_dim, page, splits (None: the rule)
    (wc.f16, [1, 16, 37, 1000], 1, 32, 32, 128, 16, None),  # MHA
    (wc.bf16, [2047, 5, 64, 333], 1, 32, 8, 128, 16, None),  # GQA 4 (Llama-3 8B)
    (wc.bf16, [2047, 5, 64, 333], 1, 32, 8, 128, 64, 7),  # page 64, 7 splits
    (wc.f16, [4, 100, 513], 4, 64, 8, 128, 32, 3),  # GQA 8, 4 new tokens: 32 rows
    (wc.bf16, [16, 1200, 31], 16, 16, 1, 64, 32, None),  # MQA, 16 new tokens: 256 rows over 4 row tiles
    (wc.f16, [3, 4096], 3, 8, 2, 64, 16, 16),
    (wc.bf16, [7, 96, 8191], 7, 28, 4, 128, 16, None),  # GQA 7: rows not a power of two
    (wc.bf16, [8191, 4000], 1, 32, 8, 128, 256, 5),  # page 256
]


@pytest.mark.parametrize(
    "dtype, seq_lens, q_len, heads, kv_heads, head_dim, page, splits",
    CASES,
    ids=[f"{c[0].name}-q{c[2]}-h{c[3]}x{c[4]}-d{c[5]}-p{c[6]}-s{c[7]}" for c in CASES],
)
def test_paged_attention_matches_gathered_reference(
    dtype, seq_lens, q_len, heads, kv_heads, head_dim, page, splits
) -> None:
    q, kc, vc, bt, lens = dk.paged_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, page, dtype, "cuda")
    want = dk.reference_paged_attention(q, kc, vc, bt, lens)
    out = paged_attention(q, kc, vc, bt, lens, num_splits=splits)
    torch.cuda.synchronize()
    assert out.dtype == q.dtype and out.shape == q.shape
    assert not out.isnan().any(), "an output element was not written, or a NaN cache row leaked in"
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16])
def test_torch_op_in_a_cuda_graph(dtype) -> None:
    """The registered operator, eagerly and replayed from a CUDA graph (no host synchronisation inside)."""
    q, kc, vc, bt, lens = dk.paged_kv_inputs([300, 1, 48], 1, 16, 4, 128, 16, dtype, "cuda")
    want = dk.reference_paged_attention(q, kc, vc, bt, lens, scale=0.07)
    op = torch.ops.wavec.paged_attention
    torch.testing.assert_close(
        op(q, kc, vc, bt, lens, 0.07, 3).float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name]
    )
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(q, kc, vc, bt, lens, 0.07, 3)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])


def test_bad_lengths_and_block_ids_are_named_under_check_bounds(monkeypatch) -> None:
    """WAVEC_CHECK_BOUNDS=1: a length past the block table and a block id outside the cache are named
    before the launch; without it the GPU path never synchronises to look."""
    q, kc, vc, bt, lens = dk.paged_kv_inputs([20, 40], 1, 4, 2, 64, 16, wc.f16, "cuda")
    monkeypatch.setenv("WAVEC_CHECK_BOUNDS", "1")
    with pytest.raises(wc.WavecError, match=r"seq_lens\[1\] = 1000 must be in \[q_len, max_blocks \* page_size\]"):
        paged_attention(q, kc, vc, bt, torch.tensor([20, 1000], dtype=torch.int32, device="cuda"))
    bt[1, 1] = kc.shape[0]
    with pytest.raises(wc.WavecError, match=r"block_tables\[1, 1\] = \d+ is not a block of k_cache"):
        paged_attention(q, kc, vc, bt, lens)


def test_alibi_slopes_on_gpu() -> None:
    q, kc, vc, bt, lens = dk.paged_kv_inputs([3000, 17, 3], 1, 32, 8, 128, 16, wc.bf16, "cuda")
    slopes = torch.rand(32, device="cuda") * 0.05
    out = paged_attention(q, kc, vc, bt, lens, alibi_slopes=slopes)
    want = dk.reference_paged_attention(q, kc, vc, bt, lens, alibi_slopes=slopes)
    torch.testing.assert_close(out.float(), want, rtol=1.6e-2, atol=1.6e-2)
