"""Binary tier for attention's masks and head dims: every head dim's default tile assembles for sm_80
(mma.sync) and sm_90a (wgmma) without spills within the shared memory of the target; the mask modes
(bottom-right causal, sliding window, soft-cap) too, with the tile skipping visible as loops; everything
compiles for gfx942 (MFMA, f16)."""

from __future__ import annotations

import subprocess

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels.attention import WGMMA_CONFIGS, attention_config, make_attention
from wavec.target import get_target

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None
needs_ptxas = pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH)")
DIMS = [(64, 64), (80, 80), (96, 96), (128, 128), (192, 192), (256, 256), (192, 128)]
MASKS = [  # causal, window, softcap
    ("bottom_right", (-1, -1), 0.0),
    ("bottom_right", (256, -1), 0.0),
    (False, (128, 128), 0.0),
    ("top_left", (-1, -1), 30.0),
]


def _compile(dtype, causal, d, dv, mma, target, window=(-1, -1), softcap=0.0, backend="cuda", config=None):
    subs, waves = attention_config(d, None, config, mma, causal, dv)
    kernel = make_attention(
        dtype, "bhsd", causal, waves, mma, split_epilogue=mma == "wgmma", window=window, softcap=softcap, v_dim=dv != d
    )
    return wc.compile(kernel, subs, target=target, backend=backend, cache=False)


def _fits(k, target: str) -> None:
    m = k.metadata
    assert m.spills == 0 and m.registers <= 255, (m.registers, m.spills)
    assert m.shared_bytes <= get_target(target).max_shared_bytes, m.shared_bytes


@needs_ptxas
@pytest.mark.parametrize("d,dv", DIMS, ids=[f"d{d}-dv{dv}" for d, dv in DIMS])
@pytest.mark.parametrize("mma,target", [("mma_sync", "sm_80"), ("wgmma", "sm_90a")])
def test_head_dim_defaults_fit(d, dv, mma, target) -> None:
    """The default tile of every head dim, causal bottom-right (the heavier body), bf16."""
    _fits(_compile(wc.bf16, "bottom_right", d, dv, mma, target), target)


@needs_ptxas
@pytest.mark.parametrize("d", [80, 192, 256])
def test_wgmma_candidates_fit(d) -> None:
    """Every wgmma candidate tile of the new head dims (the sweep's), f16 non-causal."""
    for config in WGMMA_CONFIGS[d]:
        _fits(_compile(wc.f16, False, d, d, "wgmma", "sm_90a", config=config), "sm_90a")


@needs_ptxas
@pytest.mark.parametrize("d,dv", [(80, 80), (96, 96), (192, 192), (256, 256), (192, 128)])
def test_wgmma_not_serialized(d, dv, tmp_path) -> None:
    """ptxas keeps the new dims' wgmmas asynchronous (it serializes them where it sees the accumulator or A
    registers touched between issue and wait), windowed bottom-right, default tiles."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        ptx = _compile(wc.f16, "bottom_right", d, dv, "wgmma", "sm_90a", (100, -1)).artifact.binary
    (tmp_path / "k.ptx").write_bytes(ptx)
    proc = subprocess.run(
        [find_ptxas(), "-arch=sm_90a", "-v", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
        check=True,
    )
    report = proc.stdout + proc.stderr
    assert "serialized" not in report and "0 bytes spill stores" in report, report


@needs_ptxas
@pytest.mark.parametrize(
    "causal,window,softcap", MASKS, ids=[f"{m[0]}-w{m[1][0]}_{m[1][1]}-cap{m[2]:g}" for m in MASKS]
)
@pytest.mark.parametrize(
    "mma,target,d", [("mma_sync", "sm_80", 128), ("wgmma", "sm_90a", 128), ("wgmma", "sm_90a", 64)]
)
def test_mask_modes_fit(causal, window, softcap, mma, target, d) -> None:
    _fits(_compile(wc.f16, causal, d, d, mma, target, window, softcap), target)


def test_window_kernel_has_three_key_loops() -> None:
    """Masked tiles before and after the full ones (the loop bounds skip the rest): the windowed kernel has
    one ``scf.for`` more than the causal one, and the soft-cap a tanh per score."""
    causal = _compile(wc.f16, "bottom_right", 64, 64, "mma_sync", "sm_80", backend="emulator").mlir
    window = _compile(wc.f16, "bottom_right", 64, 64, "mma_sync", "sm_80", (64, -1), backend="emulator").mlir
    capped = _compile(wc.f16, False, 64, 64, "mma_sync", "sm_80", softcap=20.0, backend="emulator").mlir
    assert window.count("scf.for") == causal.count("scf.for") + 1
    assert "math.tanh" in capped and "math.tanh" not in causal
    assert "arith.maxsi" in causal  # Max(0, ...) of a bottom-right bound: signed, never a negative bound


@pytest.mark.parametrize("d,dv", [(64, 64), (96, 96), (128, 128), (256, 256), (192, 128)])
@pytest.mark.parametrize("causal,window,softcap", [(False, (-1, -1), 0.0), *MASKS])
def test_gfx942_compiles(d, dv, causal, window, softcap) -> None:
    """mma="mfma": waves of 64, gfx942's 16x16x16 f16 MFMA, an HSACO for every head dim and mask."""
    config = (64, 32, 2) if d < 192 else (32, 32, 2)
    k = _compile(wc.f16, causal, d, dv, "mfma", "gfx942", window, softcap, "emulator", config)
    assert k.artifact.format == "hsaco" and k.artifact.binary
    assert "amdgpu.mfma" in k.mlir and "nvgpu" not in k.mlir
