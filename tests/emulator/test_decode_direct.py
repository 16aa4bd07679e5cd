"""One split without a combine (``decode.DIRECT_SINGLE_SPLIT``): the split kernel normalises its rows into
the output, dense and paged, on the emulator against torch in f32.  The kernel by hand into a NaN-filled
output writes every element; the plan keeps no partials workspace; the two-launch path (split kernel,
then ``decode_combine``) gives the same result."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels import decode
from wavec.kernels import paged_attention as pa
from wavec.kernels.fastpath import Decisions

TOL = {"f16": 2e-3, "bf16": 1.6e-2}


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode, "_DISPATCH", Decisions("decode_attention"))
    monkeypatch.setattr(pa, "_DISPATCH", Decisions("paged_attention"))


def _plan(table: Decisions):
    (run,) = table.table.values()
    return run


@pytest.mark.parametrize(
    "dtype, seq_lens, q_len, heads, kv_heads, head_dim",
    [(wc.f16, [1, 37, 100], 1, 4, 2, 64), (wc.bf16, [3, 64, 41], 3, 8, 2, 64), (wc.f16, [97, 5], 3, 4, 1, 128)],
)
def test_one_split_writes_the_output_itself(dtype, seq_lens, q_len, heads, kv_heads, head_dim) -> None:
    q, k, v, lens = dk.dense_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, dtype, max(seq_lens) + 3)
    want = dk.reference_decode_attention(q, k, v, lens)
    out = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=1, backend="emulator")
    run = _plan(decode._DISPATCH)
    assert run.direct and run.combine is None and run.counters is None and not run.spaces
    assert not out.isnan().any(), "some output elements were not written"
    torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])
    by_hand = torch.full_like(q, float("nan"))
    run.split(q, k, v, lens, by_hand, 1.0 / head_dim**0.5)
    assert torch.equal(by_hand, out)


def test_direct_equals_split_then_combine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rows through the split kernel and ``decode_combine`` (``DIRECT_SINGLE_SPLIT`` False): the
    combine's weight of the only split is exp2(0) = 1, so both divide the same sums."""
    q, k, v, lens = dk.dense_kv_inputs([70, 17, 3], 2, 8, 2, 64, wc.bf16, 80)
    direct = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=1, backend="emulator")
    monkeypatch.setattr(decode, "DIRECT_SINGLE_SPLIT", False)
    monkeypatch.setattr(decode, "_DISPATCH", Decisions("decode_attention"))
    combined = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=1, backend="emulator")
    run = _plan(decode._DISPATCH)
    assert not run.direct and run.combine is not None
    torch.testing.assert_close(direct, combined, rtol=0, atol=0)


def test_alibi_and_the_split_rule_take_it() -> None:
    """ALiBi through the direct kernel; the split rule's one split (enough workgroups already) takes it."""
    q, k, v, lens = dk.dense_kv_inputs([5, 37, 100, 64], 1, 4, 2, 64, wc.f16, 100)
    assert decode.num_splits_for(4, 2, 1, 100, decode.EMULATOR_SMS) == 1
    slopes = torch.rand(4) * 0.5
    want = dk.reference_decode_attention(q, k, v, lens, alibi_slopes=slopes)
    out = decode.decode_attention(q, k, v, seq_lens=lens, alibi_slopes=slopes, backend="emulator")
    assert _plan(decode._DISPATCH).direct
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


def test_paged_one_split_writes_the_output_itself() -> None:
    q, kc, vc, bt, lens = dk.paged_kv_inputs([40, 7], 2, 4, 2, 64, 16, wc.f16)
    want = dk.reference_paged_attention(q, kc, vc, bt, lens)
    out = pa.paged_attention(q, kc, vc, bt, lens, num_splits=1, backend="emulator")
    run = _plan(pa._DISPATCH)
    assert run.direct and not run.spaces
    torch.testing.assert_close(out.float(), want, rtol=TOL["f16"], atol=TOL["f16"])
    by_hand = torch.full_like(q, float("nan"))
    run.split(q, kc, vc, bt, lens, by_hand, 0.125)
    assert not by_hand.isnan().any()
    torch.testing.assert_close(by_hand.float(), dk.reference_paged_attention(q, kc, vc, bt, lens, scale=0.125),
                               rtol=TOL["f16"], atol=TOL["f16"])  # fmt: skip


def test_more_splits_keep_the_combine() -> None:
    q, k, v, lens = dk.dense_kv_inputs([70, 17], 1, 4, 2, 64, wc.f16, 80)
    decode.decode_attention(q, k, v, seq_lens=lens, num_splits=2, backend="emulator")
    run = _plan(decode._DISPATCH)
    assert not run.direct and run.combine is not None and run.spaces
