"""``SchedulingConstraint(split_epilogue=True)`` in PTX: the full-tile branch of the GEMM's C write is one
straight run of stores from two row bases with immediate offsets (one instruction per store), where the
per-run guarded write puts a bounds test and a branch between every two stores; ``ptx_check`` passes on
both (the compile runs it)."""

import re

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, WGMMA_WAVES, schedule

pytest.importorskip("iree.compiler")


def _ptx(split: bool) -> str:
    kernel = gm.make_gemm(
        wc.f16,
        32,
        WGMMA_FOR_DTYPE["f16"],
        WGMMA_WAVES,
        out_dtype=wc.f16,
        sched=schedule(prefetch_fragments=True, persistent=True, split_epilogue=split),
    )
    subs = {gm.BLOCK_M: 128, gm.BLOCK_N: 256, gm.BLOCK_K: 64, gm.NUM_STAGES: 4, gm.GROUP_M: 8}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        return wc.compile(kernel, subs, target="sm_90a", backend="cuda", cache=False).artifact.binary.decode()


def _longest_store_run(ptx: str) -> int:
    run = best = 0
    for line in (x.strip() for x in ptx.splitlines()):
        if line.startswith("st.global"):
            run += 1
            best = max(best, run)
        elif line and not line.startswith("//"):
            run = 0
    return best


def test_full_tiles_store_in_one_straight_run() -> None:
    plain, split = _ptx(False), _ptx(True)
    # 128x256 over 2 warpgroups: 64 stores of 2 halves per thread
    assert _longest_store_run(plain) == 1 and _longest_store_run(split) >= 60
    assert re.search(r"st\.global\.b32\s+\[%rd\d+\+16\]", split)  # [row base + constant]
