"""GPU tier for routing-aware MoE dispatch end to end: with a fitted table registered for the shape on this
GPU, ``fused_experts`` picks the configuration of least predicted cost for the call's histogram (the CUDA
graph of the choice agrees with the same computation on the CPU), differently for balanced and skewed
routing, and stays accurate; the choice's host launches take <= 10 us; under a CUDA-graph capture the
table's static choice is captured (counted); choose-before-capture with ``choose_for_graph``; and
``python -m wavec tune moe`` on a reduced pool writes a table that a new process loads and dispatches by."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from wavec.kernels import fused_moe as fm
from wavec.kernels import moe_dispatch as md
from wavec.kernels.fused_moe import MoeConfig
from wavec.tuning import moe as tm

pytestmark = pytest.mark.gpu
TOL = 2e-2
E, K, H, INTER = 64, 8, 1024, 512
SHAPE = tm.MoeShape(E, K, H, INTER, "bf16")
SMALL, LARGE = MoeConfig(16, 32, 64, 64, 3), MoeConfig(64, 64, 128, 64, 3)


def dev() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture
def table():
    """SMALL: 0.1 us per up-projection CTA (16 per 16-row block); LARGE: 60 us flat.  T = 256 of random
    routing is ~32 ids per expert (at least 128 blocks: >= 2048 CTAs, >= 205 us: LARGE); T = 32 with
    every token on the same 8 experts is 8 x 32 ids (16 blocks, 256 CTAs, 25.6 us: SMALL)."""
    pool = [tm.PoolConfig(SMALL, 264, 264), tm.PoolConfig(LARGE, 132, 132)]
    coef = [(0.0, 0.0, 1e-7, 0.0, 0.0, 0.0, 0.0), (6e-5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)]
    t = tm.MoeTable(SHAPE, md.device_name(dev()), 132, pool, [1.0, 1.0], coef)
    md.register_table(t)
    md.reset_report()
    yield t
    md.forget_tables()
    md.reset_report()


def inputs(t: int, skewed: bool, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(t, H, device="cuda", generator=g).bfloat16()
    w1 = (torch.randn(E, 2 * INTER, H, device="cuda", generator=g) / H**0.5).bfloat16()
    w2 = (torch.randn(E, H, INTER, device="cuda", generator=g) / INTER**0.5).bfloat16()
    logits = torch.randn(t, E, device="cuda", generator=g)
    if skewed:  # the top 8 experts take every token
        logits[:, :8] += 100.0
    wts, ids = torch.topk(torch.softmax(logits, -1), K)
    return x, w1, w2, wts, ids.to(torch.int32)


def check(got, want) -> None:
    assert torch.isfinite(got).all(), "an output element was not written"
    torch.testing.assert_close(got.float(), want, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("t, skewed, want", [(256, False, LARGE), (32, True, SMALL)])
def test_routing_aware_end_to_end(table, t: int, skewed: bool, want: MoeConfig) -> None:
    x, w1, w2, wts, ids = inputs(t, skewed, seed=t)
    hist = torch.bincount(ids.flatten().long(), minlength=E).tolist()
    assert table.pool[table.choose(hist)].cfg == want
    out = torch.full((t, H), float("nan"), dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, out=out)
    report = md.dispatch_report()
    assert report["last"] == want and report["routing_aware"] == 1 and report["fallback_no_table"] == 0
    check(out, fm.reference(x, w1, w2, wts, ids))


def test_graph_choice_matches_the_cpu(table) -> None:
    """The captured choice on the GPU and the eager one on the CPU agree on random skews and sizes."""
    rng = torch.Generator().manual_seed(0)
    for t in (1, 300, 7, 290, 64, 1024):  # 300 then 290 share a graph: the longer tail goes back to padding
        for skew in (0.0, 1.0, 3.0):
            logits = torch.randn(t, E, generator=rng) - skew * torch.arange(E)
            ids = torch.topk(logits, K).indices.to(torch.int32).flatten()
            on_gpu = md.choose(table, ids.cuda(), E, E, t)
            cpu = md._Chooser(table, md.bucket(ids.numel()), E, E, ids.device)
            assert on_gpu == cpu.index_of[cpu(ids)], (t, skew)


def test_capture_takes_the_static_choice(table) -> None:
    x, w1, w2, wts, ids = inputs(32, True, seed=3)
    out = torch.empty(32, H, dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, config=table.pool[table.static_index(32)].cfg, out=out)  # compile
    graph = torch.cuda.CUDAGraph()
    with pytest.warns(UserWarning, match="during a CUDA-graph capture"), torch.cuda.graph(graph):
        fm.fused_experts(x, w1, w2, wts, ids, out=out)
    report = md.dispatch_report()
    assert report["capture_static"] == 1 and report["last"] == table.pool[table.static_index(32)].cfg
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check(out, fm.reference(x, w1, w2, wts, ids))


def test_choose_before_capture(table) -> None:
    """CUDA-graph mode: the configuration for recent steps' histograms, then capture with ``config=``."""
    x, w1, w2, wts, ids = inputs(32, True, seed=4)
    cfg = md.choose_for_graph(table, [md.histogram(ids, E), md.histogram(ids, E)])
    assert cfg == SMALL
    out = torch.empty(32, H, dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, config=cfg, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fm.fused_experts(x, w1, w2, wts, ids, config=cfg, out=out)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check(out, fm.reference(x, w1, w2, wts, ids))


def test_tune_cli_reduced_then_reused(tmp_path) -> None:
    """``python -m wavec tune moe`` on 3 configurations x 3 points writes the table; a new process loads
    it from the tuning cache and dispatches by it (no fallback)."""
    env = {**os.environ, "WAVEC_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "wavec", "tune", "moe", "--model", "OLMoE-1B-7B", "--max-configs", "3",
           "--points", "3", "--budget-min", "4"]  # fmt: skip
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "configs:" in run.stdout and "rule: L2 pressure" in run.stdout and "regret over 3 points" in run.stdout
    files = list((tmp_path / "cache" / "tuning").glob("*routing_aware*.json"))
    assert len(files) == 1
    entries = json.loads(files[0].read_text())["entries"]
    assert len(entries) == 1 and len(next(iter(entries.values()))["pool"]) <= 3
    code = (
        "import torch\n"
        "from wavec.kernels import fused_moe as fm, moe_dispatch as md\n"
        "from wavec.tuning import moe_profile as mp, moe as tm\n"
        "s = tm.model('OLMoE-1B-7B'); w1, w2 = mp.weights(s)\n"
        "wts, ids, _ = mp.routing(16, s.experts, s.top_k, 0.7, False, 0)\n"
        "x = torch.randn(16, s.hidden, device='cuda').bfloat16()\n"
        "out = fm.fused_experts(x, w1, w2, wts, ids)\n"
        "err = float((out.float() - fm.reference(x, w1, w2, wts, ids)).abs().max())\n"
        "r = md.dispatch_report(); print(r['routing_aware'], r['fallback_no_table'], err < 2e-2)\n"
    )
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.split() == ["1", "0", "True"]
