"""Split-KV decode attention over a dense cache on the emulator (bounds and race checks on) against torch
in f32: ragged lengths including 1 and q_len itself, q_len 1 and 3, MHA / GQA 2 / GQA 4, 1 to 4 splits
(splits past the longest sequence's end included), both head dims; cache rows past each sequence's end
hold large garbage.  Outputs start as NaN: every element must be written."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels import decode
from wavec.kernels.decode import decode_attention, num_splits_for
from wavec.kernels.fastpath import Decisions

TOL = {"f16": 2e-3, "bf16": 1.6e-2}

CASES = [  # dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits
    (wc.f16, [1, 37, 100], 100, 1, 2, 2, 64, 1),  # MHA, one split
    (wc.f16, [1, 37, 100], 100, 1, 4, 2, 64, 3),  # GQA 2, three splits: the first sequence's last two empty
    (wc.bf16, [3, 64, 41], 70, 3, 8, 2, 64, 4),  # GQA 4, causal within 3 new tokens, S_max > every length
    (wc.f16, [97, 5], 97, 3, 4, 1, 128, 2),  # MQA at d128: 12 rows
    (wc.bf16, [50], 64, 1, 4, 1, 128, 4),  # B = 1, a split past the end of the only sequence
]


@pytest.mark.parametrize(
    "dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits",
    CASES,
    ids=[f"{c[0].name}-b{len(c[1])}-q{c[3]}-h{c[4]}x{c[5]}-d{c[6]}-s{c[7]}" for c in CASES],
)
def test_decode_attention_matches_reference(dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits):
    q, k, v, lens = dk.dense_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, dtype, s_max)
    want = dk.reference_decode_attention(q, k, v, lens)
    out = decode_attention(q, k, v, seq_lens=lens, num_splits=splits, backend="emulator")
    assert out.dtype == q.dtype and out.shape == q.shape
    assert not out.isnan().any(), "some output elements were not written"
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])


@pytest.mark.parametrize("q_len,heads,kv_heads,splits", [(1, 4, 2, 3), (3, 8, 2, 2)])
def test_alibi_slopes(q_len: int, heads: int, kv_heads: int, splits: int) -> None:
    """ALiBi: each query head's slope times the distance between the query's and the key's positions."""
    q, k, v, lens = dk.dense_kv_inputs([5, 37, 100], q_len, heads, kv_heads, 64, wc.f16, 100)
    slopes = torch.rand(heads) * 0.5
    want = dk.reference_decode_attention(q, k, v, lens, alibi_slopes=slopes)
    out = decode_attention(q, k, v, seq_lens=lens, num_splits=splits, alibi_slopes=slopes, backend="emulator")
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)
    with pytest.raises(wc.WavecError, match=r"alibi_slopes must be a contiguous float32 tensor \[\d+\]"):
        decode_attention(q, k, v, seq_lens=lens, alibi_slopes=slopes[:2], backend="emulator")


def test_seq_lens_none_is_the_whole_cache_and_scale_is_used() -> None:
    q, k, v, lens = dk.dense_kv_inputs([45, 45], 1, 4, 2, 64, wc.f16)
    want = dk.reference_decode_attention(q, k, v, lens, scale=0.3)
    out = decode_attention(q, k, v, scale=0.3, num_splits=2, backend="emulator")
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


def test_repeated_calls_with_new_lengths(monkeypatch) -> None:
    """One plan serves calls whose seq_lens change in value, not shape: each result is that call's (the
    cached partials rewritten, the lengths read per call), and bad lengths are still named."""
    planned = []
    plan = decode._plan_dense
    monkeypatch.setattr(decode, "_DISPATCH", Decisions("decode_attention"))
    monkeypatch.setattr(decode, "_plan_dense", lambda *a: planned.append(a) or plan(*a))
    for lengths in ([70, 3, 41], [3, 70, 12], [9, 9, 70]):
        q, k, v, lens = dk.dense_kv_inputs(lengths, 3, 4, 2, 64, wc.f16, 70)
        want = dk.reference_decode_attention(q, k, v, lens)
        out = decode_attention(q, k, v, seq_lens=lens, num_splits=3, backend="emulator")
        torch.testing.assert_close(out.float(), want, rtol=TOL["f16"], atol=TOL["f16"])
    assert len(planned) == 1
    with pytest.raises(wc.WavecError, match=r"seq_lens\[1\] = 2 must be in \[q_len, S_max\] = \[3, 70\]"):
        decode_attention(q, k, v, seq_lens=torch.tensor([5, 2, 70], dtype=torch.int32), num_splits=3,
                         backend="emulator")  # fmt: skip


def test_split_rule() -> None:
    """Enough workgroups for two per SM, no split under 128 keys, at most 64."""
    assert num_splits_for(1, 8, 1, 8192, 132) == 33
    assert num_splits_for(1, 8, 1, 2048, 132) == 32
    assert num_splits_for(64, 8, 1, 4096, 132) == 1
    assert num_splits_for(1, 1, 1, 100, 132) == 1
    assert num_splits_for(1, 1, 1, 1 << 20, 132) == 64


BAD = [  # what to change, the error's text
    (lambda a: a.update(q=a["q"].float()), "q must be float16 or bfloat16"),
    (lambda a: a.update(q=a["q"][0]), "q must be 4-D"),
    (lambda a: a.update(k=a["k"].float()), "k must be a 4-D"),
    (lambda a: a.update(v=a["v"][:, :8]), "v has shape"),
    (lambda a: a.update(q=a["q"][..., :32]), "head_dim must be one of"),
    (lambda a: a.update(q=a["q"].expand(2, 17, 4, 64)), "q_len"),
    (lambda a: a.update(q=a["q"][:, :, :3]), "not a multiple of 2 kv heads"),
    (lambda a: a.update(k=a["k"][:1], v=a["v"][:1]), "k has batch 1 but q 2"),
    (lambda a: a.update(seq_lens=a["seq_lens"].long()), "seq_lens must be int32"),
    (lambda a: a.update(seq_lens=a["seq_lens"][:1]), "seq_lens must be \\[batch\\]"),
    (
        lambda a: a.update(seq_lens=a["seq_lens"] + 1),
        "seq_lens\\[1\\] = 21 must be in \\[q_len, S_max\\] = \\[1, 20\\]",
    ),
    (lambda a: a.update(seq_lens=a["seq_lens"] * 0), "seq_lens\\[0\\] = 0 must be in"),
    (lambda a: a.update(num_splits=0), "num_splits must be an int in 1..64"),
]


@pytest.mark.parametrize("change, message", BAD, ids=[m.split(" ")[0] for _c, m in BAD])
def test_bad_arguments_are_named(change, message: str) -> None:
    q, k, v, lens = dk.dense_kv_inputs([5, 20], 1, 4, 2, 64, wc.f16)
    args = {"q": q, "k": k, "v": v, "seq_lens": lens}
    change(args)
    with pytest.raises(wc.WavecError, match=f"decode_attention: .*{message}"):
        decode_attention(**args, backend="emulator")
