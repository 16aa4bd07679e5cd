"""Binary tier for paged decode attention: the library's tiles compile for sm_80 and sm_90a (cubin without
spills where ptxas exists) and, with the MFMA, for gfx942 (HSACO); the K/V tiles are gathered 16 bytes at
a time through the block table (one i32 block-table load per copied row) and the only dynamic sizes are
the arguments' (rows, keys and the split-and-head grid axis are derived: no launch constant for them)."""

from __future__ import annotations

import re

import pytest

import wavec as wc
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels.paged_attention import CONFIGS, make_paged_attention, paged_subs

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None


def _compile(target: str, dtype, head_dim: int, group: int, page: int, block_n: int, waves: int):
    amd = target.startswith("gfx")
    hw = {"threads_per_wave": 64, "mma_type": wc.MMAType.F32_16x16x16_F16} if amd else {}
    kernel = make_paged_attention(dtype, group, page, waves=waves, **hw)
    subs = paged_subs(head_dim, group, page, block_n, waves)
    return wc.compile(kernel, subs, target=target, backend="rocm" if amd else "cuda", cache=False)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("rows, head_dim", sorted(CONFIGS))
def test_library_tiles_compile_without_spills(target: str, rows: int, head_dim: int) -> None:
    block_n, waves = CONFIGS[(rows, head_dim)]
    k = _compile(target, wc.bf16, head_dim, 8, 16, block_n, waves)
    m = k.metadata
    assert m.block == (32 * waves, 1, 1)
    # the launch constants: the arguments' dynamic dims only (M = QL * G, N = P * PAGE, Y = SP * KVH derived)
    assert set(m.constants) == {"B", "QL", "H", "NB", "KVH", "P", "SP", "scale"}, m.constants
    if HAS_PTXAS:
        assert k.artifact.format == "cubin" and m.spills == 0, (m.registers, m.spills)
    # K and V rows gathered 16 bytes at a time, both tiles staged for ldmatrix
    # the kv head is grid axis 1 modulo KVH (axis 1 = split * KVH + kv head); the block of a step is computed
    # in the loop and recomputed for the step each copy fills: 16-byte cp.async of gathered rows, 2 stages
    assert re.search(r"arith\.remui %block_id_y, %\w+", k.mlir)
    copies = re.findall(r"nvgpu\.device_async_copy %\w+\[.*?\], %alloc\w*\[.*?\], 8, .*memref<2x", k.mlir)
    assert len(copies) == k.mlir.count("nvgpu.device_async_copy") > 0
    assert k.mlir.count("memref.alloc") == 2


def test_gfx942_compiles_with_mfma() -> None:
    k = _compile("gfx942", wc.f16, 64, 4, 32, 64, 1)
    assert k.artifact.format == "hsaco" and k.artifact.binary[:4] == b"\x7fELF"
    assert "amdgpu.mfma 16x16x16" in k.mlir and "nvgpu" not in k.mlir
    assert k.metadata.block == (64, 1, 1)
