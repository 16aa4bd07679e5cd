"""Binary tier for the fused MoE kernels: every static tile choice compiles for sm_80 and sm_90a (cubin
without spills where ptxas exists) and, with the MFMA, for gfx942 (HSACO); token rows are gathered with
16-byte ``cp.async`` copies (the expert's weights too) after the ``wc.exit_if`` branch, and the atomic
combine lowers to relaxed ``red`` (vector on sm_90a), never ``atom.acq_rel.sys``."""

from __future__ import annotations

import re

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels import fused_moe_kernels as fk
from wavec.kernels.fused_moe import MoeConfig, static_config, tiles_for_block
from wavec.tuning.plan import mma_type_for

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None
# (T, k, E) giving each static token block: 16, 32, 64, 128
SHAPES = [(1, 8, 64), (256, 8, 64), (512, 8, 64), (4096, 2, 8)]


def _kernels(target: str, block_m: int, dtype=wc.bf16) -> dict:
    tpw, mma = mma_type_for("mma_sync", dtype, target)
    return {
        "up": fk.make_up(dtype, 8, "silu", False, tpw, mma, block_m),
        "up_weighted": fk.make_up(dtype, 1, "silu", True, tpw, mma, block_m),
        "up_gelu": fk.make_up(dtype, 8, "gelu", False, tpw, mma, block_m),
        "down": fk.make_down(dtype, 8, True, True, tpw, mma, block_m),
        "down_atomic": fk.make_down(dtype, 8, True, False, tpw, mma, block_m),
    }


def _compile(kernel, subs: dict, target: str):
    backend = "rocm" if target.startswith("gfx") else "cuda"
    return wc.compile(kernel, subs, target=target, backend=backend, cache=False)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("shape", SHAPES)
def test_static_tiles_compile_without_spills(target: str, shape: tuple) -> None:
    cfg = static_config(*shape)
    for name, kernel in _kernels(target, cfg.block_m).items():
        k = _compile(kernel, cfg.subs(name.startswith("down")), target)
        m = k.metadata
        assert m.block == (128, 1, 1), name
        if HAS_PTXAS:
            assert k.artifact.format == "cubin" and m.spills == 0, (name, cfg, m.registers, m.spills)
        # wc.exit_if: blocks without a local expert branch past everything, before the first copy
        assert k.mlir.index("scf.if") < k.mlir.index("nvgpu.device_async_copy"), name
        copies = re.findall(r"nvgpu.device_async_copy %\w+\[([^\]]*)\].*, 8, %\w+ bypassL1", k.mlir)
        # up: token rows [row, k] and the expert's gate and up rows [e, g, n, k]; down: [m, k], [e, n, k]
        ranks = {len(c.split(",")) for c in copies}
        assert ranks == ({2, 4} if name.startswith("up") else {2, 3}), (name, ranks)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_atomic_combine_uses_relaxed_reductions(target: str, monkeypatch) -> None:
    cfg = static_config(256, 2, 8)
    kernel = _kernels(target, cfg.block_m)["down_atomic"]
    with monkeypatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        ptx = _compile(kernel, cfg.subs(True), target).artifact.binary.decode()
    want = "red.relaxed.gpu.global.add.v2.f32" if target == "sm_90a" else "red.relaxed.gpu.global.add.f32"
    assert want in ptx and "atom." not in ptx


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_combine_and_remap_compile(target: str) -> None:
    dtype = wc.f16 if target == "gfx942" else wc.bf16
    tpw = 64 if target == "gfx942" else 32
    for kernel, subs in (
        (fk.make_combine(dtype, tpw), fk.combine_subs(8, tpw)),
        (fk.make_remap(tpw), fk.remap_subs(tpw)),
    ):
        k = _compile(kernel, subs, target)
        assert k.artifact.binary
        if HAS_PTXAS and target != "gfx942":
            assert k.artifact.format == "cubin" and k.metadata.spills == 0


@pytest.mark.parametrize("block_m", [16, 64])
def test_gfx942_compiles_with_mfma(block_m: int) -> None:
    """The MFMA's 16x16 tile needs N tiles of 64 over the 1 x 4 waves of a 16-row block."""
    cfg = tiles_for_block(block_m)
    cfg = MoeConfig(cfg.block_m, max(cfg.block_n, 64), cfg.block_n_down, cfg.block_k, cfg.stages)
    for name, kernel in _kernels("gfx942", block_m, wc.f16).items():
        k = _compile(kernel, cfg.subs(name.startswith("down")), "gfx942")
        assert k.artifact.format == "hsaco" and k.artifact.binary[:4] == b"\x7fELF", name
        assert "amdgpu.mfma 16x16x16" in k.mlir and "nvgpu" not in k.mlir, name
