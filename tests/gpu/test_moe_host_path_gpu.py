"""GPU tier for the MoE host path (docs/performance.md, "Host path"): ``fused_experts`` through its prepared
step stays exact when the routing, T and the combine change from call to call; two streams (and two
threads) running the same shape at once each get their own workspace; the cached workspaces replay in a
CUDA graph next to eager calls; a repeated decode call's Python share stays small (the benchmark's
number, ``benchmarks/host_latency.py``, is the measurement; this bounds regressions); a view launches the
strided variant and is counted."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

from tests.gpu.test_fused_moe_gpu import check, inputs
from wavec.kernels import fused_moe as fm
from wavec.kernels import moe_routing

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # shapes without a fitted table: the static rule, warned about once
        yield


def test_calls_that_change_between_steps() -> None:
    for t, skew, det, seed in [(1, 0.0, True, 1), (1, 4.0, True, 2), (16, 0.0, False, 3), (1, 2.0, True, 4),
                               (16, 4.0, False, 5), (129, 0.0, True, 6), (16, 0.0, True, 7)]:  # fmt: skip
        x, w1, w2, wts, ids = inputs(t, 2048, 1024, 64, 8, skew=skew, seed=seed)
        out = torch.full((t, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
        fm.fused_experts(x, w1, w2, wts, ids, deterministic=det, out=out)
        check(out, fm.reference(x, w1, w2, wts, ids))
        again = fm.fused_experts(x, w1, w2, wts, ids, deterministic=det)  # no out: a fresh tensor
        assert again.data_ptr() != out.data_ptr()
        check(again, fm.reference(x, w1, w2, wts, ids))


def test_two_streams_run_one_shape_at_once() -> None:
    """Eight calls on two streams, queued back to back (a long GEMM-bound T on each so they overlap):
    each stream's workspace is its own, so every result matches its reference."""
    cases = [inputs(256, 2048, 1024, 64, 8, skew=s, seed=10 + j) for j, s in enumerate((0.0, 3.0) * 4)]
    w1, w2 = cases[0][1], cases[0][2]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    outs = []
    for j, (x, _w1, _w2, wts, ids) in enumerate(cases):
        with torch.cuda.stream(streams[j % 2]):
            outs.append(fm.fused_experts(x, w1, w2, wts, ids))
    torch.cuda.synchronize()
    for (x, _w1, _w2, wts, ids), out in zip(cases, outs, strict=True):
        check(out, fm.reference(x, w1, w2, wts, ids))


def test_two_threads_run_one_shape_at_once() -> None:
    x, w1, w2, wts, ids = inputs(64, 2048, 1024, 64, 8, seed=20)
    x2, _, _, wts2, ids2 = inputs(64, 2048, 1024, 64, 8, skew=3.0, seed=21)
    fm.fused_experts(x, w1, w2, wts, ids)  # built once, before the threads
    torch.cuda.synchronize()  # the threads' new streams do not wait for the default stream's inputs
    results: dict[int, list] = {0: [], 1: []}

    def work(j: int, args: tuple) -> None:
        with torch.cuda.stream(torch.cuda.Stream()):
            for _ in range(20):
                results[j].append(fm.fused_experts(*args))
            torch.cuda.current_stream().synchronize()

    threads = [threading.Thread(target=work, args=(0, (x, w1, w2, wts, ids))),
               threading.Thread(target=work, args=(1, (x2, w1, w2, wts2, ids2)))]  # fmt: skip
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    want = (fm.reference(x, w1, w2, wts, ids), fm.reference(x2, w1, w2, wts2, ids2))
    for j in (0, 1):
        for out in results[j]:
            check(out, want[j])


def test_graph_replay_beside_eager_calls() -> None:
    """A captured call keeps the workspace of the capture stream (allocated in the graph's pool); eager
    calls of the same shape on the default stream use their own, and the replay after them is exact."""
    x, w1, w2, wts, ids = inputs(16, 2048, 1024, 64, 8, seed=30)
    out = torch.empty(16, 2048, dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, out=out, dispatch="static")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fm.fused_experts(x, w1, w2, wts, ids, out=out, dispatch="static")
    x2, _, _, wts2, ids2 = inputs(16, 2048, 1024, 64, 8, skew=3.0, seed=31)
    eager = fm.fused_experts(x2, w1, w2, wts2, ids2, dispatch="static")
    x.copy_(x2), wts.copy_(wts2), ids.copy_(ids2)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check(out, fm.reference(x2, w1, w2, wts2, ids2))
    check(eager, fm.reference(x2, w1, w2, wts2, ids2))


def test_routing_of_a_sliced_logits_view() -> None:
    """topk_softmax of a column slice (not dense): copied per call, exact (the kernel reads whole rows)."""
    wide = torch.randn(7, 96, device="cuda")
    for _ in range(2):
        w, i = moe_routing.topk_softmax(wide[:, :64], 8, True)
        moe_routing.check_routing(wide[:, :64], 8, True, w, i)


def test_a_view_is_counted_as_a_strided_variant() -> None:
    from wavec.kernels import rows
    from wavec.runtime import reset_variant_report, variant_report

    reset_variant_report()
    x = torch.randn(64, 1088, device="cuda", dtype=torch.float16)[:, :1024]
    for _ in range(2):
        got = rows.softmax(x)
        torch.testing.assert_close(got.float(), torch.softmax(x.float(), -1), atol=2e-3, rtol=2e-3)
    counts = [n for by_reason in variant_report().values() for why, n in by_reason.items() if why == "strided"]
    assert counts == [2]
