"""Emulator tier for the warp-specialized TMA GEMM (``SchedulingConstraint(warp_specialize=True)``): a
producer warpgroup issues every TMA fill, the consumer warpgroups wait, multiply and release stages.  The
emulator runs the two branches of the split as cooperating threads of control (``emulator/coop.py``), so
the mbarrier protocol really runs: numerics against torch in float64 on fresh random inputs (NaN-prefilled
outputs, odd M/N/K, 2-4 stages, f16 and bf16), a broken protocol is caught, and configurations warp
specialization cannot serve get errors that say why."""

from __future__ import annotations

import pytest
from test_kernels_emulated import TORCH_DTYPE, run_gemm

import wavec as wc
from wavec.emulator import coop
from wavec.emulator.interp import EmulatorError
from wavec.errors import ConstraintError
from wavec.kernels import gemm as gm
from wavec.passes.hopper import pipeline_tma, warp_specialize
from wavec.tuning.plan import schedule

WGMMA = {wc.f16: wc.MMAType.NV_WGMMA_F32_64xNx16_F16, wc.bf16: wc.MMAType.NV_WGMMA_F32_64xNx16_BF16}


def _subs(bm: int, bn: int, bk: int, stages: int) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: stages, gm.GROUP_M: 2}


def _kernel(dtype, subs, waves, **kw):
    kw.setdefault("warp_specialize", True)
    return wc.compile(
        gm.make_gemm(dtype, 32, WGMMA[dtype], waves, sched=schedule(prefetch_fragments=True, **kw)),
        subs,
        backend="emulator",
        target="sm_90a",
        cache=False,
    )


def _run(kernel, shapes, dtype, what: str) -> None:
    run_gemm(kernel, shapes, what, TORCH_DTYPE[dtype])


# (id, subs, consumer warpgroups, shapes).  K = 320 is more iterations than stages (the producer waits for
# releases), K = 40 / 200 are not multiples of BLOCK_K, M = 130 / 100 and N = 136 / 72 not tile multiples.
CONFIGS = [
    ("128x64x64-s4-2wg", _subs(128, 64, 64, 4), (2, 1), [(128, 64, 320), (130, 136, 40)]),
    ("128x64x64-s3-2wg", _subs(128, 64, 64, 3), (2, 1), [(100, 72, 200)]),
    ("64x64x64-s2-1wg", _subs(64, 64, 64, 2), (1, 1), [(100, 72, 200)]),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_ws_gemm(dtype, cfg, monkeypatch) -> None:
    name, subs, waves, shapes = cfg
    switches = []
    real = coop.Baton.switch
    monkeypatch.setattr(coop.Baton, "switch", lambda self, me: switches.append(me) or real(self, me))
    kernel = _kernel(dtype, subs, waves)
    mlir, consumers = kernel.artifact.mlir, waves[0] * waves[1] * 128
    assert kernel.metadata.block == (consumers + 128, 1, 1)
    producer_regs, consumer_regs = warp_specialize.register_split(consumers)
    assert f"nvvm.setmaxregister decrease {producer_regs}" in mlir
    assert f"nvvm.setmaxregister increase {consumer_regs}" in mlir
    assert mlir.count("nvvm.cp.async.bulk.tensor.shared.cluster.global") == 2  # the producer's loop only
    assert mlir.count("gpu.barrier") == 1  # after the mbarrier init, before the split
    _run(kernel, shapes, dtype, f"WS gemm {dtype.name} {name}")
    assert switches, "the producer and the consumers never handed over: the split did not run as threads"


def test_register_split() -> None:
    assert warp_specialize.register_split(256) == (40, 232)  # 128 x 40 + 256 x 232 <= 168 x 384
    assert warp_specialize.register_split(128) == (40, 240)
    for consumers in (128, 256, 384, 512):
        p, c = warp_specialize.register_split(consumers)
        total = consumers + 128
        assert 128 * p + consumers * c <= min(255, 65536 // total) // 8 * 8 * total and c % 8 == 0 and c >= 24


# ----- the emulator catches a broken protocol --------------------------------------------------------------

CATCH = (_subs(128, 64, 64, 3), (2, 1))
CATCH_SHAPE = [(128, 64, 320)]


def test_missing_release_deadlocks(monkeypatch) -> None:
    """No empty-mbarrier arrivals: the producer's first refill waits forever, then the consumers wait for a
    fill that never comes (a hang on the GPU)."""
    real = pipeline_tma._node
    monkeypatch.setattr(
        pipeline_tma,
        "_node",
        lambda g, op, *a, **kw: None if op is pipeline_tma.MBarrierArrive else real(g, op, *a, **kw),
    )
    with pytest.raises(EmulatorError, match="deadlock.*thread 0.*thread 1"):
        _run(_kernel(wc.f16, *CATCH), CATCH_SHAPE, wc.f16, "no release")


def test_wrong_refill_parity_is_caught(monkeypatch) -> None:
    """The producer waits on the parity of the phase before the release it needs: it refills a stage the
    consumers have not released (the emulator sees the refill's arrival before the stage's fill was
    consumed, or the wait aliasing an older phase)."""
    real = pipeline_tma._fill_kwargs

    def kwargs(j, stages, lo, stop, war, *base):
        kw = real(j, stages, lo, stop, war, *base)
        if "empty_parity" in kw:
            kw["empty_parity"] = kw["empty_parity"] + 1
        return kw

    monkeypatch.setattr(pipeline_tma, "_fill_kwargs", kwargs)
    monkeypatch.setattr(warp_specialize, "_fill_kwargs", kwargs)
    with pytest.raises(EmulatorError, match="more than 1 arrivals|aliases an older phase|race"):
        _run(_kernel(wc.f16, *CATCH), CATCH_SHAPE, wc.f16, "wrong refill parity")


@pytest.mark.parametrize(
    "kw,why",
    [
        ({"async_copy": "cp.async"}, "not async_copy='cp.async'"),
        ({"operand_swizzle": "none"}, "needs a TMA loop: .*128-byte-swizzled"),
        ({"stages": 1}, "num_stages >= 2"),
        ({"mma": wc.MMAType.NV_F32_16x8x16_F16}, "sm_90a"),
    ],
)
def test_ws_refused_with_reason(kw: dict, why: str) -> None:
    stages, mma = kw.pop("stages", 3), kw.pop("mma", WGMMA[wc.f16])
    with pytest.raises(ConstraintError, match=why):
        wc.compile(
            gm.make_gemm(wc.f16, 32, mma, (1, 1), sched=schedule(prefetch_fragments=True, warp_specialize=True, **kw)),
            _subs(64, 64, 64, stages),
            backend="emulator",
            target="sm_90a",
            cache=False,
        )


def test_warp_specialize_is_validated() -> None:
    with pytest.raises(ConstraintError, match="warp_specialize"):
        wc.SchedulingConstraint(warp_specialize="yes")
