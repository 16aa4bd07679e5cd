"""GPU tier: ``wc.arrive`` and decode attention in one launch (the last split of each group combines).
Many groups of many workgroups arriving at once, launch after launch on one counter buffer; one-launch
dense and paged decode against torch in f32 at real sizes with 1..64 splits (NaN-filled outputs: every
element written); CUDA-graph replays twice in a row (the counters the kernel returns to 0 serve the next
replay) with new inputs copied in between; two streams running the same call shape at once (each stream
its own counters); the counters zero after every call."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import arrive_kernels as ak
from tests import dyn_kernels as dk
from wavec.kernels import decode
from wavec.kernels.paged_attention import paged_attention

pytestmark = pytest.mark.gpu
TOL = {"f16": 2e-3, "bf16": 1.6e-2}


@pytest.mark.parametrize("waves", [1, 2])
def test_arrive_many_groups_many_launches(waves: int) -> None:
    kernel = wc.compile(ak.make_last_sums(32, waves), {ak.T: ak.MAX_SPLITS})
    groups, splits = 4096, ak.MAX_SPLITS
    counter = torch.zeros(groups, dtype=torch.int32, device="cuda")
    parts = torch.zeros(groups, ak.MAX_SPLITS, device="cuda")
    for _ in range(20):
        x = torch.randn(groups, splits, device="cuda")
        out = torch.full((groups,), float("nan"), device="cuda")
        kernel(x, parts, counter, out)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, (2 * x).sum(1), rtol=1e-5, atol=1e-4)
        assert (counter == 0).all()


DENSE = [  # dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits (None: the rule)
    (wc.bf16, [2048], 2048, 1, 32, 8, 128, None),  # the shape: B = 1, GQA 4
    (wc.bf16, [8192], 8192, 1, 32, 8, 128, None),
    (wc.f16, [8191, 1, 33, 4097], 8192, 1, 32, 8, 128, 33),
    (wc.bf16, [777, 1000, 3], 1024, 3, 32, 8, 128, 7),
    (wc.f16, [4096] * 6, 4096, 4, 64, 8, 128, 64),
    (wc.bf16, [16, 1200, 31], 1200, 16, 16, 1, 64, 2),
    (wc.bf16, [5000, 129], 5000, 2, 8, 8, 64, 1),
]


@pytest.mark.parametrize(
    "dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits",
    DENSE,
    ids=[f"{c[0].name}-b{len(c[1])}-s{c[2]}-q{c[3]}-h{c[4]}x{c[5]}-d{c[6]}-sp{c[7]}" for c in DENSE],
)
def test_one_launch_matches_reference(dtype, seq_lens, s_max, q_len, heads, kv_heads, head_dim, splits) -> None:
    for _ in range(3):
        q, k, v, lens = dk.dense_kv_inputs(seq_lens, q_len, heads, kv_heads, head_dim, dtype, s_max, "cuda")
        out = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=splits, one_launch=True)
        torch.cuda.synchronize()
        assert not out.isnan().any()
        want = dk.reference_decode_attention(q, k, v, lens)
        torch.testing.assert_close(out.float(), want, rtol=TOL[dtype.name], atol=TOL[dtype.name])
    runs = [r for r in decode._DISPATCH.table.values() if r.counters is not None]
    assert runs and all((b == 0).all() for r in runs for b in r.counters.buffers.values())


def _fill(dst: tuple, src: tuple) -> None:
    for d, s in zip(dst, src):
        d.copy_(s)


@pytest.mark.parametrize("paged", [False, True])
def test_graph_replays_twice_in_a_row(paged: bool) -> None:
    """Two replays back to back (no synchronisation between), new inputs copied in before each."""
    if paged:
        fresh = [dk.paged_kv_inputs([2047, 5, 300], 1, 32, 8, 128, 16, wc.bf16, "cuda") for _ in range(3)]

        def call(q, kc, vc, bt, lens):
            return paged_attention(q, kc, vc, bt, lens, one_launch=True)

        ref = dk.reference_paged_attention
    else:
        fresh = [dk.dense_kv_inputs([2048, 300], 1, 32, 8, 128, wc.bf16, 2048, "cuda") for _ in range(3)]

        def call(q, k, v, lens):
            return decode.decode_attention(q, k, v, seq_lens=lens, one_launch=True)

        ref = dk.reference_decode_attention
    static = tuple(t.clone() for t in fresh[0])
    call(*static)  # warm-up: plan, compile, the counters' reserve
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call(*static)
    results = []
    for inputs in fresh[1:]:
        _fill(static, inputs)
        out.fill_(float("nan"))
        graph.replay()
        results.append(out.clone())
    torch.cuda.synchronize()
    for got, inputs in zip(results, fresh[1:]):
        assert not got.isnan().any()
        torch.testing.assert_close(got.float(), ref(*inputs), rtol=1.6e-2, atol=1.6e-2)


def test_two_streams_at_once() -> None:
    """The same call shape on two streams concurrently: each stream's launches use their own counters."""
    sets = [dk.dense_kv_inputs([4096, 1000], 1, 32, 8, 128, wc.bf16, 4096, "cuda") for _ in range(2)]
    decode.decode_attention(*sets[0][:3], seq_lens=sets[0][3], one_launch=True)  # plan and compile
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in sets]
    outs: list = [[], []]
    for _ in range(10):
        for i, (s, (q, k, v, lens)) in enumerate(zip(streams, sets)):
            with torch.cuda.stream(s):
                outs[i].append(decode.decode_attention(q, k, v, seq_lens=lens, one_launch=True))
    torch.cuda.synchronize()
    for (q, k, v, lens), got in zip(sets, outs):
        want = dk.reference_decode_attention(q, k, v, lens)
        for o in got:
            torch.testing.assert_close(o.float(), want, rtol=1.6e-2, atol=1.6e-2)
    run = next(r for r in decode._DISPATCH.table.values() if r.counters is not None and len(r.counters.buffers) >= 3)
    assert all((b == 0).all() for b in run.counters.buffers.values())
