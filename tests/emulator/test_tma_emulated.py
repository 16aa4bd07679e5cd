"""Emulator tier for the TMA pipeline of the Hopper GEMM (sm_90a): ``cp.async.bulk.tensor`` boxes decoded
from the launcher's tensor maps, copied with the 128-byte swizzle and zero-filled out of bounds, completing
on mbarriers (phases, transaction counts), stage reuse through empty mbarriers ("tma-mbarrier") or the
workgroup barrier ("tma-barrier"), and which of them "auto" picks.  Numerics against torch in float64 on
fresh random inputs (seed in every failure message), odd M/N/K; the emulator rejects broken
synchronisation; configurations TMA cannot serve and tensors it cannot describe get errors that say why."""

from __future__ import annotations

import pytest
import torch
from test_kernels_emulated import TORCH_DTYPE, run_gemm

import wavec as wc
from wavec.emulator.interp import EmulatorError
from wavec.errors import ArgumentError, ConstraintError
from wavec.kernels import gemm as gm
from wavec.passes.hopper import insert_wgmma_fences as fences_pass
from wavec.passes.hopper import pipeline_tma
from wavec.tuning.plan import schedule

WGMMA = {wc.f16: wc.MMAType.NV_WGMMA_F32_64xNx16_F16, wc.bf16: wc.MMAType.NV_WGMMA_F32_64xNx16_BF16}


def _subs(bm: int, bn: int, bk: int, stages: int) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: stages, gm.GROUP_M: 2}


# (id, subs, warpgroups, shapes).  K = 40, 72, 136, 200 are not multiples of BLOCK_K (the last box is
# zero-filled past K); M = 1, 100, 130 and N = 72, 136 are not tile multiples (boxes past M/N); K = 40 with
# 4 stages has fewer iterations than the prologue fills; BLOCK_K = 128 is two boxes per tile and stage;
# 2 stages wait for every wgmma group (no group in flight).
CONFIGS = [
    ("128x64x64-s4-2wg", _subs(128, 64, 64, 4), (2, 1), [(128, 64, 256), (130, 136, 40), (1, 72, 200)]),
    ("128x64x64-s3-2wg", _subs(128, 64, 64, 3), (2, 1), [(100, 72, 136)]),
    ("64x64x64-s2", _subs(64, 64, 64, 2), (1, 1), [(64, 64, 192), (100, 72, 72)]),
    ("64x128x128-s2", _subs(64, 128, 128, 2), (1, 1), [(72, 130, 136)]),
]


def _kernel(dtype, subs, waves, async_copy: str = "tma-mbarrier", swizzle: str = "auto"):
    return wc.compile(
        gm.make_gemm(
            dtype,
            32,
            WGMMA[dtype],
            waves,
            sched=schedule(prefetch_fragments=True, operand_swizzle=swizzle, async_copy=async_copy),
        ),
        subs,
        backend="emulator",
        target="sm_90a",
        cache=False,
    )


def _run(kernel, shapes, dtype, what: str) -> None:
    run_gemm(kernel, shapes, what, TORCH_DTYPE[dtype])


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("war", ["tma-mbarrier", "tma-barrier"])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_tma_gemm(dtype, war: str, cfg) -> None:
    name, subs, waves, shapes = cfg
    kernel = _kernel(dtype, subs, waves, war)
    mlir, meta = kernel.artifact.mlir, kernel.metadata
    boxes = subs[gm.BLOCK_K] // 64 * 2  # per fill: A and B, one box per 64 elements of K
    stages = subs[gm.NUM_STAGES]
    prologue = stages - 1 if war == "tma-mbarrier" or stages == 2 else stages - 2
    assert mlir.count("nvvm.cp.async.bulk.tensor.shared.cluster.global") == boxes * (prologue + 1)
    assert "nvgpu.device_async_copy" not in mlir and "nvvm.fence.proxy.acquire" in mlir
    assert [(s.arg, s.box, s.swizzle) for s in meta.tensor_maps] == [
        (0, (64, subs[gm.BLOCK_M]), 128),
        (1, (64, subs[gm.BLOCK_N]), 128),
    ]
    assert dict(meta.divisibility)["K"] == 8  # TMA strides are multiples of 16 bytes
    loop = mlir[mlir.index("scf.for") :]
    assert ("gpu.barrier" in loop) == (war == "tma-barrier")  # empty mbarriers replace the loop's barrier
    assert ("nvvm.mbarrier.arrive " in mlir) == (war == "tma-mbarrier")
    _run(kernel, shapes, dtype, f"TMA gemm {dtype.name} {war} {name}")


@pytest.mark.parametrize("want", ["auto", "tma"])
def test_auto_picks_tma_only_where_it_applies(want: str) -> None:
    """ "auto": TMA for 128-byte-swizzled operand tiles, stages released through empty mbarriers at 3
    stages (prefetch distance 2 instead of 1) and through the barrier at 4; the 64-byte swizzle and core
    matrices keep cp.async."""
    for stages, empty in ((3, True), (4, False)):
        k = _kernel(wc.f16, _subs(64, 64, 64, stages), (1, 1), want)
        loop = k.artifact.mlir[k.artifact.mlir.index("scf.for") :]
        assert k.metadata.tensor_maps
        assert ("nvvm.mbarrier.arrive " in loop) == empty and ("gpu.barrier" in loop) == (not empty)
    if want == "tma":
        return  # "tma" refuses the other layouts: test_tma_refused_with_reason
    for bk, swizzle in ((32, "auto"), (64, "none")):
        k = _kernel(wc.f16, _subs(64, 64, bk, 3), (1, 1), "auto", swizzle)
        assert not k.metadata.tensor_maps and "nvgpu.device_async_copy" in k.artifact.mlir


@pytest.mark.parametrize(
    "bk,stages,swizzle,why",
    [(32, 3, "auto", "128-byte-swizzled"), (64, 3, "none", "128-byte-swizzled"), (64, 1, "auto", "num_stages >= 2")],
)
def test_tma_refused_with_reason(bk: int, stages: int, swizzle: str, why: str) -> None:
    with pytest.raises(ConstraintError, match=why):
        _kernel(wc.f16, _subs(64, 64, bk, stages), (1, 1), "tma", swizzle)


def test_tma_needs_16_byte_strides() -> None:
    kernel = _kernel(wc.f16, *CONFIGS[2][1:3])
    a, b, c = torch.randn(64, 60).half(), torch.randn(64, 60).half(), torch.empty(64, 64)
    with pytest.raises(ArgumentError, match="K=60 .* multiple of 8"):
        kernel(a, b, c)


# ----- the emulator catches broken synchronisation ---------------------------------------------------------

CATCH = CONFIGS[0][1:3]
CATCH_SHAPE = [(128, 64, 320)]


def test_missing_release_never_completes(monkeypatch) -> None:
    """No empty-mbarrier arrivals: the first refill waits for a phase nobody completes (a hang on the GPU)."""
    real = pipeline_tma._node
    monkeypatch.setattr(
        pipeline_tma,
        "_node",
        lambda g, op, *a, **kw: None if op is pipeline_tma.MBarrierArrive else real(g, op, *a, **kw),
    )
    kernel = _kernel(wc.f16, *CATCH)
    with pytest.raises(EmulatorError, match="can never complete"):
        _run(kernel, CATCH_SHAPE, wc.f16, "no release")


def test_release_before_the_wgmma_retires_is_a_race(monkeypatch) -> None:
    """Arrivals at the top of the body (before the wgmma group that reads the stage retired): the refill
    overwrites a stage an in-flight wgmma still reads."""
    monkeypatch.setattr(fences_pass, "_release_after", lambda g, wait: None)
    kernel = _kernel(wc.f16, *CATCH)
    with pytest.raises(EmulatorError, match="shared-memory race"):
        _run(kernel, CATCH_SHAPE, wc.f16, "early release")


def test_wrong_parity_is_caught(monkeypatch) -> None:
    """Waiting on the parity of the previous phase: the wait passes at once on data not yet landed."""
    real = pipeline_tma._node

    def node(g, op, args, kwargs, *a, **kw):
        if op is pipeline_tma.MBarrierWait:
            kwargs = {**kwargs, "parity": 1 - kwargs["parity"]}
        return real(g, op, args, kwargs, *a, **kw)

    monkeypatch.setattr(pipeline_tma, "_node", node)
    kernel = _kernel(wc.f16, *CATCH)
    with pytest.raises(EmulatorError, match="aliases an older phase"):
        _run(kernel, CATCH_SHAPE, wc.f16, "wrong parity")


def test_unpredicated_fills_are_caught(monkeypatch) -> None:
    """Fills past the last iteration (no ``iteration < stop`` guard): copies in flight when the workgroup
    ends, or a stage refilled before its previous fill was waited for."""
    real = pipeline_tma._fill_kwargs
    monkeypatch.setattr(
        pipeline_tma, "_fill_kwargs", lambda j, s, lo, stop, war, *base: real(j, s, lo, 10**6, war, *base)
    )
    kernel = _kernel(wc.f16, *CATCH)
    with pytest.raises(EmulatorError, match="TMA copies in flight"):
        _run(kernel, CATCH_SHAPE, wc.f16, "unpredicated")


def test_missing_tensormap_fence_is_caught(monkeypatch) -> None:
    from wavec.codegen.hopper import tma as lowering_tma

    monkeypatch.setattr(lowering_tma.nvvm, "fence_proxy_acquire", lambda *a, **kw: None)
    kernel = _kernel(wc.f16, *CATCH)
    with pytest.raises(EmulatorError, match="fence.proxy.tensormap"):
        _run(kernel, CATCH_SHAPE, wc.f16, "no tensormap fence")
