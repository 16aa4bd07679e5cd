"""Binary tier for the fused MoE kernels: every static tile choice compiles for sm_80 and sm_90a (cubin
without spills where ptxas exists) and, with the MFMA, for gfx942 (HSACO); token rows are gathered with
16-byte ``cp.async`` copies (the expert's weights too) after the ``wc.exit_if`` branch, and the atomic
combine lowers to relaxed ``red`` (vector on sm_90a), never ``atom.acq_rel.sys``.  The swap-AB kernels
(``MoeConfig(swap=True)``) compile for sm_90a to m64nNk16 ``wgmma`` with N the token block (8, 16, 32),
one warpgroup per 64 weight rows, gathered ``cp.async`` operands, no spills and the PTX checks passed."""

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


def _kernels(target: str, block_m: int, dtype=wc.bf16, cfg: MoeConfig | None = None) -> dict:
    """The GEMM variants; with a swap-AB ``cfg``, its wgmma kernels."""
    swap = cfg is not None and cfg.swap
    tpw, mma = mma_type_for("wgmma" if swap else "mma_sync", dtype, target)
    up, down = (cfg.swap_waves(False), cfg.swap_waves(True)) if swap else (None, None)
    return {
        "up": fk.make_up(dtype, 8, "silu", False, tpw, mma, block_m, up),
        "up_weighted": fk.make_up(dtype, 1, "silu", True, tpw, mma, block_m, up),
        "up_gelu": fk.make_up(dtype, 8, "gelu", False, tpw, mma, block_m, up),
        "down": fk.make_down(dtype, 8, True, True, tpw, mma, block_m, down),
        "down_atomic": fk.make_down(dtype, 8, True, False, tpw, mma, block_m, down),
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


SWAP_CONFIGS = [
    MoeConfig(8, 64, 128, 64, 3, swap=True),
    MoeConfig(16, 128, 128, 64, 4, swap=True),
    MoeConfig(32, 256, 256, 64, 3, swap=True),
    MoeConfig(16, 64, 64, 128, 2, swap=True),
    MoeConfig(32, 128, 256, 128, 2, swap=True),
]


@pytest.mark.parametrize("cfg", SWAP_CONFIGS, ids=MoeConfig.label)
def test_swap_ab_compiles_to_wgmma(cfg: MoeConfig) -> None:
    dtype = wc.f16 if cfg.block_k == 128 else wc.bf16
    for name, kernel in _kernels("sm_90a", cfg.block_m, dtype, cfg).items():
        down = name.startswith("down")
        k = _compile(kernel, cfg.subs(down), "sm_90a")
        m = k.metadata
        wg = cfg.swap_waves(down)
        n = cfg.block_n_down if down else cfg.block_n
        # a warpgroup per 64 weight rows while every thread still copies 16-byte runs of the token tile
        assert m.block == (128 * wg, 1, 1) and wg == min(n // 64, max(1, cfg.block_m * cfg.block_k // 1024))
        assert f"<m = 64, n = {cfg.block_m}, k = 16>" in k.mlir and "nvvm.mma.sync" not in k.mlir, name
        assert k.mlir.index("scf.if") < k.mlir.index("nvgpu.device_async_copy"), name
        copies = re.findall(r"nvgpu.device_async_copy %\w+\[([^\]]*)\], %\w+\[[^\]]*\], (\d+),", k.mlir)
        widths = {(len(c.split(",")), int(w)) for c, w in copies}
        # the expert's weight rows [e, g, n, k] / [e, n, k] in 16-byte copies; the gathered token rows
        # [row, k] (or the intermediate's [m, k]) too, or 8-byte ones where an 8-row tile has fewer
        # 16-byte chunks than the warpgroup has threads
        weight_rank = 4 if name.startswith("up") else 3
        assert {r for r, _w in widths} == {2, weight_rank} and (weight_rank, 8) in widths, (name, widths)
        assert {w for r, w in widths if r == 2} == {min(8, cfg.block_m * cfg.block_k // (128 * wg))}
        if HAS_PTXAS:
            assert k.artifact.format == "cubin" and m.spills == 0, (name, cfg, m.registers, m.spills)


def test_swap_ab_atomic_combine_uses_relaxed_reductions(monkeypatch) -> None:
    cfg = SWAP_CONFIGS[0]
    with monkeypatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        ptx = _compile(_kernels("sm_90a", cfg.block_m, cfg=cfg)["down_atomic"], cfg.subs(True), "sm_90a")
    text = ptx.artifact.binary.decode()
    assert "red.relaxed.gpu.global.add" in text and "atom." not in text and "wgmma.mma_async" in text


WGMMA_CONFIGS = [
    MoeConfig(64, 64, 128, 64, 4, wgmma=True),
    MoeConfig(64, 128, 128, 64, 4, wgmma=True),
    MoeConfig(128, 64, 128, 64, 3, wgmma=True),
    MoeConfig(128, 128, 256, 64, 4, wgmma=True),
]


@pytest.mark.parametrize("cfg", WGMMA_CONFIGS, ids=lambda c: c.label())
def test_wgmma_blocks_compile_to_wgmma(cfg: MoeConfig) -> None:
    """The token block on wgmma's M axis: a warpgroup per 64 tokens, m64nNk16 with N the weight tile,
    the gathered token rows and the expert's rows in 16-byte ``cp.async`` copies after the ``exit_if``
    branch, every variant without spills."""
    variants = {
        "up": dict(activation="silu"),
        "up_weighted": dict(weighted_input=True),
        "up_gelu": dict(activation="gelu"),
        "down": dict(deterministic=True),
        "down_atomic": dict(deterministic=False),
    }
    for name, options in variants.items():
        down = name.startswith("down")
        k = _compile(cfg.make_gemm(down, wc.bf16, 8, "sm_90a", **options), cfg.subs(down), "sm_90a")
        n = cfg.block_n_down if down else cfg.block_n
        assert k.metadata.block == (128 * (cfg.block_m // 64), 1, 1), name
        assert f"<m = 64, n = {n}, k = 16>" in k.mlir and "nvvm.mma.sync" not in k.mlir, name
        assert k.mlir.index("scf.if") < k.mlir.index("nvgpu.device_async_copy"), name
        widths = {int(w) for w in re.findall(r"nvgpu.device_async_copy %\w+\[[^\]]*\], %\w+\[[^\]]*\], (\d+),", k.mlir)}
        assert widths == {8}, (name, widths)
        if HAS_PTXAS:
            assert k.artifact.format == "cubin" and k.metadata.spills == 0, (name, cfg, k.metadata.registers)
