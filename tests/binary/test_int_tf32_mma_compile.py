"""Binary tier, issue #20 item 6: the int8 and tf32 GEMMs compile to the instructions they are meant to.

PTX for sm_80 and sm_90: ``mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32`` fed by
``ldmatrix`` (8-bit fragments load as b16 pairs), ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``
with its operands rounded by ``cvt.rna.tf32.f32``; no f16 instruction in either; a spill-free cubin where
ptxas exists.  sm_90a: ``wgmma.mma_async`` .m64nNk32.s32.s8.s8 and .m64nNk8.f32.tf32.tf32 on TMA-filled
tiles, fenced and with well-formed descriptors (``codegen/ptx_check.py``).  gfx942: the i8 MFMA GEMM
builds to HSACO.
"""

from __future__ import annotations

import functools
import re
import struct

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptx_check import wgmma_descriptor_violations, wgmma_fence_violations
from wavec.codegen.ptxas import find_ptxas
from wavec.frontend.dtypes import DTYPES
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, WGMMA_SUBS, WGMMA_WAVES, schedule

pytest.importorskip("iree.compiler")

MMA_I8 = "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32"
MMA_TF32 = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
KINDS = {
    "i8": (wc.i8, wc.MMAType.NV_I32_16x8x32_I8, 64, MMA_I8),
    "tf32": (wc.f32, wc.MMAType.NV_F32_16x8x8_TF32, 32, MMA_TF32),
}


def _kernel(kind: str, target: str, ptxas: bool = False):
    dtype, mma, block_k, _ = KINDS[kind]
    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: block_k, gm.NUM_STAGES: 2, gm.GROUP_M: 4}
    kernel = gm.make_gemm(dtype, 32, mma, (2, 2))
    if ptxas:
        return wc.compile(kernel, subs, target=target, backend="cuda", cache=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        return wc.compile(kernel, subs, target=target, backend="cuda", cache=False)


@functools.cache
def ptx_of(kind: str, target: str) -> str:
    art = _kernel(kind, target).artifact
    assert art.format == "ptx"
    return art.binary.decode()


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_ptx_has_the_instruction(kind: str, target: str) -> None:
    ptx = ptx_of(kind, target)
    want = KINDS[kind][3]
    assert re.search(rf"^\.target {target}\b", ptx, re.M)
    # per wave and loop iteration: (32/16) x (32/8) tiles x (BLOCK_K / K) steps = 16 mmas, twice (prologue)
    n = ptx.count(want)
    assert n >= 16 and n % 8 == 0, n
    assert "f16.f16" not in ptx and ".bf16" not in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx  # A and paired B fragments
    assert "cp.async" in ptx and "st.global" in ptx
    if kind == "tf32":
        # every A and B element is rounded once per fragment (LLVM shares it between the mmas reading it)
        assert ptx.count("cvt.rna.tf32.f32") >= 8
    else:
        assert "cvt.rna.tf32" not in ptx


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas available")
@pytest.mark.parametrize("kind", list(KINDS))
def test_cubin_without_spills(kind: str) -> None:
    art = _kernel(kind, "sm_80", ptxas=True).artifact
    assert art.format == "cubin" and art.binary[:4] == b"\x7fELF"
    assert art.metadata.spills == 0
    assert art.metadata.registers is not None and 0 < art.metadata.registers <= 255


WGMMA = {"i8": ("m64n128k32.s32.s8.s8", 128), "f32": ("m64n128k8.f32.tf32.tf32", 32)}


@pytest.mark.parametrize("ptxas", [False, True], ids=["ptx", "cubin"])
@pytest.mark.parametrize("dtype", list(WGMMA))
def test_wgmma_sm90a(dtype: str, ptxas: bool) -> None:
    if ptxas and find_ptxas() is None:
        pytest.skip("no ptxas available")
    shape, block_k = WGMMA[dtype]
    kernel = gm.make_gemm(DTYPES[dtype], 32, WGMMA_FOR_DTYPE[dtype], WGMMA_WAVES, sched=schedule())
    subs = {**WGMMA_SUBS, gm.BLOCK_K: block_k}  # 128-byte rows of K: the TMA boxes' swizzle span
    with pytest.MonkeyPatch.context() as mp:
        if not ptxas:
            mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        art = wc.compile(kernel, subs, target="sm_90a", backend="cuda", cache=False).artifact
    if ptxas:
        assert art.format == "cubin" and art.metadata.spills == 0
        return
    ptx = art.binary.decode()
    assert ptx.count(f"wgmma.mma_async.sync.aligned.{shape} ") >= 4, shape  # BLOCK_K / K per warpgroup tile
    assert "cp.async.bulk.tensor.2d" in ptx and "wgmma.fence.sync.aligned" in ptx
    assert not wgmma_fence_violations(ptx) and not wgmma_descriptor_violations(ptx)
    assert "cvt.rna" not in ptx  # descriptor operands come straight from shared memory


def test_int8_mfma_hsaco() -> None:
    kernel = gm.make_gemm(wc.i8, 64, wc.MMAType.I32_16x16x32_I8, (2, 2))
    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 64, gm.NUM_STAGES: 1, gm.GROUP_M: 4}
    k = wc.compile(kernel, subs, target="gfx942", backend="rocm", cache=False)
    art = k.artifact
    assert art.format == "hsaco" and art.binary[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", art.binary, 18)[0] == 224  # EM_AMDGPU
    assert b"gemm.kd" in art.binary and b"gfx942" in art.binary
    assert re.search(r"amdgpu\.mfma 16x16x32 .*vector<8xi8>.*vector<4xi32>", k.mlir)


def test_nvidia_int8_type_rejects_amd_waves() -> None:
    with pytest.raises(wc.WavecError, match="threads"):
        gm.make_gemm(wc.i8, 64, wc.MMAType.NV_I32_16x8x32_I8)
