"""The opt-in split kernels of ``decode_variants`` on the emulator (race checker on; sm_90a for wgmma, so the
TMA copies and their mbarriers are emulated) against torch in f32: mma="wgmma" with K/V by TMA and by
``cp.async``, 2-4 stages, a launch bound, deeper ``cp.async`` pipelines with smaller key tiles.  bf16 and
f16, B 1 / 3 / 16, ragged lengths (not multiples of BLOCK_N, one equal to q_len), GQA 4 and MHA, q_len 1
and 3, 1 / 2 / 5 splits (splits past a sequence's end included); cache rows past each end hold large
garbage.  The kernels run by hand into NaN-filled partials and outputs: every element must be written."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels import decode
from wavec.kernels import decode_variants as dv
from wavec.kernels.decode_host import Partials
from wavec.kernels.fastpath import Decisions

TOL = {"f16": 2e-3, "bf16": 1.6e-2}

CASES = [  # dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits
    (wc.bf16, [1, 37, 100], 100, 1, 8, 2, 128, 2),  # GQA 4, B 3, one sequence of one token
    (wc.f16, [3, 64, 41], 70, 3, 2, 2, 64, 5),  # MHA, q_len 3, a length = q_len, empty splits
    (wc.bf16, [3 + 5 * i for i in range(16)], 83, 1, 4, 1, 128, 1),  # B 16, one split: the direct kernel
    (wc.f16, [50], 70, 3, 4, 1, 128, 5),  # B 1, GQA 4 x q_len 3 = 12 rows, splits past the end
    (wc.bf16, [130, 7, 99], 131, 1, 2, 2, 64, 2),  # MHA, d64, lengths past two 64-key tiles
]
VARIANTS = {  # name -> (decode_attention keywords, config)
    "wgmma": ({"mma": "wgmma"}, None),  # WGMMA_CONFIG: 64 keys, 3 stages, TMA
    "wgmma-32x3": ({"mma": "wgmma"}, (32, 1, 3)),
    "wgmma-cp.async": ({"mma": "wgmma", "async_copy": "cp.async"}, (64, 1, 2)),
    "wgmma-overlap": ({"mma": "wgmma", "intra_wg_overlap": True}, (64, 1, 3)),
    "l2p128": ({"l2_prefetch": 128}, None),
    "lb6": ({"launch_bound": 6}, (16, 2, 4)),
    "stages4": ({}, (16, 2, 4)),
    "stages3": ({}, (32, 2, 3)),
}


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "_DISPATCH", Decisions("decode_attention"))


def by_hand(run, q, k, v, lens, scale: float) -> torch.Tensor:
    """The plan's kernels into NaN-filled partials and output; the partials checked written."""
    out = torch.full_like(q, float("nan"))
    if run.direct:
        run.split(q, k, v, lens, out, scale)
        return out
    parts = Partials(run)
    parts.buf.fill_(float("nan"))
    run.split(q, k, v, lens, *parts.views, scale)
    for name, part in zip(("o_part", "m_part", "l_part"), parts.views):
        assert not part.isnan().any(), f"{name}: some elements were not written"
    run.combine(*parts.flat, run._flat_out(out))
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(
    "dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits",
    CASES,
    ids=[f"{c[0].name}-b{len(c[1])}-q{c[3]}-h{c[4]}x{c[5]}-d{c[6]}-s{c[7]}" for c in CASES],
)
def test_variant_matches_reference(variant, dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits):
    options, config = VARIANTS[variant]
    q, k, v, lens = dk.dense_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, dtype, s_max)
    out = decode.decode_attention(
        q, k, v, seq_lens=lens, num_splits=splits, config=config, backend="emulator", **options
    )
    tol = TOL[dtype.name]
    torch.testing.assert_close(out.float(), dk.reference_decode_attention(q, k, v, lens), rtol=tol, atol=tol)
    (run,) = decode._DISPATCH.table.values()
    assert run.direct == (splits == 1)
    wgmma = options.get("mma") == "wgmma"
    mlir = run.split.artifact.mlir
    tma = "nvvm.cp.async.bulk.tensor.shared.cluster.global" in mlir
    assert tma == (wgmma and options.get("async_copy") != "cp.async"), "K/V staged by TMA iff wgmma over TMA"
    assert ("wgmma.mma_async.sync.aligned" in mlir) == wgmma
    if wgmma:  # Q Kᵀ over D / 16 steps and P V over BLOCK_N / 16; the overlap adds the first tile's Q Kᵀ
        chains = 2 if options.get("intra_wg_overlap") else 1
        block_n = (config or dv.WGMMA_CONFIG)[0]
        assert mlir.count("wgmma.mma_async.sync.aligned") == chains * head_dim // 16 + block_n // 16
    assert run.split.metadata.block == ((128 if wgmma else 64), 1, 1)
    got = by_hand(run, q, k, v, lens, 0.3)
    assert not got.isnan().any(), "some output elements were not written"
    want = dk.reference_decode_attention(q, k, v, lens, scale=0.3)
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)


def test_wgmma_takes_more_row_tiles_and_alibi() -> None:
    """72 rows (q_len 9 x GQA 8) over two 64-row warpgroup tiles; ALiBi's bias through the same body."""
    q, k, v, lens = dk.dense_kv_inputs([40, 77], 9, 16, 2, 64, wc.f16, 80)
    slopes = torch.rand(16) * 0.5
    want = dk.reference_decode_attention(q, k, v, lens, alibi_slopes=slopes)
    out = decode.decode_attention(
        q, k, v, seq_lens=lens, num_splits=2, alibi_slopes=slopes, backend="emulator", mma="wgmma"
    )
    (run,) = decode._DISPATCH.table.values()
    assert not run.direct
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


def test_wgmma_reads_transposed_views_and_names_strides_tma_cannot_take() -> None:
    """transformers' [B, H, S, D] cache transposed: TMA strides S * D and D; a view into rows of D + 1
    elements (258 bytes) cannot be a tensor map: named, and served by ``cp.async``."""
    q, k, v, lens = dk.dense_kv_inputs([37, 100, 5], 1, 8, 2, 128, wc.bf16, 100)
    want = dk.reference_decode_attention(q, k, v, lens)
    kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    out = decode.decode_attention(q, kt, vt, seq_lens=lens, num_splits=2, backend="emulator", mma="wgmma")
    torch.testing.assert_close(out.float(), want, rtol=TOL["bf16"], atol=TOL["bf16"])
    kw, vw = (torch.cat([t, t[..., :1]], -1)[..., :128] for t in (k, v))
    with pytest.raises(wc.WavecError, match=r"mma='wgmma' stages k by TMA, .* got strides \(25800, 258, 129, 1\)"):
        decode.decode_attention(q, kw, vw, seq_lens=lens, backend="emulator", mma="wgmma")
    out = decode.decode_attention(q, kw, vw, seq_lens=lens, backend="emulator", mma="wgmma", async_copy="cp.async")
    torch.testing.assert_close(out.float(), want, rtol=TOL["bf16"], atol=TOL["bf16"])


def test_default_kernel_is_unchanged() -> None:
    """No variant keyword: the mma.sync kernel of ``CONFIGS``, staged by ``cp.async``, no launch bound."""
    q, k, v, lens = dk.dense_kv_inputs([37, 5], 1, 8, 2, 128, wc.bf16, 40)
    decode.decode_attention(q, k, v, seq_lens=lens, num_splits=2, backend="emulator")
    (run,) = decode._DISPATCH.table.values()
    assert run.split.metadata.block == (64, 1, 1)
    mlir = run.split.artifact.mlir
    assert "wgmma.mma_async" not in mlir and "bulk.tensor" not in mlir and "nvgpu.device_async_copy" in mlir


@pytest.mark.parametrize(
    "options, match",
    [
        ({"mma": "wmma"}, r"decode_attention: mma must be one of \('mma_sync', 'wgmma'\) or None, got 'wmma'"),
        ({"async_copy": "bulk"}, r"decode_attention: async_copy must be one of .*, got 'bulk'"),
        ({"async_copy": "tma"}, r"decode_attention: async_copy='tma' stages K/V for wgmma tiles only"),
        ({"launch_bound": 0}, r"decode_attention: launch_bound must be None or an int in 1\.\.32, got 0"),
        ({"launch_bound": True}, r"decode_attention: launch_bound must be None or an int in 1\.\.32, got True"),
        ({"mma": "wgmma", "one_launch": True}, r"decode_attention: one_launch=True is built for mma='mma_sync'"),
        ({"mma": "wgmma", "backend": "rocm"}, r"decode_attention: mma='wgmma' needs the CUDA backend"),
        ({"launch_bound": 4, "backend": "rocm"}, r"decode_attention: launch_bound is a PTX qualifier"),
        ({"l2_prefetch": 100}, r"decode_attention: l2_prefetch must be None or one of \(64, 128, 256\), got 100"),
        ({"mma": "wgmma", "l2_prefetch": 128}, r"decode_attention: l2_prefetch qualifies cp\.async copies"),
        ({"intra_wg_overlap": 1}, r"decode_attention: intra_wg_overlap must be True or False, got 1"),
        ({"intra_wg_overlap": True}, r"decode_attention: intra_wg_overlap=True needs mma='wgmma' over TMA"),
        (
            {"mma": "wgmma", "intra_wg_overlap": True, "config": (64, 1, 2)},
            r"decode_attention: intra_wg_overlap=True needs 3\+ stages \(config=\(BLOCK_N, 1, 3\)\), got 2",
        ),
    ],
)
def test_bad_variants_are_named(options: dict, match: str) -> None:
    q, k, v, lens = dk.dense_kv_inputs([9, 5], 1, 4, 2, 64, wc.f16, 9)
    backend = options.pop("backend", "emulator")
    with pytest.raises(wc.WavecError, match=match):
        decode.decode_attention(q, k, v, seq_lens=lens, backend=backend, **options)


def test_parse_variant() -> None:
    """``decode_tiles.py --configs``' spelling."""
    assert dv.parse_variant("default") == (None, dv.AUTO)
    assert dv.parse_variant("mma_sync") == (None, dv.DEFAULT)
    assert dv.parse_variant("wgmma") == (None, dv.Variant("wgmma"))
    assert dv.parse_variant("64x1x3:wgmma:cp.async") == ((64, 1, 3), dv.Variant("wgmma", "cp.async"))
    assert dv.parse_variant("16x2x2:lb5") == ((16, 2, 2), dv.Variant(launch_bound=5))
    assert dv.parse_variant("32x2x2") == ((32, 2, 2), dv.DEFAULT)
    assert dv.parse_variant("64x1x3:wgmma:ov") == ((64, 1, 3), dv.Variant("wgmma", intra_wg_overlap=True))
    assert dv.parse_variant("32x2x2:l2p128") == ((32, 2, 2), dv.Variant(l2_prefetch=128))
    with pytest.raises(ValueError, match="unknown option 'lbx'"):
        dv.parse_variant("32x2x2:lbx")
