"""Emulator tier for the Hopper GEMM (``wgmma`` on sm_90a): the unchanged ``gemm`` body with a warpgroup
MMA type, run lane by lane on the CPU (descriptors decoded from the emitted MLIR, shared memory through
the race checker) against torch in float64, f16 and bf16, on fresh random inputs (seed in every failure
message; ``WAVEC_TEST_SEED`` replays one).  Also: the emulator rejects a kernel whose fences are missing,
and bad configurations get errors that say what was expected."""

from __future__ import annotations

import pytest
import torch
from kernel_fixtures import gemm_kernel
from test_kernels_emulated import GEMM_TOL, TORCH_DTYPE, check, generator, poisoned, randn, run_gemm

import wavec as wc
from wavec.emulator.interp import EmulatorError
from wavec.kernels import gemm as gm
from wavec.passes.hopper import insert_wgmma_fences as fences_pass
from wavec.tuning.plan import (
    MMA_FOR_TARGET,
    WGMMA_SUBS,
    WGMMA_WAVES,
    GemmPlan,
    GemmRequest,
    plan_matmul,
    schedule,
    wgmma_config,
    wgmma_plan,
)

WGMMA = {wc.f16: wc.MMAType.NV_WGMMA_F32_64xNx16_F16, wc.bf16: wc.MMAType.NV_WGMMA_F32_64xNx16_BF16}


def _subs(bm: int, bn: int, bk: int, stages: int, group_m: int = 2) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: stages, gm.GROUP_M: group_m}


# (id, subs, waves = warpgroups, shapes, operand_swizzle).  One m64nNk16 per 64 rows of a warpgroup and
# K step of 16, N = the warpgroup's N tile (256 in the last: 128 accumulators per thread).  K = 40 and 72
# are not multiples of BLOCK_K (the last tile zero-filled); M = 100, 1, 130 and N = 72, 136 are not tile
# multiples (masked copies and stores); K = 40 with 3 stages has fewer iterations than stages; "2wg" puts
# two warpgroups in a workgroup; "128x64x64-1wg" gives one warpgroup two instructions along M per K step.
# "auto" is the widest swizzle the K rows allow: 128 bytes at BLOCK_K = 64 (two swizzle columns at 128),
# 64 bytes at 32, 32 bytes at 16; "none" core matrices; "128B" forced.
CONFIGS = [
    ("64x64x32-stages1-core", _subs(64, 64, 32, 1), (1, 1), [(128, 128, 96), (100, 72, 40)], "none"),
    ("64x64x32-stages2-swz", _subs(64, 64, 32, 2), (1, 1), [(128, 128, 128), (1, 136, 72)], "auto"),
    ("128x64x32-stages3-2wg-core", _subs(128, 64, 32, 3), (2, 1), [(256, 128, 128), (100, 72, 40)], "none"),
    ("128x64x64-stages4-1wg-swz", _subs(128, 64, 64, 4), (1, 1), [(128, 64, 200), (130, 136, 40)], "auto"),
    ("128x64x64-stages3-2wg-core", _subs(128, 64, 64, 3), (2, 1), [(130, 136, 136)], "none"),
    ("64x128x128-stages2-swz", _subs(64, 128, 128, 2), (1, 1), [(64, 256, 256), (72, 130, 136)], "auto"),
    ("64x64x64-stages1-swz", _subs(64, 64, 64, 1), (1, 1), [(100, 72, 136)], "128B"),
    ("64x128x16-stages3-swz", _subs(64, 128, 16, 3, 1), (1, 1), [(64, 256, 80)], "auto"),
    ("64x256x32-stages3-swz", _subs(64, 256, 32, 3), (1, 1), [(64, 256, 96)], "auto"),
]


def _kernel(dtype, cfg, async_copy: str = "auto", **kw):
    _name, subs, waves, _shapes, swizzle = cfg
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
        **kw,
    )


def _uses_tma(cfg) -> bool:
    """pipeline_loops picks TMA ("auto") for 128-byte-swizzled operand tiles of a pipelined loop."""
    swizzle_128 = cfg[1][gm.BLOCK_K] % 64 == 0 and cfg[4] in ("auto", "128B")
    return swizzle_128 and cfg[1][gm.NUM_STAGES] >= 2


def _run(kernel, shapes, dtype, what: str) -> None:
    run_gemm(kernel, shapes, what, TORCH_DTYPE[dtype])


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_wgmma_gemm(dtype, cfg) -> None:
    kernel = _kernel(dtype, cfg)
    mlir = kernel.artifact.mlir
    stages = cfg[1][gm.NUM_STAGES]
    assert f"nvvm.wgmma.wait.group.sync.aligned {1 if stages >= 3 else 0}" in mlir  # one group in flight
    assert kernel.metadata.block == (128 * cfg[2][0] * cfg[2][1], 1, 1)
    assert "nvvm.wgmma.mma_async" in mlir and "nvgpu.mma.sync" not in mlir
    tma = _uses_tma(cfg)
    assert ("nvvm.cp.async.bulk.tensor" in mlir) == tma
    assert ("nvgpu.device_async_copy" in mlir) == (not tma and stages >= 2)
    # threads swizzle their own shared stores only when cp.async (or a plain store) writes the tiles
    assert ("arith.xori" in mlir) == (cfg[0].endswith("swz") and not tma)
    _run(kernel, cfg[3], dtype, f"wgmma gemm {dtype.name} {cfg[0]}")


TMA_CONFIGS = [c for c in CONFIGS if _uses_tma(c)]


@pytest.mark.parametrize("cfg", TMA_CONFIGS, ids=[c[0] for c in TMA_CONFIGS])
def test_wgmma_gemm_cp_async(cfg) -> None:
    """async_copy="cp.async" keeps the cp.async pipeline where TMA would be chosen (the baseline)."""
    kernel = _kernel(wc.f16, cfg, async_copy="cp.async")
    mlir = kernel.artifact.mlir
    assert "nvgpu.device_async_copy" in mlir and "nvvm.cp.async.bulk.tensor" not in mlir
    assert not kernel.metadata.tensor_maps
    _run(kernel, cfg[3], wc.f16, f"wgmma gemm cp.async {cfg[0]}")


@pytest.mark.parametrize("m,n,tile", [(130, 72, (64, 64, (1, 1))), (40, 72, (64, 64, (1, 1))), (8, 72, None)])
def test_matmul_helper_wgmma(m: int, n: int, tile) -> None:
    """``matmul(mma="wgmma")`` takes ``wgmma_plan``'s tile and schedule (on grids this small, 64x64 tiles of
    one consumer warpgroup and a TMA producer: they occupy the most SMs) and the mma.sync decode tiles for
    M <= 16.  The 128-row tiles of
    2 warpgroups are ``test_retarget_to_sm90a_changes_only_constraints``'s; ``wgmma_config``'s choices on
    large shapes are checked in tests/unit/test_wgmma_tuning.py."""
    g, seed = generator()
    a, b = randn(g, m, 64, dtype=torch.bfloat16), randn(g, n, 64, dtype=torch.bfloat16)
    c = gm.matmul(a, b, backend="emulator", mma="wgmma", out_dtype=torch.float32)
    check(c, a.double() @ b.double().T, GEMM_TOL, f"matmul wgmma M={m} (seed {seed})")
    plan = plan_matmul(m, n, 64, GemmRequest(mma="wgmma"))
    assert plan.mma == ("wgmma" if tile else "mma_sync")
    assert plan.warp_specialize or not tile  # 64x64 tiles: with a producer warpgroup
    assert plan.split_epilogue or not tile  # wgmma tiles store C after one bounds test per thread
    assert plan.schedule.prefetch_fragments == (not tile)  # fragment prefetch: mma.sync tiles only
    key = ("bf16", "f32", "emulator", plan)
    assert key in gm._COMPILED  # the path matmul took
    if tile is not None:
        subs, waves = wgmma_config(m, n, 64)
        assert (subs[gm.BLOCK_M], subs[gm.BLOCK_N], waves) == tile


# C rounded once from the f32 accumulator: bounded by the dtype's half ulp (f16 2^-11, bf16 2^-8) relative
OUT_TOL = {wc.f16: 1e-3, wc.bf16: 8e-3}


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
@pytest.mark.parametrize("mma", ["wgmma", "mma_sync"])
def test_gemm_output_in_input_dtype(dtype, mma) -> None:
    """``make_gemm(out_dtype=dtype)`` writes C in the input dtype (as cuBLAS does for torch.matmul): the
    wgmma TMA tile (128x128x64, 2 warpgroups, masked M/N/K) and the mma.sync tile, every element written,
    within the rounding of one cast; a C of another dtype is refused by name."""
    tdt = TORCH_DTYPE[dtype]
    if mma == "wgmma":
        kernel = wc.compile(
            gm.make_gemm(dtype, 32, WGMMA[dtype], (2, 1), out_dtype=dtype),
            _subs(128, 128, 64, 3),
            backend="emulator",
            target="sm_90a",
            cache=False,
        )
        assert kernel.metadata.tensor_maps  # the TMA pipeline
    else:
        mma_type = wc.MMAType.NV_F32_16x8x16_F16 if dtype == wc.f16 else wc.MMAType.NV_F32_16x8x16_BF16
        kernel = wc.compile(
            gm.make_gemm(dtype, 32, mma_type, (2, 2), out_dtype=dtype),
            _subs(64, 64, 32, 2),
            backend="emulator",
            target="sm_90",
            cache=False,
        )
    g, seed = generator()
    m, n, k = 130, 136, 200
    a, b = randn(g, m, k, dtype=tdt), randn(g, n, k, dtype=tdt)
    c = poisoned(m, n, dtype=tdt)
    kernel(a, b, c)
    check(c, a.double() @ b.double().T, OUT_TOL[dtype], f"gemm {mma} out {dtype.name} (seed {seed})")
    with pytest.raises(wc.WavecError, match="c"):
        kernel(a, b, poisoned(m, n))
    with pytest.raises(ValueError, match="out_dtype"):
        gm.make_gemm(dtype, out_dtype=wc.f16 if dtype == wc.bf16 else wc.bf16)


def test_tuned_matmul_wgmma_from_a_cache_folder(tmp_path, monkeypatch) -> None:
    """``wavec.tuning.gemm.matmul(mma="wgmma", directory=DIR)`` (``benchmarks/gemm.py --tuned DIR``) runs the
    configuration the wgmma tuning cache in DIR holds for the shape's bucket (128x64, one warpgroup, 3
    stages here, not the heuristic's 64x64) and computes the right product; a shape nothing was tuned for
    runs the heuristic path (``kernels.gemm.matmul``, with ``wgmma_plan``'s schedule)."""
    from wavec.tuning import gemm as tg
    from wavec.tuning.search import Candidate

    monkeypatch.setattr(tg, "gpu_name", lambda: "test-gpu")
    tg._DISPATCH.clear()
    cand = Candidate(
        (("waves", (1, 1)),), (("BLOCK_K", 64), ("BLOCK_M", 128), ("BLOCK_N", 64), ("GROUP_M", 8), ("NUM_STAGES", 3))
    )
    m, n, k = 100, 72, 136
    tg.store_tuned(wc.bf16, {(m, n, k): {cand: 1e-5}}, gpu="test-gpu", mma="wgmma")
    folder = tg._cache(wc.bf16, None, "wgmma").directory
    g, seed = generator()
    a, b = randn(g, m, k, dtype=torch.bfloat16), randn(g, n, k, dtype=torch.bfloat16)
    c = tg.matmul(a, b, backend="emulator", mma="wgmma", directory=folder, out_dtype=torch.float32)
    check(c, a.double() @ b.double().T, GEMM_TOL, f"tuned wgmma matmul (seed {seed})")
    assert tg.dispatch(m, n, k, wc.bf16, mma="wgmma", directory=folder)[2] == "cache"
    assert any(key[1] == "f32" and key[-1].mma == "wgmma" and key[-1].block_m == 128 for key in tg._COMPILED)
    # a shape of another bucket, nothing tuned nor modelled: kernels.gemm.matmul, its producer warpgroup too
    a2, b2 = randn(g, 40, k, dtype=torch.bfloat16), randn(g, 300, k, dtype=torch.bfloat16)
    c2 = tg.matmul(a2, b2, backend="emulator", mma="wgmma", directory=folder, out_dtype=torch.float32)
    check(c2, a2.double() @ b2.double().T, GEMM_TOL, f"untuned wgmma matmul (seed {seed})")
    assert tg.dispatch(40, 300, k, wc.bf16, mma="wgmma", directory=folder)[2] == "heuristic"
    plan = wgmma_plan(40, 300, k)
    plans = [key[-1] for key in gm._COMPILED if isinstance(key[-1], GemmPlan)]  # not split-K's reduce
    assert plan.warp_specialize and any(p.mma == "wgmma" and p.warp_specialize for p in plans)  # WS compiled
    tg._DISPATCH.clear()


def test_retarget_to_sm90a_changes_only_constraints() -> None:
    threads, mma = MMA_FOR_TARGET["sm_90a"]
    assert mma.spec.group_waves == 4 and threads == 32
    k90a, k90 = gm.make_gemm(wc.f16, threads, mma, WGMMA_WAVES), gm.make_gemm(wc.f16)
    assert k90a.fn.__code__.co_code == k90.fn.__code__.co_code
    kernel = wc.compile(k90a, WGMMA_SUBS, backend="emulator", target="sm_90a", cache=False)
    _run(kernel, [(128, 128, 128)], wc.f16, "MMA_FOR_TARGET['sm_90a'] with WGMMA_SUBS")


# ----- the emulator catches missing synchronisation -------------------------------------------------------

CATCH = CONFIGS[2]  # core matrices, 2 warpgroups, one group in flight
CATCH_SWIZZLED = CONFIGS[3]


@pytest.mark.parametrize("cfg", [CATCH, CATCH_SWIZZLED], ids=["core", "swizzled"])
def test_missing_proxy_fence_is_caught(monkeypatch, cfg) -> None:
    monkeypatch.setattr(fences_pass, "_fence_barriers", lambda g: None)
    kernel = _kernel(wc.f16, cfg, async_copy="cp.async")
    assert "nvvm.fence.proxy" not in kernel.artifact.mlir
    with pytest.raises(EmulatorError, match="fence.proxy.async"):
        _run(kernel, [(128, 64, 64)], wc.f16, "no proxy fence")


def test_missing_wgmma_fence_is_caught(monkeypatch) -> None:
    real = fences_pass._node
    monkeypatch.setattr(
        fences_pass,
        "_node",
        lambda g, op, where, before, **kw: None if op is fences_pass.WgmmaFence else real(g, op, where, before, **kw),
    )
    kernel = _kernel(wc.f16, CATCH)
    with pytest.raises(EmulatorError, match="wgmma.fence"):
        _run(kernel, [(128, 64, 64)], wc.f16, "no wgmma fence")


def test_missing_wgmma_wait_is_refused(monkeypatch) -> None:
    """Without the body's wait (1 stage: the accumulator leaves the loop as a value) the accumulator
    would be read while the wgmmas may still write it: the lowering refuses."""
    real = fences_pass._node
    monkeypatch.setattr(
        fences_pass,
        "_node",
        lambda g, op, where, before, **kw: where if op is fences_pass.WgmmaWait else real(g, op, where, before, **kw),
    )
    with pytest.raises(wc.WavecError, match="no wgmma_wait retiring it"):
        _kernel(wc.f16, CONFIGS[0])


def test_missing_in_flight_wait_is_caught(monkeypatch) -> None:
    """With one group in flight (3 stages), dropping the body's wait(1) lets copies overwrite stages that
    unretired wgmmas still read: the race checker sees the wgmma reads and the copies with no barrier."""
    real = fences_pass._node

    def no_body_wait(g, op, where, before, **kw):
        if op is fences_pass.WgmmaWait and kw.get("pending") == 1:
            return where
        return real(g, op, where, before, **kw)

    monkeypatch.setattr(fences_pass, "_node", no_body_wait)
    kernel = _kernel(wc.f16, CATCH)
    assert "nvvm.wgmma.wait.group.sync.aligned 1" not in kernel.artifact.mlir
    with pytest.raises(wc.WavecError, match="shared-memory race .*nvvm.wgmma.mma_async.*device_async_copy"):
        _run(kernel, [(128, 64, 256)], wc.f16, "no wait(1)")


# ----- bad configurations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "waves,subs,target,match",
    [
        ((2, 1), _subs(64, 64, 32, 2), "sm_90a", "a tile of 32 .*not a multiple of the 64 rows"),
        ((1, 1), _subs(64, 12, 32, 2), "sm_90a", "a tile of 12 .*not a multiple of 8"),
        (
            (1, 1),
            _subs(64, 64, 8, 2),
            "sm_90a",
            "BLOCK_K = 8 gives TilingConstraint.*not a multiple of the instruction.s K = 16",
        ),
        ((1, 1), _subs(64, 64, 32, 2), "sm_90", "target='sm_90a'"),
        ((1, 1), _subs(64, 64, 32, 2), "sm_80", "target='sm_90a'"),
    ],
)
def test_bad_configurations(waves, subs, target, match) -> None:
    with pytest.raises(wc.WavecError, match=match):
        wc.compile(gm.make_gemm(wc.f16, 32, WGMMA[wc.f16], waves), subs, backend="emulator", target=target, cache=False)


def test_wgmma_needs_promoted_operands() -> None:
    constraints = [
        c for c in gm.gemm_constraints(32, WGMMA[wc.f16], (1, 1)) if not isinstance(c, wc.SchedulingConstraint)
    ] + [wc.SchedulingConstraint(num_stages=1, promote_operands=False)]
    gemm = gemm_kernel(constraints)
    with pytest.raises(wc.WavecError, match="promote_operands=True"):
        subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32}  # stages fixed at 1, no launch order
        wc.compile(gemm, subs, backend="emulator", target="sm_90a", cache=False)


def test_wgmma_type_with_wrong_dtype_is_rejected() -> None:
    with pytest.raises(wc.WavecError, match="takes bf16 operands"):
        wc.compile(
            gm.make_gemm(wc.f16, 32, WGMMA[wc.bf16], (1, 1)),
            _subs(64, 64, 32, 1),
            backend="emulator",
            target="sm_90a",
            cache=False,
        )


def test_forced_swizzle_needs_128_byte_rows() -> None:
    with pytest.raises(wc.WavecError, match="128-byte swizzle rows"):
        wc.compile(
            gm.make_gemm(
                wc.f16, 32, WGMMA[wc.f16], (1, 1), sched=schedule(prefetch_fragments=True, operand_swizzle="128B")
            ),
            _subs(64, 64, 32, 1),
            backend="emulator",
            target="sm_90a",
            cache=False,
        )
    with pytest.raises(wc.WavecError, match="operand_swizzle"):
        wc.SchedulingConstraint(operand_swizzle="16B")
