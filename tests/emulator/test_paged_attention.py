"""Paged decode attention on the emulator (bounds and race checks on) against torch in f32 over the
gathered cache: random block tables (a permutation of the cache's blocks), ragged lengths including 1 and
exact multiples of the page size, q_len 1 and > 1, GQA, MQA and MHA, garbage block-table entries and NaN
cache rows past each sequence's end.  Outputs start as NaN: every element must be written."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels import paged_attention as pa
from wavec.kernels.fastpath import Decisions
from wavec.kernels.paged_attention import paged_attention

TOL = {"f16": 2e-3, "bf16": 1.6e-2}

CASES = [  # dtype, seq_lens, q_len, heads, kv_heads, head_dim, page, config, splits
    (wc.f16, [1, 16, 37], 1, 2, 2, 64, 16, None, 1),  # MHA, one row per tile; lengths 1 and = page
    (wc.f16, [1, 16, 37], 1, 2, 2, 64, 16, None, 3),  # the same over 3 splits (empty ones for short sequences)
    (wc.bf16, [3, 64, 40], 3, 8, 2, 64, 32, None, 2),  # GQA 4, causal within 3 new tokens; 64 = 2 pages
    (wc.f16, [16, 33], 16, 2, 1, 128, 16, None, 4),  # MQA, q_len 16: 32 rows, 2 waves
    (wc.f16, [5, 70], 5, 8, 1, 64, 16, (32, 1), 2),  # 40 rows over a one-wave tile: 3 row tiles
    (wc.f16, [3, 50, 97], 2, 4, 2, 64, 48, None, 3),  # a page size that is not a power of two
    (wc.bf16, [96, 2], 2, 6, 2, 128, 32, None, 1),  # d128, GQA 3; lengths a multiple of the page and q_len itself
]


@pytest.mark.parametrize(
    "dtype, seq_lens, q_len, heads, kv_heads, head_dim, page, config, splits",
    CASES,
    ids=[f"{c[0].name}-q{c[2]}-h{c[3]}x{c[4]}-d{c[5]}-p{c[6]}-s{c[8]}" for c in CASES],
)
def test_paged_attention_matches_gathered_reference(
    dtype, seq_lens, q_len, heads, kv_heads, head_dim, page, config, splits
):
    q, kc, vc, bt, lens = dk.paged_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, page, dtype)
    want = dk.reference_paged_attention(q, kc, vc, bt, lens)
    out = paged_attention(q, kc, vc, bt, lens, backend="emulator", config=config, num_splits=splits)
    assert out.dtype == q.dtype and out.shape == q.shape
    assert not out.isnan().any(), "some output elements were not written (or a NaN cache row leaked in)"
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])


def test_alibi_slopes() -> None:
    q, kc, vc, bt, lens = dk.paged_kv_inputs([3, 50, 97], 2, 4, 2, 64, 16, wc.f16)
    slopes = torch.rand(4) * 0.5
    want = dk.reference_paged_attention(q, kc, vc, bt, lens, alibi_slopes=slopes)
    out = paged_attention(q, kc, vc, bt, lens, num_splits=3, alibi_slopes=slopes, backend="emulator")
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


def _split_kernel(group: int, page: int, block_n: int = 64, waves: int = 2):
    from wavec.kernels.paged_attention import make_paged_attention, paged_subs

    kernel = make_paged_attention(wc.f16, group, page, waves=waves)
    return wc.compile(kernel, paged_subs(64, group, page, block_n, waves), backend="emulator")


def _partials(q, splits: int):
    batch, q_len, heads, d = q.shape
    o = torch.full((batch, splits, q_len, heads, d), float("nan"))
    m, sums = (torch.full((batch, splits, q_len, heads), float("nan")) for _ in range(2))
    return o, m, sums


def test_split_kernel_writes_exactly_its_partials() -> None:
    """The raw split kernel into NaN-filled partials: every split of every row written (empty splits as
    m = -inf, l = 0, acc = 0), the sums of the splits' shares equal to the reference's normaliser."""
    q, kc, vc, bt, lens = dk.paged_kv_inputs([7, 20], 2, 4, 2, 64, 16, wc.f16)
    o, m, sums = _partials(q, 3)
    _split_kernel(2, 16)(q, kc, vc, bt, lens, o, m, sums, 0.3)
    assert not (o.isnan().any() or m.isnan().any() or sums.isnan().any())
    assert (m[0, 1:] == float("-inf")).all() and (sums[0, 1:] == 0).all() and (o[0, 1:] == 0).all()
    top = m.amax(1, keepdim=True)
    out = (o * torch.exp2(m - top)[..., None]).sum(1) / (sums * torch.exp2(m - top)).sum(1)[..., None]
    want = dk.reference_paged_attention(q, kc, vc, bt, lens, scale=0.3)
    torch.testing.assert_close(out, want, rtol=2e-3, atol=2e-3)


def test_a_bad_block_id_is_named_by_the_emulator() -> None:
    """A block id outside the cache, within a sequence's length: the emulator names the access (the host
    check is bypassed by calling the kernel directly)."""
    q, kc, vc, bt, lens = dk.paged_kv_inputs([20], 1, 2, 2, 64, 16, wc.f16)
    bt[0, 1] = kc.shape[0] + 5
    with pytest.raises(wc.WavecError, match="out-of-bounds access to binding 1 .*index 10 in dim 0"):
        _split_kernel(1, 16)(q, kc, vc, bt, lens, *_partials(q, 1), 0.125)


def test_repeated_calls_with_new_lengths_and_tables(monkeypatch) -> None:
    """One plan serves calls whose lengths and block tables change in value, not shape (each set uses 3 + 1
    pages of 16): each result is that call's, and a bad id in a later call's table is still named."""
    planned = []
    plan = pa._plan
    monkeypatch.setattr(pa, "_DISPATCH", Decisions("paged_attention"))
    monkeypatch.setattr(pa, "_plan", lambda *a: planned.append(a) or plan(*a))
    for lengths in ([40, 7], [7, 33], [48, 16]):
        q, kc, vc, bt, lens = dk.paged_kv_inputs(lengths, 2, 4, 2, 64, 16, wc.f16)
        want = dk.reference_paged_attention(q, kc, vc, bt, lens)
        out = paged_attention(q, kc, vc, bt, lens, num_splits=2, backend="emulator")
        torch.testing.assert_close(out.float(), want, rtol=TOL["f16"], atol=TOL["f16"])
    assert len(planned) == 1
    bt[0, 0] = kc.shape[0]
    with pytest.raises(wc.WavecError, match=r"block_tables\[0, 0\] = 7 is not a block of k_cache \(0..6\)"):
        paged_attention(q, kc, vc, bt, lens, num_splits=2, backend="emulator")


BAD = [  # what to change, the error's text
    (lambda a: a.update(q=a["q"].float()), "q must be float16 or bfloat16"),
    (lambda a: a.update(q=a["q"][0]), "q must be 4-D"),
    (lambda a: a.update(k_cache=a["k_cache"].float()), "k_cache must be a 4-D"),
    (lambda a: a.update(v_cache=a["v_cache"][:, :8]), "v_cache has shape"),
    (lambda a: a.update(q=a["q"][..., :32]), "head_dim must be one of"),
    (lambda a: a.update(q=a["q"].expand(2, 17, 4, 64)), "q_len"),
    (lambda a: a.update(q=a["q"][:, :, :3]), "not a multiple of 2 kv heads"),
    (lambda a: a.update(block_tables=a["block_tables"].long()), "block_tables must be int32"),
    (lambda a: a.update(seq_lens=a["seq_lens"][:1]), "seq_lens must be \\[batch\\]"),
    (lambda a: a.update(seq_lens=a["seq_lens"] * 0), "seq_lens\\[0\\] = 0 must be in"),
    (lambda a: a["block_tables"].__setitem__((1, 0), -1), "block_tables\\[1, 0\\] = -1 is not a block"),
]


@pytest.mark.parametrize("change, message", BAD, ids=[m.split(" ")[0] for _c, m in BAD])
def test_bad_arguments_are_named(change, message: str) -> None:
    q, kc, vc, bt, lens = dk.paged_kv_inputs([5, 20], 1, 4, 2, 64, 16, wc.f16)
    args = {"q": q, "k_cache": kc, "v_cache": vc, "block_tables": bt, "seq_lens": lens}
    change(args)
    with pytest.raises(wc.WavecError, match=f"paged_attention: .*{message}"):
        paged_attention(**args, backend="emulator")
