"""GPU tier: the opt-in decode split kernels (``decode_variants``) against torch SDPA in f32 at real sizes
(Llama-class GQA 32/8, MHA, S up to 8192, ragged lengths not multiples of any key tile, q_len 1 and 3, the
split rule and 1 / 2 / 5 splits), the kernels by hand into NaN-filled partials and outputs, and a CUDA-graph
replay with new inputs.  wgmma cases need an sm_90 GPU (skipped elsewhere)."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels import decode
from wavec.kernels.decode_host import Partials
from wavec.kernels.fastpath import Decisions

pytestmark = pytest.mark.gpu
TOL = {"f16": 2e-3, "bf16": 1.6e-2}
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
VARIANTS = {  # name -> (decode_attention keywords, config)
    "wgmma": ({"mma": "wgmma"}, None),
    "wgmma_64x1x3": ({"mma": "wgmma"}, (64, 1, 3)),
    "wgmma_cpasync": ({"mma": "wgmma", "async_copy": "cp.async"}, (64, 1, 2)),
    "wgmma_overlap": ({"mma": "wgmma", "intra_wg_overlap": True}, (64, 1, 3)),
    "l2p128": ({"l2_prefetch": 128}, None),
    "lb6": ({"launch_bound": 6}, (16, 2, 4)),
    "stages4": ({}, (16, 2, 4)),
    "stages3": ({}, (32, 2, 3)),
}
CASES = [  # dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits (None: the rule)
    (wc.bf16, [2048 - 37 * i for i in range(16)], 2048, 1, 32, 8, 128, None),  # B 16 GQA 4, the rule
    (wc.f16, [8191, 1, 33, 4097], 8192, 1, 32, 8, 128, 2),  # ragged, a length of 1
    (wc.bf16, [777, 1000, 3], 1024, 3, 32, 8, 128, 5),  # q_len 3: 12 rows, a length = q_len
    (wc.f16, [3000, 129, 64], 3001, 1, 16, 16, 64, 1),  # MHA d64, one split: the direct kernel
]


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "_DISPATCH", Decisions("decode_attention"))


def _skip_unless_served(options: dict) -> None:
    if options.get("mma") == "wgmma" and not HOPPER:
        pytest.skip("wgmma needs an sm_90 GPU")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(
    "dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits",
    CASES,
    ids=[f"{c[0].name}-b{len(c[1])}-s{c[2]}-q{c[3]}-h{c[4]}x{c[5]}-d{c[6]}-sp{c[7]}" for c in CASES],
)
def test_variant_matches_sdpa(variant, dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits) -> None:
    options, config = VARIANTS[variant]
    _skip_unless_served(options)
    q, k, v, lens = dk.dense_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, dtype, s_max, "cuda")
    tol = TOL[dtype.name]
    out = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=splits, config=config, **options)
    torch.testing.assert_close(out.float(), dk.reference_decode_attention(q, k, v, lens), rtol=tol, atol=tol)
    (run,) = decode._DISPATCH.table.values()
    got = torch.full_like(q, float("nan"))
    if run.direct:
        run.split(q, k, v, lens, got, 0.08)
    else:
        parts = Partials(run)
        parts.buf.fill_(float("nan"))
        run.split(q, k, v, lens, *parts.views, 0.08)
        torch.cuda.synchronize()
        assert not any(p.isnan().any() for p in parts.views), "a partial element was not written"
        run.combine(*parts.flat, run._flat_out(got))
    torch.cuda.synchronize()
    assert not got.isnan().any(), "an output element was not written"
    want = dk.reference_decode_attention(q, k, v, lens, scale=0.08)
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("splits", [1, 3])
def test_variant_in_a_cuda_graph(variant: str, splits: int) -> None:
    """Replayed with new queries into a NaN-filled output (B=16 over 2048 keys, GQA 32/8)."""
    options, config = VARIANTS[variant]
    _skip_unless_served(options)
    q, k, v, lens = dk.dense_kv_inputs([2048 - 61 * i for i in range(16)], 1, 32, 8, 128, wc.bf16, 2048, "cuda")

    def call():
        return decode.decode_attention(q, k, v, seq_lens=lens, num_splits=splits, config=config, **options)

    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    for _ in range(2):
        q.copy_(torch.randn_like(q))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert not out.isnan().any()
        want = dk.reference_decode_attention(q, k, v, lens)
        torch.testing.assert_close(out.float(), want, rtol=1.6e-2, atol=1.6e-2)


def test_wgmma_reads_transposed_cache_views() -> None:
    """transformers' [B, H, S, D] cache transposed to [B, S, H, D]: a strided view (TMA's strides then are
    S * D and D elements)."""
    if not HOPPER:
        pytest.skip("wgmma needs an sm_90 GPU")
    q, k, v, lens = dk.dense_kv_inputs([1500, 2048, 31], 1, 32, 8, 128, wc.bf16, 2048, "cuda")
    kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    out = decode.decode_attention(q, kt, vt, seq_lens=lens, mma="wgmma")
    torch.testing.assert_close(out.float(), dk.reference_decode_attention(q, k, v, lens), rtol=1.6e-2, atol=1.6e-2)


@pytest.mark.parametrize("batch, mma", [(8, "wgmma"), (1, "mma_sync"), (32, "mma_sync")])
def test_default_takes_wgmma_where_measured(batch: int, mma: str) -> None:
    """``decode_attention(mma=None)`` runs the kernel ``decode_variants.resolve`` names (wgmma for 32-128
    KV-head groups on an sm_90 GPU), bit for bit."""
    if not HOPPER:
        pytest.skip("the wgmma default needs an sm_90 GPU")
    q, k, v, lens = dk.dense_kv_inputs([2048 - 61 * i for i in range(batch)], 1, 32, 8, 128, wc.bf16, 2048, "cuda")
    out = decode.decode_attention(q, k, v, seq_lens=lens)
    assert torch.equal(out, decode.decode_attention(q, k, v, seq_lens=lens, mma=mma))
    torch.testing.assert_close(out.float(), dk.reference_decode_attention(q, k, v, lens), rtol=1.6e-2, atol=1.6e-2)
