"""Emulator tier for the persistent grid of the Hopper TMA GEMM (``SchedulingConstraint(persistent=True)``):
the emulator's launcher sees ``EMULATED_SMS`` = 1 SM, so the grid is ``workgroups_per_sm`` workgroups and
each runs 3 or more output tiles in the grouped order; numerics against torch in float64 on fresh random
inputs, NaN-prefilled outputs, masked M/N edges and K not a multiple of BLOCK_K, 3 and 4 stages, both
stage releases, with and without warp specialization (the producer walks the same tiles); a parity that
restarts per tile is caught; unsupported combinations are refused."""

from __future__ import annotations

import pytest
import sympy
import torch
from test_kernels_emulated import GEMM_TOL, TORCH_DTYPE, check, generator, poisoned, randn

import wavec as wc
from wavec.emulator import launch
from wavec.emulator.interp import EmulatorError
from wavec.errors import ConstraintError
from wavec.kernels import gemm as gm
from wavec.passes.hopper import pipeline_tma
from wavec.tuning.plan import schedule

WGMMA = {wc.f16: wc.MMAType.NV_WGMMA_F32_64xNx16_F16, wc.bf16: wc.MMAType.NV_WGMMA_F32_64xNx16_BF16}


def _subs(bm: int, bn: int, stages: int, group: int = 2) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: 64, gm.NUM_STAGES: stages, gm.GROUP_M: group}


def _kernel(dtype, subs, waves, async_copy: str, **kw):
    if async_copy == "ws":
        async_copy, kw = "tma", {**kw, "warp_specialize": True}
    return wc.compile(
        gm.make_gemm(
            dtype,
            32,
            WGMMA[dtype],
            waves,
            sched=schedule(prefetch_fragments=True, async_copy=async_copy, persistent=True, **kw),
        ),
        subs,
        backend="emulator",
        target="sm_90a",
        cache=False,
    )


def _grid(kernel, m: int, n: int) -> int:
    fn = eval(f"lambda M, N, WAVEC_SMS: {kernel.metadata.grid[0]}")  # noqa: S307 - the kernel's own grid
    return fn(m, n, launch.EMULATED_SMS)


# (dtype, async copy, stages, subs, waves, M x N x K): 64x64 tiles hold 4 (3 stages) / 3 (4 stages)
# workgroups per SM, 128x64 with 2 warpgroups 2; M = 200 / 300 and N = 130 are not tile multiples,
# K = 136 is 3 iterations, the last 8 columns of a box; 12 tiles over 4 or 3 workgroups, 9 over 2.
CASES = [
    (wc.f16, "tma-mbarrier", 3, _subs(64, 64, 3), (1, 1), (200, 130, 136)),
    (wc.bf16, "tma-barrier", 3, _subs(64, 64, 3), (1, 1), (200, 130, 136)),
    (wc.bf16, "tma-mbarrier", 4, _subs(64, 64, 4, group=1), (1, 1), (200, 130, 136)),
    (wc.f16, "tma-barrier", 4, _subs(64, 64, 4), (1, 1), (200, 130, 136)),
    (wc.f16, "tma-mbarrier", 4, _subs(128, 64, 4), (2, 1), (300, 130, 136)),
    (wc.f16, "ws", 3, _subs(64, 64, 3), (1, 1), (200, 130, 136)),  # the producer loops over the same tiles
    (wc.bf16, "ws", 4, _subs(128, 64, 4), (2, 1), (300, 130, 136)),
]


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c[0].name}-{c[1]}-s{c[2]}-{c[3][gm.BLOCK_M]}x64-g{c[3][gm.GROUP_M]}" for c in CASES]
)
def test_persistent_gemm(case) -> None:
    dtype, copy, _stages, subs, waves, (m, n, k) = case
    kernel = _kernel(dtype, subs, waves, copy)
    tiles = -(-m // subs[gm.BLOCK_M]) * -(-n // subs[gm.BLOCK_N])
    assert tiles >= 3 * _grid(kernel, m, n)  # every workgroup runs 3 or more tiles
    g, seed = generator()
    a, b = randn(g, m, k, dtype=TORCH_DTYPE[dtype]), randn(g, n, k, dtype=TORCH_DTYPE[dtype])
    c = poisoned(m, n)
    kernel(a, b, c)
    check(c, a.double() @ b.double().T, GEMM_TOL, f"persistent {dtype.name} {copy} M={m} N={n} K={k} (seed {seed})")


def test_parity_restarting_per_tile_is_caught(monkeypatch) -> None:
    """The full-mbarrier parity counted per tile (not over the whole persistent loop): the second tile's
    waits alias the stages' older phases, which the emulator reports."""
    monkeypatch.setattr(
        pipeline_tma, "wait_parity", lambda iv, lo, base, stages: sympy.Mod(sympy.floor((iv - lo) / stages), 2)
    )
    kernel = _kernel(wc.f16, _subs(64, 64, 3), (1, 1), "tma-mbarrier")
    g, _seed = generator()
    a, b = randn(g, 200, 136, dtype=torch.float16), randn(g, 130, 136, dtype=torch.float16)
    with pytest.raises(EmulatorError, match="aliases an older phase"):
        kernel(a, b, poisoned(200, 130))


def test_refusals() -> None:
    subs = _subs(64, 64, 3)
    with pytest.raises(ConstraintError, match="persistent=True.*TMA"):
        _kernel(wc.f16, subs, (1, 1), "cp.async")
    with pytest.raises(ConstraintError, match="persistent=True.*TMA"):  # core-matrix operand tiles: no TMA
        _kernel(wc.f16, subs, (1, 1), "auto", operand_swizzle="none")
    with pytest.raises(ConstraintError, match="persistent=True.*TMA"):  # mma.sync: no TMA pipeline
        wc.compile(
            gm.make_gemm(
                wc.f16,
                32,
                wc.MMAType.NV_F32_16x8x16_F16,
                (2, 2),
                sched=schedule(prefetch_fragments=True, persistent=True),
            ),
            {**subs, gm.BLOCK_K: 32},
            backend="emulator",
            target="sm_80",
            cache=False,
        )
    with pytest.raises(ConstraintError, match="persistent='yes'"):
        wc.SchedulingConstraint(persistent="yes")
