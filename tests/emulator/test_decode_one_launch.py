"""Decode attention in one launch on the emulator (race and bounds checks on): the last split of each
(sequence, row tile, kv head) combines every split's partials (``kernels/split_combine.py``).  Against
torch in f32 at odd and ragged lengths, q_len 1..16, MHA / GQA / MQA, ALiBi, 1, 2, 7 and 33 splits (most
of them past the end of short sequences: empty); dense and paged caches.  Outputs are NaN-filled tensors
of the call, so every element must be written; a non-last split writing the output would be a
``GlobalMemoryRaceError`` (its combine of fewer splits differs).  The counters are back at 0 after every
call and reused by the next (fresh inputs each time), and both paths agree."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels import decode
from wavec.kernels import paged_attention as pa

TOL = {"f16": 2e-3, "bf16": 1.6e-2}

DENSE = [  # dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits, alibi
    (wc.f16, [37, 1, 100], 100, 1, 4, 2, 64, 7, False),  # GQA 2, 7 splits: short sequences' splits empty
    (wc.bf16, [61], 70, 1, 2, 2, 128, 33, False),  # MHA d128, 33 splits of one 61-key sequence
    (wc.f16, [16, 45], 47, 16, 2, 1, 64, 2, True),  # MQA, q_len 16 (32 rows), ALiBi
    (wc.f16, [9, 23], 23, 5, 8, 2, 64, 1, False),  # GQA 4, q_len 5: 20 rows, one split
    (wc.bf16, [13, 77], 80, 3, 12, 4, 64, 7, True),  # GQA 3, ALiBi
]


def _counters(dispatch) -> list:
    return [b for run in dispatch.table.values() if run.counters is not None for b in run.counters.buffers.values()]


@pytest.mark.parametrize(
    "dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits, alibi",
    DENSE,
    ids=[f"{c[0].name}-q{c[3]}-h{c[4]}x{c[5]}-d{c[6]}-s{c[7]}{'-alibi' if c[8] else ''}" for c in DENSE],
)
def test_dense_one_launch_matches_reference(dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits, alibi):
    for _ in range(2):  # a second call with fresh inputs reuses the counters the first left at 0
        q, k, v, lens = dk.dense_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, dtype, s_max)
        slopes = torch.rand(heads) * 0.3 if alibi else None
        want = dk.reference_decode_attention(q, k, v, lens, alibi_slopes=slopes)
        out = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=splits, alibi_slopes=slopes,
                                      backend="emulator", one_launch=True)  # fmt: skip
        assert not out.isnan().any(), "an output element was not written"
        torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])
        counters = _counters(decode._DISPATCH)
        assert counters and all((c == 0).all() for c in counters)


def test_one_and_two_launches_agree() -> None:
    q, k, v, lens = dk.dense_kv_inputs([50, 3], 2, 4, 2, 64, wc.f16, 50)
    one = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=3, backend="emulator", one_launch=True)
    two = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=3, backend="emulator", one_launch=False)
    torch.testing.assert_close(one, two, rtol=2e-3, atol=2e-3)
    with pytest.raises(wc.WavecError, match="one_launch must be True or False"):
        decode.decode_attention(q, k, v, seq_lens=lens, backend="emulator", one_launch=1)


def test_the_split_kernel_in_one_launch_by_hand() -> None:
    """The one-launch kernel with its counters preset one arrival short of a round: the FIRST split of
    each group completes the round and combines only the partials stored so far (its own): it writes the
    output of split 0 alone; the later splits start the next round, which none completes, so each counter
    ends at SP - 1 (the ordering ``wc.arrive`` reports, emulated)."""
    q, k, v, lens = dk.dense_kv_inputs([100], 1, 2, 2, 64, wc.f16, 128)  # split 0: keys 0..63
    splits, (block_n, waves, stages) = 2, decode.decode_config(64, 1)
    subs = decode.split_kernel_subs(decode.decode_subs(64, 1, block_n, waves, stages), True)
    kernel = wc.compile(decode.make_decode_split(wc.f16, 1, one_launch=True, waves=waves), subs, backend="emulator")
    o, m, s = torch.zeros(1, splits, 1, 2, 64), torch.zeros(1, splits, 1, 2), torch.zeros(1, splits, 1, 2)
    counter = torch.full((1, 2), splits - 1, dtype=torch.int32)
    out = torch.full_like(q, float("nan"))
    kernel(q, k, v, lens, o, m, s, counter, out, 0.125)
    assert (counter == splits - 1).all(), counter
    first = dk.reference_decode_attention(q, k[:, :64], v[:, :64], torch.tensor([64], dtype=torch.int32), 0.125)
    torch.testing.assert_close(out.float(), first, rtol=2e-3, atol=2e-3)


PAGED = [  # dtype, seq_lens, q_len, heads, kv_heads, head_dim, page, splits
    (wc.f16, [1, 16, 37], 1, 4, 2, 64, 16, 7),
    (wc.bf16, [50, 97], 3, 8, 2, 64, 32, 33),
    (wc.f16, [16, 33], 16, 2, 1, 128, 16, 2),
]


@pytest.mark.parametrize(
    "dtype, seq_lens, q_len, heads, kv_heads, head_dim, page, splits",
    PAGED,
    ids=[f"{c[0].name}-q{c[2]}-h{c[3]}x{c[4]}-d{c[5]}-p{c[6]}-s{c[7]}" for c in PAGED],
)
def test_paged_one_launch_matches_reference(dtype, seq_lens, q_len, heads, kv_heads, head_dim, page, splits):
    for _ in range(2):
        q, kc, vc, bt, lens = dk.paged_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, page, dtype)
        want = dk.reference_paged_attention(q, kc, vc, bt, lens)
        out = pa.paged_attention(q, kc, vc, bt, lens, num_splits=splits, backend="emulator", one_launch=True)
        assert not out.isnan().any()
        torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])
        counters = _counters(pa._DISPATCH)
        assert counters and all((c == 0).all() for c in counters)


def test_gfx942_one_launch_with_mfma() -> None:
    """The one-launch kernel for gfx942 (64-lane waves, MFMA; agent-scope LLVM fences, ``atomic_rmw``)."""
    mfma = {"threads_per_wave": 64, "mma_type": wc.MMAType.F32_16x16x16_F16}
    q, k, v, lens = dk.dense_kv_inputs([100, 37], 2, 4, 2, 64, wc.f16, 100)
    subs = decode.split_kernel_subs(decode.decode_subs(64, 2, 64, 1), True)
    kernel = decode.make_decode_split(wc.f16, 2, one_launch=True, waves=1, **mfma)
    kernel = wc.compile(kernel, subs, target="gfx942", backend="emulator")
    splits = 3
    o, m, s = torch.empty(2, splits, 2, 4, 64), torch.empty(2, splits, 2, 4), torch.empty(2, splits, 2, 4)
    counter, out = torch.zeros(2, 2, dtype=torch.int32), torch.full_like(q, float("nan"))
    for _ in range(2):
        kernel(q, k, v, lens, o, m, s, counter, out, 0.125)
        assert (counter == 0).all()
        torch.testing.assert_close(
            out.float(), dk.reference_decode_attention(q, k, v, lens, 0.125), rtol=2e-3, atol=2e-3
        )


def test_several_splits_a_combine_step(monkeypatch) -> None:
    """``BLOCK_SP = 3`` over 7 splits: steps of 3, 3 and 1, the last step's 2 splits past SP masked to
    weigh 0.  Every score is far below 0 (q >= 0, k <= 0, scale 4: row maxima near -200 in log2 units),
    so a phantom split of maximum 0 would underflow every weight to 0 and leave 0/0 rows."""
    from wavec.kernels import split_combine

    monkeypatch.setattr(split_combine, "SPLITS_PER_STEP", 3)
    q, k, v, lens = dk.dense_kv_inputs([450, 3], 2, 4, 2, 64, wc.f16, 450)
    q, k = q.abs(), -k.abs()
    out = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=7, scale=4.0, backend="emulator", one_launch=True)
    assert not out.isnan().any()
    want = dk.reference_decode_attention(q, k, v, lens, scale=4.0)
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)
