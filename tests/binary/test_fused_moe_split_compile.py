"""Binary tier for the split-K down-projection (``MoeConfig(split_k=S)``): the decode tiles of the Mixtral
shapes where the region rule applies compile for sm_80 and sm_90a (mma.sync; cubin without spills where
ptxas exists), the swap-AB form for sm_90a (m64nNk16 ``wgmma``), and with the MFMA for gfx942 (HSACO); the
grid's third axis is S, and the partials go out through relaxed ``red`` reductions (vector on sm_90a's
mma.sync tiles), never ``atom``; the deterministic form through plain f32 stores."""

from __future__ import annotations

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels import fused_moe_kernels as fk
from wavec.kernels.fused_moe import MoeConfig
from wavec.tuning.plan import mma_type_for

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None

CONFIGS = [
    MoeConfig(16, 64, 128, 64, 3, split_k=2),
    MoeConfig(16, 64, 256, 64, 4, split_k=4),
    MoeConfig(32, 64, 256, 32, 3, split_k=3),
    MoeConfig(64, 64, 128, 32, 3, group_m=8, split_k=2),  # grouped order along x, the slices along z
    MoeConfig(16, 64, 128, 64, 3, swap=True, split_k=2),
    MoeConfig(16, 128, 256, 64, 4, swap=True, split_k=4),
]


def _down(cfg: MoeConfig, target: str, weighted_output: bool = True, dtype=wc.bf16):
    tpw, mma = mma_type_for("wgmma" if cfg.swap else "mma_sync", dtype, target)
    kernel = fk.make_down(dtype, 2, weighted_output, False, tpw, mma, cfg.block_m, cfg.swap_waves(True), True)
    backend = "rocm" if target.startswith("gfx") else "cuda"
    return wc.compile(kernel, cfg.subs(True), target=target, backend=backend, cache=False)


# swap-AB is wgmma: sm_90a only
CASES = [(c, t) for c in CONFIGS for t in ("sm_80", "sm_90a") if t == "sm_90a" or not c.swap]


@pytest.mark.parametrize("cfg, target", CASES, ids=[f"{c.label()}-{t}" for c, t in CASES])
def test_split_down_compiles_with_the_split_grid(cfg: MoeConfig, target: str, monkeypatch) -> None:
    for weighted in (True, False):
        k = _down(cfg, target, weighted)
        m = k.metadata
        assert m.grid[2] == str(cfg.split_k) and m.block == (128 * (cfg.swap_waves(True) or 1), 1, 1)
        if HAS_PTXAS:
            assert k.artifact.format == "cubin" and m.spills == 0, (cfg.label(), m.registers, m.spills)
        if cfg.swap:
            assert f"<m = 64, n = {cfg.block_m}, k = 16>" in k.mlir and "nvvm.mma.sync" not in k.mlir
    with monkeypatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        ptx = _down(cfg, target).artifact.binary.decode()
    # swap-AB's [weight rows, tokens] accumulator holds one element per token column: scalar reductions
    vector = target == "sm_90a" and not cfg.swap
    want = "red.relaxed.gpu.global.add.v2.f32" if vector else "red.relaxed.gpu.global.add.f32"
    assert want in ptx and "atom." not in ptx


def test_split_down_compiles_for_gfx942() -> None:
    cfg = MoeConfig(16, 64, 128, 64, 3, split_k=3)
    k = _down(cfg, "gfx942", dtype=wc.f16)
    assert k.artifact.format == "hsaco" and k.artifact.binary[:4] == b"\x7fELF"
    assert "amdgpu.mfma 16x16x16" in k.mlir and k.metadata.grid[2] == "3"


@pytest.mark.parametrize("cfg, target", [(CONFIGS[1], "sm_80"), (CONFIGS[1], "sm_90a"), (CONFIGS[5], "sm_90a")])
def test_deterministic_split_stores_f32_rows(cfg: MoeConfig, target: str) -> None:
    """The deterministic split form: plain f32 stores of the slices' rows (no reductions, no atomics) on
    the split grid, no spills; its combine (``make_combine(split=True)``) compiles too."""
    tpw, mma = mma_type_for("wgmma" if cfg.swap else "mma_sync", wc.bf16, target)
    kernel = fk.make_down(wc.bf16, 2, True, True, tpw, mma, cfg.block_m, cfg.swap_waves(True), True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        ptx = wc.compile(kernel, cfg.subs(True), target=target, backend="cuda", cache=False).artifact.binary.decode()
    assert "st.global" in ptx and " red." not in ptx and "\tred." not in ptx and "atom." not in ptx
    k = wc.compile(kernel, cfg.subs(True), target=target, backend="cuda", cache=False)
    assert k.metadata.grid[2] == str(cfg.split_k)
    if HAS_PTXAS:
        assert k.artifact.format == "cubin" and k.metadata.spills == 0
    combine = fk.make_combine(wc.bf16, tpw, split=True)
    subs = fk.combine_subs(2, tpw, split=cfg.split_k)
    assert wc.compile(combine, subs, target=target, backend="cuda", cache=False).artifact.binary
