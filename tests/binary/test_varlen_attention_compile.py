"""Binary tier for variable-length prefill attention: the kernel compiles for sm_80 and sm_90a (mma.sync and
wgmma; cubin without spills where ptxas exists) and gfx942 (MFMA, HSACO); Q/K/V rows are gathered in
16-byte ``cp.async`` runs; the launch constants are the arguments' sizes only (B is derived from
cu_seqlens, max_seqlen_q / _k come from the shape carriers).  The wgmma kernels are wgmma after
``wc.exit_if``: their shared tiles must be allocated before the branch (codegen/control.py)."""

from __future__ import annotations

import re

import pytest

import wavec as wc
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels.attention import mask_spec
from wavec.kernels.varlen import make_varlen_attention, varlen_subs

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None
CONSTANTS = {"C", "H", "KVH", "M", "N", "T", "TK", "TO", "scale", "spare"}


def _compile(target: str, mma: str, dtype, head_dim: int, causal, window=(-1, -1), softcap=0.0):
    subs, waves = varlen_subs(head_dim, mma)
    kernel = make_varlen_attention(dtype, mask_spec(causal, window), waves, mma, softcap)
    amd = target.startswith("gfx")
    return wc.compile(kernel, subs, target=target, backend="rocm" if amd else "cuda", cache=False)


@pytest.mark.parametrize(
    "target, mma, dtype, head_dim, causal, window, softcap",
    [
        ("sm_80", "mma_sync", wc.bf16, 128, "bottom_right", (-1, -1), 0.0),
        ("sm_80", "mma_sync", wc.f16, 64, False, (-1, -1), 0.0),
        ("sm_90a", "mma_sync", wc.f16, 64, "top_left", (-1, -1), 0.0),
        ("sm_90a", "wgmma", wc.bf16, 128, False, (-1, -1), 0.0),
        ("sm_90a", "wgmma", wc.f16, 64, "bottom_right", (-1, -1), 0.0),
        ("sm_80", "mma_sync", wc.bf16, 128, "top_left", (256, -1), 30.0),  # window and soft-cap
        ("sm_90a", "wgmma", wc.bf16, 128, "bottom_right", (256, -1), 30.0),
    ],
)
def test_nvidia_compiles_without_spills(target, mma, dtype, head_dim, causal, window, softcap) -> None:
    k = _compile(target, mma, dtype, head_dim, causal, window, softcap)
    m = k.metadata
    assert set(m.constants) == CONSTANTS, m.constants
    if HAS_PTXAS:
        assert k.artifact.format == "cubin" and m.spills == 0, (m.registers, m.spills)
    # gathered rows copied 16 bytes at a time (8 halves) into staged shared tiles
    copies = re.findall(r"nvgpu\.device_async_copy %\w+\[.*?\], %alloc\w*\[.*?\], 8", k.mlir)
    assert len(copies) == k.mlir.count("nvgpu.device_async_copy") > 0


def test_gfx942_compiles_with_mfma() -> None:
    k = _compile("gfx942", "mfma", wc.f16, 64, "bottom_right")
    assert k.artifact.format == "hsaco" and k.artifact.binary[:4] == b"\x7fELF"
    assert "amdgpu.mfma 16x16x16" in k.mlir and "nvgpu" not in k.mlir
