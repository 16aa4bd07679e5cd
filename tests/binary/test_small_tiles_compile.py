"""Binary tier, issue #20 item 2 (tiles part): kernels whose wave tiles are smaller than the MMA instruction
tile (padded, ``wavec/indexing/padding.py``) compile to PTX for sm_80 and sm_90a (mma.sync) and to HSACO for
gfx942 (MFMA): the library GEMM with 8-row, 4-column and K = 8 tiles, and attention with head dim 8.
Warpgroup MMAs (wgmma) read their operands from shared memory and are not padded: a ConstraintError."""

from __future__ import annotations

import re

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from tests.small_tiles import CONFIGS, gemm_for
from wavec.errors import ConstraintError
from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, make_attention

pytest.importorskip("iree.compiler")

BACKEND = {"sm_80": "cuda", "sm_90a": "cuda", "gfx942": "rocm"}


def _compile(kernel, subs: dict, target: str):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)  # PTX text, to look into
        return wc.compile(kernel, subs, target=target, backend=BACKEND[target], cache=False)


def _check_binary(kernel, target: str, entry: str) -> None:
    art = kernel.artifact
    if target == "gfx942":
        assert art.format == "hsaco" and art.binary[:4] == b"\x7fELF"
        assert "amdgpu.mfma" in kernel.mlir
        return
    ptx = art.binary.decode()
    assert art.format == "ptx" and re.search(rf"\.entry {entry}", ptx)
    assert "mma.sync.aligned.m16n8k16" in ptx and "st.global" in ptx


NV_CONFIGS = [c for c in CONFIGS if c[1] == "sm_80"]
PARAMS = [
    pytest.param(target, *c[2:], id=f"{c[0]}-{target}")
    for c in CONFIGS
    for target in (("sm_80", "sm_90a") if c in NV_CONFIGS else ("gfx942",))
]


@pytest.mark.parametrize("target,dtype,bm,bn,bk,stages", PARAMS)
def test_small_tile_gemm_compiles(target: str, dtype, bm: int, bn: int, bk: int, stages: int) -> None:
    kernel, subs = gemm_for("gfx942" if target == "gfx942" else "sm_80", dtype, bm, bn, bk, stages)
    _check_binary(_compile(kernel, subs, target), target, "gemm")


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_head_dim_8_attention_compiles(target: str) -> None:
    mma = "mfma" if target == "gfx942" else "mma_sync"
    kernel = make_attention(wc.f16, "bhsd", True, 2, mma=mma)
    bm = 32 if target == "gfx942" else 16  # mma.sync: 8-row wave tiles too
    _check_binary(_compile(kernel, {BLOCK_M: bm, BLOCK_N: 32, NUM_STAGES: 2, D: 8}, target), target, "attention")


def test_wgmma_tiles_are_not_padded() -> None:
    """Head dim 8 under wgmma's K of 16: its operands are shared tiles read by descriptor, nothing to mask."""
    kernel = make_attention(wc.f16, "bhsd", False, 1, mma="wgmma")
    with pytest.raises(ConstraintError, match=r"D = 8 gives .*a tile of 8 .*not a multiple of the instruction.s K"):
        _compile(kernel, {BLOCK_M: 64, BLOCK_N: 64, NUM_STAGES: 2, D: 8}, "sm_90a")
