"""Split-KV decode on the host fast path (``decode_attention``, ``paged_attention``; kernels/decode_host.py)
with the null driver: kernels compiled for sm_90a, CPU tensors, every launch recorded.  A repeated call
makes no planning call (no validation, no split rule, no compile), launches the split kernel and the
combine with this call's pointers and the cached partials, and returns a fresh output; another thread,
a capture-sized cap or a new shape gets partials of its own."""

from __future__ import annotations

import threading

import pytest
import torch

import wavec
import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels import decode, decode_host
from wavec.kernels import paged_attention as pa
from wavec.kernels.fastpath import Decisions
from wavec.runtime import null_driver

SPLITS = 4  # the null driver's device is "cpu": the rule would assume the emulator's 2 SMs


@pytest.fixture
def record(monkeypatch):
    """The null driver's record; the kernels and decisions built on it are dropped after the test (fresh
    tables now, the modules' own restored by monkeypatch)."""
    monkeypatch.setattr(decode, "_COMPILED", {})
    monkeypatch.setattr(decode, "_DISPATCH", Decisions("decode_attention"))
    monkeypatch.setattr(pa, "_DISPATCH", Decisions("paged_attention"))
    log: list = []
    undo = null_driver.install(log)
    yield log
    undo()


def _forbid_planning(monkeypatch) -> None:
    """Every function a call's decision goes through raises from now on."""

    def planned(*args, **kwargs):
        raise AssertionError("a repeated call planned again")

    for module, name in (
        (decode, "_plan_dense"), (decode, "plan_split_kv"), (decode, "num_splits_for"), (decode, "decode_config"),
        (decode, "check_query_and_cache"), (decode, "check_index_tensor"), (decode, "check_lengths"),
        (decode, "combine_kernel"), (pa, "_plan"), (pa, "_check_blocks"), (wavec, "compile"),
    ):  # fmt: skip
        monkeypatch.setattr(module, name, planned)


def _dense(seq_lens: list[int]) -> tuple:
    return dk.dense_kv_inputs(seq_lens, 1, 8, 2, 128, wc.f16, 64)


def _call(inputs: tuple, **options):
    q, k, v, lens = inputs
    return decode.decode_attention(q, k, v, seq_lens=lens, backend="cuda", **options)


def test_repeated_dense_call_plans_nothing(record, monkeypatch) -> None:
    q, k, v, lens = _dense([64, 30])
    decode.decode_attention(q, k, v, seq_lens=lens, num_splits=SPLITS, backend="cuda")
    _forbid_planning(monkeypatch)
    del record[:]
    calls = []
    for lengths in ([9, 64], [1, 2]):  # new tensors of the same keys, other lengths
        q2, k2, v2, lens2 = _dense(lengths)
        out = decode.decode_attention(q2, k2, v2, seq_lens=lens2, num_splits=SPLITS, backend="cuda", scale=0.25)
        assert out.shape == q2.shape and out.dtype == q2.dtype
        launched = null_driver.launches(record)[2 * len(calls) :]
        assert len(launched) == 2  # the split kernel and the combine: nothing else reaches the driver
        (split_grid, split, consts), (_g, combine, _c) = launched
        assert split[:4] == [q2.data_ptr(), k2.data_ptr(), v2.data_ptr(), lens2.data_ptr()]
        assert combine[:3] == split[4:7] and combine[3] == out.data_ptr()  # the combine reads the partials
        assert split_grid[1] == SPLITS * 2  # grid axis 1: splits x kv heads, decided once
        calls.append((split[4:7], out))
    (run,) = decode._DISPATCH.table.values()
    (space,) = run.spaces.values()
    assert calls[0][0] == calls[1][0] == list(space.ptrs)  # the cached partials
    assert calls[0][1].data_ptr() != calls[1][1].data_ptr()  # a fresh output per call
    assert run.check is None  # a GPU launch (the null driver's) checks no lengths per call


def test_seq_lens_none_uses_the_plans_lengths(record, monkeypatch) -> None:
    q, k, v, _ = _dense([64, 64])
    decode.decode_attention(q, k, v, num_splits=SPLITS, backend="cuda")
    _forbid_planning(monkeypatch)
    del record[:]
    decode.decode_attention(*_dense([64, 64])[:3], num_splits=SPLITS, backend="cuda")
    (run,) = decode._DISPATCH.table.values()
    assert run.lengths.tolist() == [64, 64] and run.lengths.dtype == torch.int32
    assert null_driver.launches(record)[0][1][3] == run.lengths.data_ptr()


def test_each_thread_a_new_shape_and_an_oversized_workspace_get_their_own(record, monkeypatch) -> None:
    q, k, v, lens = _dense([64, 30])
    decode.decode_attention(q, k, v, seq_lens=lens, num_splits=SPLITS, backend="cuda")
    thread = threading.Thread(
        target=lambda: decode.decode_attention(q, k, v, seq_lens=lens, num_splits=SPLITS, backend="cuda")
    )
    thread.start()
    thread.join()
    decode.decode_attention(q, k, v, seq_lens=lens, num_splits=2, backend="cuda")  # another plan
    mine, theirs, other = (ptrs[4] for _g, ptrs, _c in null_driver.launches(record)[::2])
    assert len({mine, theirs, other}) == 3
    first = next(iter(decode._DISPATCH.table.values()))
    assert len(first.spaces) == 2
    monkeypatch.setattr(decode_host.BUDGET, "per_entry", 0)  # past the cap: partials per call, none kept
    run = decode.plan_split_kv("decode_attention", q, 2, 64, (SPLITS, None, False), lambda *a: first.split, None, None)
    run((q, k, v, lens), None)
    assert not run.spaces


def test_decisions_are_counted_per_tensor_keys(record, monkeypatch) -> None:
    """The split rule runs once per tensor keys; an unhashable option decides on every call."""
    counted = []
    rule = decode.num_splits_for
    monkeypatch.setattr(decode, "num_splits_for", lambda *a: counted.append(a) or rule(*a))
    for _ in range(3):
        _call(_dense([64, 30]))
    assert len(counted) == 1
    _call(dk.dense_kv_inputs([64, 30, 5], 1, 8, 2, 128, wc.f16, 64))
    assert len(counted) == 2
    for _ in range(2):
        _call(_dense([64, 30]), config=[32, 2])
    assert len(counted) == 4
    _call(_dense([64, 30]), num_splits=2)
    for bad, message in (({"num_splits": 2.0}, "num_splits must be an int"), ({"one_launch": 0}, "one_launch must")):
        with pytest.raises(wc.WavecError, match=f"decode_attention: {message}"):  # not the plan of 2 / False
            _call(_dense([64, 30]), **{"num_splits": 2, **bad})


def test_repeated_paged_and_one_launch_calls_plan_nothing(record, monkeypatch) -> None:
    shape = ([40, 7], 1, 8, 2, 128, 16, wc.f16)
    tensors = dk.paged_kv_inputs(*shape)
    pa.paged_attention(*tensors, num_splits=SPLITS, backend="cuda")
    dense = _dense([64, 30])
    _call(dense, num_splits=SPLITS, one_launch=True)
    _forbid_planning(monkeypatch)
    del record[:]
    q, kc, vc, bt, lens = tensors
    out = pa.paged_attention(q, kc, vc, bt, lens + 0, num_splits=SPLITS, backend="cuda")
    (_g, split, _c), (_g2, combine, _c2) = null_driver.launches(record)
    assert split[:4] == [q.data_ptr(), kc.data_ptr(), vc.data_ptr(), bt.data_ptr()] and combine[3] == out.data_ptr()
    del record[:]
    one = _call(dense, num_splits=SPLITS, one_launch=True)
    ((_g, ptrs, _c),) = null_driver.launches(record)  # the split kernel combines: one launch
    assert ptrs[-1] == one.data_ptr()


def test_full_lengths_shorter_than_q_len_are_named() -> None:
    q, k, v, _ = dk.dense_kv_inputs([3], 4, 4, 2, 64, wc.f16)
    with pytest.raises(wc.WavecError, match="decode_attention: seq_lens is None .* S_max = 3 < q_len = 4"):
        decode.decode_attention(q, k, v, backend="emulator")


def test_split_rule_per_variant() -> None:
    """The mma.sync kernel fills ``SPLIT_WAVES`` workgroups an SM (rounded up); the wgmma variant at most one
    an SM (rounded down: its 96 KB of stages), the fastest split count of session 17's sweep at B = 8-32
    (GQA 32/8 on 132 SMs); both keep splits of ``MIN_SPLIT_KEYS`` keys or more."""
    from wavec.kernels import decode_variants as variants

    per_sm = variants.Variant(mma="wgmma").split_per_sm
    assert [decode.num_splits_for(b, 8, 1, 2048, 132, per_sm) for b in (8, 16, 32)] == [2, 1, 1]
    assert [decode.num_splits_for(b, 8, 1, 2048, 132) for b in (8, 16, 32)] == [5, 3, 2]
    assert decode.num_splits_for(1, 8, 1, 2048, 132, per_sm) == 16
    assert decode.num_splits_for(1, 8, 1, 300, 132, per_sm) == 300 // decode.MIN_SPLIT_KEYS
    assert variants.DEFAULT.split_per_sm is None
