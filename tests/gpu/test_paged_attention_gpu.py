"""GPU tier: paged decode attention against torch in f32 over the gathered cache, fresh random block
tables (permutations of the cache's blocks), ragged lengths (1, multiples of the page size, long), q_len
1..16, MHA / GQA / MQA, both head dims and page sizes 16 and 32; garbage block-table entries and NaN cache
rows past each sequence's end; outputs NaN-filled first, so every element must be written."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels.paged_attention import paged_attention, register_paged_attention_op

pytestmark = pytest.mark.gpu
TOL = {"f16": 2e-3, "bf16": 1.6e-2}

CASES = [  # dtype, seq_lens, q_len, heads, kv_heads, head_dim, page
    (wc.f16, [1, 16, 37, 1000], 1, 32, 32, 128, 16),  # MHA
    (wc.bf16, [2047, 5, 64, 333], 1, 32, 8, 128, 16),  # GQA 4 (Llama-3 8B)
    (wc.f16, [4, 100, 513], 4, 64, 8, 128, 32),  # GQA 8, 4 new tokens: 32 rows
    (wc.bf16, [16, 1200, 31], 16, 16, 1, 64, 32),  # MQA, 16 new tokens: 256 rows over 4 row tiles
    (wc.f16, [3, 4096], 3, 8, 2, 64, 16),
    (wc.bf16, [7, 96, 8191], 7, 28, 4, 128, 16),  # GQA 7: rows not a power of two
]


@pytest.mark.parametrize(
    "dtype, seq_lens, q_len, heads, kv_heads, head_dim, page",
    CASES,
    ids=[f"{c[0].name}-q{c[2]}-h{c[3]}x{c[4]}-d{c[5]}-p{c[6]}" for c in CASES],
)
def test_paged_attention_matches_gathered_reference(dtype, seq_lens, q_len, heads, kv_heads, head_dim, page) -> None:
    q, kc, vc, bt, lens = dk.paged_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, page, dtype, "cuda")
    want = dk.reference_paged_attention(q, kc, vc, bt, lens)
    out = paged_attention(q, kc, vc, bt, lens)
    torch.cuda.synchronize()
    assert out.dtype == q.dtype and out.shape == q.shape
    assert not out.isnan().any(), "an output element was not written, or a NaN cache row leaked in"
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16])
def test_torch_op_writes_every_element(dtype) -> None:
    """The registered operator, functional and in place (into a NaN-filled output), and in a CUDA graph."""
    name = f"paged_{dtype.name}_d128_p16_g4"
    op = register_paged_attention_op(dtype, 128, 16, 4, 1, name=f"wavec_gpu_test::{name}")
    q, kc, vc, bt, lens = dk.paged_kv_inputs([300, 1, 48], 1, 16, 4, 128, 16, dtype, "cuda")
    want = dk.reference_paged_attention(q, kc, vc, bt, lens, scale=0.07)
    torch.testing.assert_close(op(q, kc, vc, bt, lens, 0.07).float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])
    out = torch.full_like(q, float("nan"))
    op_out = getattr(torch.ops.wavec_gpu_test, f"{name}_out")
    op_out(q, kc, vc, bt, lens, out, 0.07)  # warm-up (loads the module) outside the capture
    out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op_out(q, kc, vc, bt, lens, out, 0.07)
    graph.replay()
    torch.cuda.synchronize()
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])
