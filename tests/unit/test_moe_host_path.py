"""The MoE entry points on the host fast path (``fused_experts``, ``fused_moe``, ``topk_softmax``,
``moe_align_block_size``; docs/performance.md, "Host path"), with the null driver: kernels compiled for
sm_90a, CPU tensors, every launch recorded.  A repeated call makes no planning call (no validation, no
table lookup, no compile), launches the step's kernels with this call's pointers, and returns a fresh
output; another thread gets its own workspace."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch

import wavec
from wavec.kernels import fused_moe as fm
from wavec.kernels import moe_align, moe_routing
from wavec.kernels import moe_dispatch as md
from wavec.kernels.fastpath import Decisions
from wavec.runtime import null_driver

E, K, H, INTER = 8, 2, 64, 32


@pytest.fixture
def record(monkeypatch):
    """The null driver's record; the kernels and decisions built on it are dropped after the test (fresh
    tables now, the module's own restored by monkeypatch)."""
    for module, name in ((fm, "_COMPILED"), (fm, "_TARGETS"), (moe_align, "_COMPILED"), (moe_routing, "_COMPILED")):
        monkeypatch.setattr(module, name, {})
    monkeypatch.setattr(fm, "_DECIDED", Decisions("fused_experts"))
    monkeypatch.setattr(moe_align, "_CALLS", Decisions("moe_align_block_size"))
    monkeypatch.setattr(moe_routing, "_DECIDED", Decisions("topk_softmax"))
    log: list = []
    undo = null_driver.install(log)
    yield log
    undo()


def inputs(t: int, seed: int = 0, ids_dtype=torch.int32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, H, generator=g).bfloat16()
    w1, w2 = torch.randn(E, 2 * INTER, H, generator=g).bfloat16(), torch.randn(E, H, INTER, generator=g).bfloat16()
    wts, ids = torch.topk(torch.softmax(torch.randn(t, E, generator=g), -1), K)
    return x, w1, w2, wts, ids.to(ids_dtype)


def _forbid_planning(monkeypatch) -> None:
    """Every function a call's decision goes through raises from now on."""

    def planned(*args, **kwargs):
        raise AssertionError("a repeated call planned again")

    for module, name in (
        (fm, "_step"), (fm, "plan_kernels"), (fm, "_check_shapes"), (fm, "_check_options"), (fm, "remap_kernel"),
        (md, "lookup"), (md, "picker"), (moe_align, "new_call"), (moe_align, "_check"), (moe_routing, "_runner"),
        (moe_routing, "_check"), (wavec, "compile"),
    ):  # fmt: skip
        monkeypatch.setattr(module, name, planned)
    monkeypatch.setattr(fm.MoeConfig, "parse", planned)


def test_repeated_fused_experts_call_plans_nothing(record, monkeypatch) -> None:
    x, w1, w2, wts, ids = inputs(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no routing-aware table on "cpu": the static rule, warned about
        first = fm.fused_experts(x, w1, w2, wts, ids, backend="cuda")
    _forbid_planning(monkeypatch)
    del record[:]
    outs = []
    for seed in (1, 2):
        x2, _, _, wts2, ids2 = inputs(5, seed)  # new tensors, same keys
        outs.append(fm.fused_experts(x2, w1, w2, wts2, ids2, backend="cuda"))
        launched = null_driver.launches(record)
        assert len(launched) == 4  # routing, up, down, combine: nothing else reaches the driver
        align, up, down, combine = (ptrs for _grid, ptrs, _c in launched)
        assert align[0] == ids2.data_ptr()
        assert up[0] == x2.data_ptr() and up[3] == w1.data_ptr() and up[4] == wts2.data_ptr()
        assert down[3] == w2.data_ptr() and down[1:3] == up[1:3]
        assert combine[1] == ids2.data_ptr() and combine[2] == outs[-1].data_ptr()
        del record[:]
    ptrs = {first.data_ptr(), *(o.data_ptr() for o in outs)}
    assert len(ptrs) == 3  # a fresh output per call
    given = torch.empty(5, H, dtype=torch.bfloat16)
    with pytest.raises(AssertionError, match="planned again"):  # out= is another key: decided anew
        fm.fused_experts(x, w1, w2, wts, ids, out=given, backend="cuda")


def test_converted_ids_and_weights_and_the_atomic_combine(record, monkeypatch) -> None:
    """int64 ids and bf16 weights are copied into the step's workspace (a library copy, no driver launch);
    the atomic combine launches routing, up and down."""
    x, w1, w2, wts, ids = inputs(6, ids_dtype=torch.int64)
    kw = {"deterministic": False, "backend": "cuda", "config": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32}}
    fm.fused_experts(x, w1, w2, wts.bfloat16(), ids, **kw)
    _forbid_planning(monkeypatch)
    del record[:]
    before = md.dispatch_report()["config"]
    fm.fused_experts(x, w1, w2, wts.bfloat16(), ids, **kw)
    assert len(null_driver.launches(record)) == 3 and md.dispatch_report()["config"] == before + 1


def test_expert_map_adds_the_remap_launch(record, monkeypatch) -> None:
    x, w1, w2, wts, ids = inputs(4)
    emap = torch.arange(E, dtype=torch.int32)
    kw = {"expert_map": emap, "global_num_experts": E, "backend": "cuda", "dispatch": "static"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fm.fused_experts(x, w1, w2, wts, ids, **kw)
    _forbid_planning(monkeypatch)
    del record[:]
    fm.fused_experts(x, w1, w2, wts, ids, **kw)
    remap, align = (ptrs for _grid, ptrs, _c in null_driver.launches(record)[:2])
    assert len(null_driver.launches(record)) == 5
    assert remap[:2] == [ids.data_ptr(), emap.data_ptr()] and align[0] == remap[2]  # the local ids


def test_each_thread_has_its_own_workspace(record) -> None:
    x, w1, w2, wts, ids = inputs(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fm.fused_experts(x, w1, w2, wts, ids, backend="cuda")
        del record[:]
        fm.fused_experts(x, w1, w2, wts, ids, backend="cuda")
        thread = threading.Thread(target=lambda: fm.fused_experts(x, w1, w2, wts, ids, backend="cuda"))
        thread.start()
        thread.join()
    launched = null_driver.launches(record)
    mine, theirs = launched[1][1], launched[5][1]  # the up-projections
    assert mine[0] == theirs[0] and mine[5] != theirs[5]  # same input, another intermediate buffer


def test_routing_entry_points_plan_once(record, monkeypatch) -> None:
    logits = torch.randn(5, E)
    moe_routing.topk_softmax(logits, K, True, backend="cuda")
    ids = torch.randint(0, E, (5, K), dtype=torch.int32)
    moe_align.moe_align_block_size(ids, E, 16, backend="cuda")
    x, w1, w2, _, _ = inputs(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from wavec.kernels.fused_moe import fused_moe

        fused_moe(x, w1, w2, logits, K, True, backend="cuda")
    _forbid_planning(monkeypatch)
    del record[:]
    weights, got = moe_routing.topk_softmax(logits, K, True, backend="cuda")
    assert weights.shape == got.shape == (5, K) and null_driver.launches(record)[0][1][0] == logits.data_ptr()
    sorted_ids, expert_ids, _ntp, counts = moe_align.moe_align_block_size(ids, E, 16, backend="cuda")
    assert counts.shape == (E,) and sorted_ids.numel() == 5 * K + E * 15
    fused_moe(x, w1, w2, logits, K, True, backend="cuda")
    assert len(null_driver.launches(record)) == 2 + 5  # topk, align; then topk, align, up, down, combine
