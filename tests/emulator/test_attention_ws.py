"""Warp-specialized flash attention (``make_attention(..., warp_specialize=True)``, wgmma, sm_90a) and the
empty-mbarrier release of its K/V stages (``async_copy="tma-mbarrier"``) on the emulator: race checker and
mbarrier checks on, the producer and consumer warpgroups run as cooperating threads (``emulator/coop.py``).

Against SDPA in f32 with NaN-prefilled outputs and a guard band (``check_attention``): f16 and bf16, BHSD and
BSHD, causal and not, sliding windows (three key loops on one set of mbarriers), GQA, KV lengths that are not
multiples of BLOCK_N (the masked edge loop), loops of 0, 1 and many iterations, d64 and d128, one and two
consumer warpgroups; bit for bit equal to the barrier-released TMA kernel of the same tile (the consumers'
arithmetic is unchanged).  A consumer that does not continue the stage count across the loops is caught, so
is a stage released before the wgmma reading it retired.
The refusals name the argument.
"""

from __future__ import annotations

import pytest
import torch
from test_attention import _inputs, _reference, _to_layout, check_attention

import wavec as wc
from tests.attention_ref import reference, visible
from wavec.emulator import coop
from wavec.emulator.interp import EmulatorError
from wavec.errors import ConstraintError, OptionError, WavecError
from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, attention, make_attention
from wavec.passes.hopper import pipeline_tma

CASES = [  # layout, dtype, causal, (B, H, KVH, Sq, Skv, D), (BLOCK_M, BLOCK_N, consumer warpgroups)
    ("bhsd", wc.f16, False, (1, 2, 2, 40, 72, 64), (64, 32, 1)),  # 2 full tiles + a ragged one
    ("bshd", wc.bf16, True, (1, 4, 2, 70, 70, 64), (128, 64, 2)),  # GQA, causal, two consumer warpgroups
    ("bhsd", wc.bf16, False, (1, 2, 1, 64, 1000, 64), (64, 32, 1)),  # 31 full tiles: every parity many times
    ("bhsd", wc.f16, True, (2, 4, 2, 130, 130, 128), (128, 128, 2)),  # d128: two boxes per tile
    ("bshd", wc.f16, False, (1, 2, 1, 130, 300, 128), (128, 128, 2)),  # GQA, ragged, d128, BSHD
    ("bhsd", wc.f16, False, (1, 1, 1, 64, 128, 64), (64, 64, 1)),  # a multiple of BLOCK_N: the edge loop is empty
    ("bhsd", wc.bf16, False, (1, 1, 1, 70, 20, 64), (64, 32, 1)),  # fewer keys than a tile: the full loop is empty
]


def _id(c) -> str:
    return f"{c[0]}-{c[1].name}-{'causal' if c[2] else 'full'}-{'x'.join(map(str, c[3]))}-{'x'.join(map(str, c[4]))}"


def _compile(dtype, layout, causal, d, cfg, ws=True, async_copy="auto", stages=2, **kw):
    bm, bn, groups = cfg
    definition = make_attention(
        dtype, layout, causal, groups, mma="wgmma", async_copy=async_copy, warp_specialize=ws, **kw
    )
    subs = {BLOCK_M: bm, BLOCK_N: bn, NUM_STAGES: stages, D: d}
    return wc.compile(definition, subs, backend="emulator", target="sm_90a", cache=False)


def _run(kernel, layout, q, k, v):
    qo, ko, vo = (_to_layout(x, layout) for x in (q, k, v))
    out = torch.full_like(qo, float("nan"))
    kernel(qo, ko, vo, out, q.shape[-1] ** -0.5)
    return out


@pytest.mark.parametrize("layout,dtype,causal,shape,cfg", CASES, ids=[_id(c) for c in CASES])
def test_ws_attention_matches_sdpa_and_the_barrier_kernel(layout, dtype, causal, shape, cfg, monkeypatch) -> None:
    switches = []
    real = coop.Baton.switch
    monkeypatch.setattr(coop.Baton, "switch", lambda self, me: switches.append(me) or real(self, me))
    b, h, kvh, sq, skv, d = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype)
    kernel = _compile(dtype, layout, causal, d, cfg)
    mlir = kernel.artifact.mlir
    assert mlir.count("nvvm.setmaxregister") == 2 and kernel.metadata.block == (cfg[2] * 128 + 128, 1, 1)
    assert mlir.count("gpu.barrier") == 1  # after the mbarrier init only: none between or in the loops
    check_attention(kernel, layout, dtype, q, k, v, _reference(q, k, v, causal))
    if -(-skv // cfg[1]) > 2 and not causal:  # more key tiles than stages: the producer waits for releases
        assert switches, "the producer never waited for a release"
    barrier = _compile(dtype, layout, causal, d, cfg, ws=False, async_copy="tma-barrier")
    assert torch.equal(_run(kernel, layout, q, k, v), _run(barrier, layout, q, k, v))


@pytest.mark.parametrize(
    "causal,window,shape",
    [("bottom_right", (40, -1), (1, 2, 2, 70, 200, 64)), (False, (50, 20), (1, 2, 1, 130, 260, 64))],
    ids=["br-win40", "win50-20"],
)
def test_ws_attention_windows(causal, window, shape) -> None:
    """Sliding windows: three key loops (masked, full, masked) on one set of mbarriers."""
    b, h, kvh, sq, skv, d = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, d, wc.f16)
    kernel = _compile(wc.f16, "bhsd", causal, d, (64, 32, 1), window=window)
    ok = visible(sq, skv, causal or None, *window)
    check_attention(kernel, "bhsd", wc.f16, q, k, v, reference(q, k, v, ok))


@pytest.mark.parametrize("cfg,d", [((128, 176, 2), 128), ((128, 112, 2), 128), ((128, 128, 2), 64)])
def test_ws_attention_wide_tiles(cfg, d) -> None:
    """The tiles ``benchmarks/attention_variants.py`` offers besides 128x128 (FlashAttention-3's 128x176)."""
    q, k, v = _inputs(1, 2, 1, 130, 400, d, wc.bf16)
    check_attention(_compile(wc.bf16, "bshd", False, d, cfg), "bshd", wc.bf16, q, k, v, _reference(q, k, v, False))


@pytest.mark.parametrize("causal", [False, True])
def test_mbarrier_release_without_a_producer(causal) -> None:
    """``async_copy="tma-mbarrier"``: the consumers release each stage after the iteration's last wgmma wait
    (no workgroup barrier in the loops); bit for bit equal to the barrier release."""
    q, k, v = _inputs(1, 4, 2, 100, 333, 64, wc.bf16)
    kernel = _compile(wc.bf16, "bhsd", causal, 64, (128, 64, 2), ws=False, async_copy="tma-mbarrier")
    mlir = kernel.artifact.mlir
    assert "nvvm.mbarrier.arrive" in mlir and "nvvm.setmaxregister" not in mlir
    check_attention(kernel, "bhsd", wc.bf16, q, k, v, _reference(q, k, v, causal))
    barrier = _compile(wc.bf16, "bhsd", causal, 64, (128, 64, 2), ws=False, async_copy="tma-barrier")
    assert torch.equal(_run(kernel, "bhsd", q, k, v), _run(barrier, "bhsd", q, k, v))


def test_a_loop_that_restarts_the_stage_count_is_caught(monkeypatch) -> None:
    """The edge loop's consumers wait for stage 0's first phase again (the full loop completed it): the
    emulator's parity check refuses the wait."""
    real = pipeline_tma._chain_init
    monkeypatch.setattr(pipeline_tma, "_chain_init", lambda *a: (real(*a)[0], 0))
    q, k, v = _inputs(1, 1, 1, 40, 72, 64, wc.f16)
    kernel = _compile(wc.f16, "bhsd", False, 64, (64, 32, 1))
    with pytest.raises(EmulatorError):
        check_attention(kernel, "bhsd", wc.f16, q, k, v, _reference(q, k, v, False))


def test_a_stage_released_before_its_reader_retired_is_caught(monkeypatch) -> None:
    """V's release moved next to K's (after S's wait, before P·V read V): the producer's refill of that stage
    then writes bytes P·V read after the release, which the race checker reports (it orders before a waiter
    only what the releasing waves did before they arrived)."""
    from wavec.errors import SharedMemoryRaceError
    from wavec.frontend.ops_hopper import MBarrierArrive
    from wavec.passes.hopper import insert_wgmma_fences as fences

    real = fences._place_stage_groups

    def early(g) -> None:
        real(g)
        k_release, v_release = [n for n in g.nodes if n.meta.get("op") is MBarrierArrive]
        k_release.append(v_release)

    monkeypatch.setattr(fences, "_place_stage_groups", early)
    q, k, v = _inputs(1, 2, 1, 130, 700, 64, wc.f16)
    kernel = _compile(wc.f16, "bhsd", False, 64, (128, 64, 2))
    with pytest.raises(SharedMemoryRaceError):
        check_attention(kernel, "bhsd", wc.f16, q, k, v, _reference(q, k, v, False))


@pytest.mark.parametrize(
    "kw,err,match",
    [
        (dict(async_copy="cp.async"), ConstraintError, "async_copy='cp.async'"),
        (dict(async_copy="tma-barrier"), ConstraintError, "async_copy='tma-barrier'"),
        (dict(intra_wg_overlap=True, stages=3), OptionError, "warp_specialize.*intra_wg_overlap"),
    ],
    ids=["cp.async", "tma-barrier", "overlap"],
)
def test_ws_attention_refused_with_reason(kw, err, match) -> None:
    with pytest.raises(err, match=match):
        _compile(wc.f16, "bhsd", False, 64, (64, 32, 1), **kw)


def test_ws_attention_needs_wgmma() -> None:
    with pytest.raises(OptionError, match="warp_specialize"):
        make_attention(wc.f16, "bhsd", False, 4, mma="mma_sync", warp_specialize=True)
    with pytest.raises(WavecError, match="warp_specialize"):
        attention(*_inputs(1, 1, 1, 8, 8, 64, wc.f16), mma="mma_sync", warp_specialize=True)


def test_ws_attention_on_sm80_is_refused() -> None:
    """sm_80 has neither wgmma nor TMA: the wgmma kernel is refused for its target, the sm_80 kernel
    (mma.sync) for the option."""
    with pytest.raises(ConstraintError, match="sm_90a"):
        wc.compile(
            make_attention(wc.f16, "bhsd", False, 1, mma="wgmma", warp_specialize=True),
            {BLOCK_M: 64, BLOCK_N: 32, NUM_STAGES: 2, D: 64},
            backend="emulator",
            target="sm_80",
            cache=False,
        )
    with pytest.raises(OptionError, match="warp_specialize"):
        make_attention(wc.f16, "bhsd", False, 4, mma="mma_sync", warp_specialize=True)


# ----- ping-pong of the two consumer warpgroups (make_attention(..., pingpong=True)) -----------------------

PINGPONG_CASES = [  # layout, dtype, causal, window, (B, H, KVH, Sq, Skv, D), (BLOCK_M, BLOCK_N)
    ("bhsd", wc.f16, False, (-1, -1), (1, 2, 1, 130, 300, 64), (128, 64)),  # ragged: the edge loop too
    ("bshd", wc.bf16, True, (-1, -1), (1, 4, 2, 200, 200, 64), (128, 64)),  # causal, GQA
    ("bhsd", wc.f16, "bottom_right", (60, -1), (1, 2, 2, 130, 260, 64), (128, 32)),  # window: three loops
    ("bhsd", wc.bf16, False, (-1, -1), (1, 1, 1, 128, 64, 128), (128, 128)),  # d128, fewer keys than a tile
]


@pytest.mark.parametrize(
    "layout,dtype,causal,window,shape,tile",
    PINGPONG_CASES,
    ids=[f"{c[0]}-{c[1].name}-{c[2]}-w{c[3][0]}-{'x'.join(map(str, c[4]))}" for c in PINGPONG_CASES],
)
def test_pingpong_matches_sdpa_and_the_ws_kernel(layout, dtype, causal, window, shape, tile) -> None:
    """The named barriers order issue only: the same bits as the warp-specialized kernel without them."""
    b, h, kvh, sq, skv, d = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype)
    cfg = (*tile, 2)
    kernel = _compile(dtype, layout, causal, d, cfg, window=window, pingpong=True)
    mlir = kernel.artifact.mlir
    loops = 3 if window != (-1, -1) else 2
    # per loop a sync before and an arrive after each of its 2 chains; the first arrive, the last sync
    assert mlir.count("nvvm.barrier.arrive id") == mlir.count("nvvm.barrier id") == 2 * loops + 1
    ok = visible(sq, skv, {True: "top_left", False: None}.get(causal, causal), *window)
    check_attention(kernel, layout, dtype, q, k, v, reference(q, k, v, ok))
    plain = _compile(dtype, layout, causal, d, cfg, window=window)
    assert torch.equal(_run(kernel, layout, q, k, v), _run(plain, layout, q, k, v))


def test_pingpong_without_the_last_sync_is_caught(monkeypatch) -> None:
    """Warpgroup 1's last arrival on warpgroup 0's barrier is never taken: the emulator's end-of-workgroup
    check names the barrier left half arrived."""
    from wavec.passes.hopper import pingpong_warpgroups as pp

    real = pp._barrier
    monkeypatch.setattr(pp, "_barrier", lambda g, action, turn, loc, only=None, **w: None if only == 0 else real(
        g, action, turn, loc, only, **w
    ))  # fmt: skip
    q, k, v = _inputs(1, 1, 1, 100, 100, 64, wc.f16)
    kernel = _compile(wc.f16, "bhsd", False, 64, (128, 64, 2), pingpong=True)
    with pytest.raises(EmulatorError, match="named barrier"):
        check_attention(kernel, "bhsd", wc.f16, q, k, v, _reference(q, k, v, False))


def test_pingpong_refusals() -> None:
    with pytest.raises(OptionError, match="pingpong"):
        make_attention(wc.f16, "bhsd", False, 2, mma="wgmma", pingpong=True)  # no producer
    with pytest.raises(OptionError, match="pingpong"):
        make_attention(wc.f16, "bhsd", False, 1, mma="wgmma", warp_specialize=True, pingpong=True)  # 1 consumer
    with pytest.raises(OptionError, match="warp_specialize"):
        attention(*_inputs(1, 1, 1, 8, 8, 64, wc.f16), mma="wgmma", warp_specialize="yes")


def test_pingpong_needs_an_attention_body() -> None:
    """A GEMM's chains are not read by a softmax: nothing to overlap, refused by the pass."""
    from test_warp_specialize_emulated import _kernel as ws_gemm
    from test_warp_specialize_emulated import _subs

    with pytest.raises(ConstraintError, match="pingpong"):
        ws_gemm(wc.f16, _subs(128, 64, 64, 3), (2, 1), pingpong=True)
