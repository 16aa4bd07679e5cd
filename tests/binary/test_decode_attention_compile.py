"""Binary tier for split-KV decode attention over a dense cache: the library's tiles and the combine
compile for sm_80 and sm_90a (cubin without spills where ptxas exists) and, with the MFMA, for gfx942
(HSACO); K and V are staged with 16-byte ``cp.async`` copies (two stages), the kv head is grid axis 1
modulo KVH, and the only launch constants are the arguments' dynamic dims."""

from __future__ import annotations

import re

import pytest

import wavec as wc
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels.decode import (
    CONFIGS,
    combine_subs,
    decode_subs,
    make_decode_combine,
    make_decode_split,
    split_kernel_subs,
)

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None
MFMA = {"threads_per_wave": 64, "mma_type": wc.MMAType.F32_16x16x16_F16}


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("rows, head_dim", sorted(CONFIGS))
def test_library_tiles_compile_without_spills(target: str, rows: int, head_dim: int) -> None:
    block_n, waves = CONFIGS[(rows, head_dim)]
    subs = decode_subs(head_dim, 4, block_n, waves)
    k = wc.compile(make_decode_split(wc.bf16, 4, waves=waves), subs, target=target, backend="cuda", cache=False)
    m = k.metadata
    assert m.block == (32 * waves, 1, 1)
    assert set(m.constants) == {"B", "QL", "H", "N", "KVH", "SP", "scale"}, m.constants
    if HAS_PTXAS:
        assert k.artifact.format == "cubin" and m.spills == 0, (m.registers, m.spills)
    # 16-byte asynchronous copies of K and V, two stages of each
    copies = re.findall(r"nvgpu\.device_async_copy %\w+\[.*?\], %alloc\w*\[.*?\], 8, .*memref<2x", k.mlir)
    assert len(copies) == k.mlir.count("nvgpu.device_async_copy") > 0
    assert re.search(r"arith\.remui %block_id_y, %\w+", k.mlir)
    assert k.mlir.count("memref.alloc") == 2


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("rows, head_dim", sorted(CONFIGS))
def test_direct_kernels_compile_without_spills(target: str, rows: int, head_dim: int) -> None:
    """One split (``direct``): SP bound to 1, no partials, the output stored in the input dtype."""
    gfx = target == "gfx942"
    block_n, waves = CONFIGS[(rows, head_dim)]
    subs = split_kernel_subs(decode_subs(head_dim, 4, block_n, waves), False, direct=True)
    kernel = make_decode_split(wc.bf16 if not gfx else wc.f16, 4, direct=True, waves=waves, **(MFMA if gfx else {}))
    k = wc.compile(kernel, subs, target=target, backend="rocm" if gfx else "cuda", cache=False)
    m = k.metadata
    assert set(m.constants) == {"B", "QL", "H", "N", "KVH", "scale"}, m.constants
    if gfx:
        assert k.artifact.format == "hsaco"
        return
    assert m.block == (32 * waves, 1, 1)
    if HAS_PTXAS:
        assert k.artifact.format == "cubin" and m.spills == 0, (m.registers, m.spills)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("splits", [1, 16, 17, 64])
def test_combine_compiles_without_spills(target: str, splits: int) -> None:
    k = wc.compile(make_decode_combine(wc.bf16), combine_subs(splits), target=target, backend="cuda", cache=False)
    assert k.metadata.block == (128, 1, 1)
    assert set(k.metadata.constants) == {"B", "R", "D"}, k.metadata.constants
    if HAS_PTXAS:
        assert k.metadata.spills == 0, (k.metadata.registers, k.metadata.spills)


def test_gfx942_compiles_with_mfma() -> None:
    k = wc.compile(make_decode_split(wc.f16, 4, waves=1, **MFMA), decode_subs(64, 4, 64, 1), target="gfx942",
                   backend="rocm", cache=False)  # fmt: skip
    assert k.artifact.format == "hsaco" and k.artifact.binary[:4] == b"\x7fELF"
    assert "amdgpu.mfma 16x16x16" in k.mlir and "nvgpu" not in k.mlir
    assert k.metadata.block == (64, 1, 1)
    c = wc.compile(make_decode_combine(wc.f16, threads_per_wave=64), combine_subs(4, 4, 64), target="gfx942",
                   backend="rocm", cache=False)  # fmt: skip
    assert c.artifact.format == "hsaco" and c.metadata.block == (256, 1, 1)
