"""GPU tier: the two-launch decode's cached partials (``kernels/decode_host.py``).  Calls in a row with new
inputs and lengths (the workspace rewritten each call, results per call); two streams at once (each its
own workspace); a CUDA graph captured after eager calls, replayed with eager calls of the same shape in
between (the graph's partials are its own), dense and paged; against torch in f32."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels import decode
from wavec.kernels.paged_attention import paged_attention

pytestmark = pytest.mark.gpu
TOL = 1.6e-2  # bf16


def _dense(lengths: list[int]) -> tuple:
    return dk.dense_kv_inputs(lengths, 1, 32, 8, 128, wc.bf16, 2048, "cuda")


def _call(q, k, v, lens):
    return decode.decode_attention(q, k, v, seq_lens=lens)


def test_calls_in_a_row_with_new_lengths() -> None:
    sets = [_dense(lengths) for lengths in ([2048, 7], [3, 2048], [1000, 1001])]
    outs = [_call(*s) for s in sets for _ in range(2)]  # queued back to back, no synchronisation
    torch.cuda.synchronize()
    for i, s in enumerate(sets):
        want = dk.reference_decode_attention(*s)
        for got in outs[2 * i : 2 * i + 2]:
            torch.testing.assert_close(got.float(), want, rtol=TOL, atol=TOL)


def test_two_streams_at_once() -> None:
    decode._DISPATCH.clear()  # the worker's earlier tests leave runners of the same output shape (paged ones)
    sets = [_dense([2048, 500]), _dense([40, 2048])]
    _call(*sets[0])
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in sets]
    outs: list = [[], []]
    for _ in range(10):
        for i, (s, inputs) in enumerate(zip(streams, sets)):
            with torch.cuda.stream(s):
                outs[i].append(_call(*inputs))
    torch.cuda.synchronize()
    for inputs, got in zip(sets, outs):
        want = dk.reference_decode_attention(*inputs)
        for o in got:
            torch.testing.assert_close(o.float(), want, rtol=TOL, atol=TOL)
    run = next(r for r in decode._DISPATCH.table.values() if r.out_shape == tuple(sets[0][0].shape))
    assert len(run.spaces) >= 3  # the default stream's and each side stream's


@pytest.mark.parametrize("paged", [False, True])
def test_graph_and_eager_calls_interleaved(paged: bool) -> None:
    if paged:
        fresh = [dk.paged_kv_inputs([2047, 5, 300], 1, 32, 8, 128, 16, wc.bf16, "cuda") for _ in range(3)]
        call, ref = paged_attention, dk.reference_paged_attention
    else:
        fresh = [_dense([2048, 300]) for _ in range(3)]
        call, ref = _call, dk.reference_decode_attention
    static = tuple(t.clone() for t in fresh[0])
    call(*static)  # plan, compile, the eager workspace
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call(*static)
    results, eager = [], []
    for inputs in fresh[1:]:
        for d, s in zip(static, inputs):
            d.copy_(s)
        out.fill_(float("nan"))
        graph.replay()
        eager.append(call(*fresh[0]))  # the eager workspace between replays: must not be the graph's
        results.append(out.clone())
    torch.cuda.synchronize()
    for got, inputs in zip(results, fresh[1:]):
        assert not got.isnan().any()
        torch.testing.assert_close(got.float(), ref(*inputs), rtol=TOL, atol=TOL)
    for got in eager:
        torch.testing.assert_close(got.float(), ref(*fresh[0]), rtol=TOL, atol=TOL)
