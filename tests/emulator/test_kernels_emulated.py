"""Emulator tier (DESIGN §10): every kernel of ``wavec/kernels`` and ``examples/`` compiled by the real
pipeline and run on the CPU emulator against torch, for the NVIDIA (sm_80, sm_90) and AMD (gfx942)
targets.

Shapes are small but still have several workgroups (>= 2 x 2 where the shape allows), several waves per
workgroup and several iterations of the K loop, and include sizes the tiles do not divide (M = 1, 3, 100;
N = 72; K = 40).  Inputs are fresh random numbers on every run; the seed is printed in every failure
message so a failing draw can be replayed (``WAVEC_TEST_SEED=<seed>``).  Outputs are poisoned with NaN
first and must be written in full.  References are computed by torch in float64 from the same inputs.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import secrets

import pytest
import torch

import wavec as wc
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm
from wavec.kernels.fastpath import Decisions
from wavec.tuning.plan import gemm_config

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"

TORCH_DTYPE = {wc.f16: torch.float16, wc.bf16: torch.bfloat16, wc.f32: torch.float32}
# relative Frobenius error bounds of the elementwise kernels (output rounded to the dtype)
EW_TOL = {wc.f16: 2e-3, wc.bf16: 1e-2, wc.f32: 1e-6}
GEMM_TOL = 1e-5  # f16/bf16 products are exact in f32; only the f32 accumulation rounds


def generator() -> tuple[torch.Generator, int]:
    seed = int(os.environ.get("WAVEC_TEST_SEED") or secrets.randbits(48))
    return torch.Generator().manual_seed(seed), seed


def randn(g: torch.Generator, *shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype)


def poisoned(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str) -> None:
    unwritten = torch.isnan(out.float())
    if unwritten.any():
        first = tuple(unwritten.nonzero()[0].tolist())
        pytest.fail(f"{what}: {int(unwritten.sum())} of {out.numel()} outputs never written (first at {first})")
    err = rel_error(out, ref)
    assert err < tol, f"{what}: relative error {err:.3e} >= {tol:.0e}"


# ------------------------------------------------------------------------------------------ elementwise

# (BLOCK_M, BLOCK_N) = (4, 512): 4 waves per workgroup, one row each.  (M, N) below: 2 x 2, 4 x 3 and
# 1 x 2 workgroups; 13 and 1048 are not multiples of the tile.
EW_SHAPES = [(8, 1024), (13, 1048), (1, 1000)]
EW_TARGETS = [("sm_90", 32), ("gfx942", 64)]


@pytest.mark.parametrize("target,threads", EW_TARGETS, ids=[t for t, _ in EW_TARGETS])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16, wc.f32], ids=lambda d: d.name)
def test_copy(dtype, target: str, threads: int) -> None:
    kernel = wc.compile(ew.make_copy(dtype, threads), ew.DEFAULT_SUBS, backend="emulator", target=target)
    assert kernel.backend == "emulator" and kernel.metadata.block[0] == 4 * threads
    g, seed = generator()
    for m, n in EW_SHAPES:
        src = randn(g, m, n, dtype=TORCH_DTYPE[dtype])
        dst = poisoned(m, n, dtype=TORCH_DTYPE[dtype])
        kernel(src, dst)
        assert torch.equal(src, dst), f"copy {dtype.name} {target} [{m}, {n}] (seed {seed}): output differs"


@pytest.mark.parametrize("target,threads", EW_TARGETS, ids=[t for t, _ in EW_TARGETS])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16, wc.f32], ids=lambda d: d.name)
def test_scale_shift(dtype, target: str, threads: int) -> None:
    kernel = wc.compile(ew.make_scale_shift(dtype, threads), ew.DEFAULT_SUBS, backend="emulator", target=target)
    g, seed = generator()
    tdt = TORCH_DTYPE[dtype]
    for m, n in EW_SHAPES:
        a, b, bias = randn(g, m, n, dtype=tdt), randn(g, m, n, dtype=tdt), randn(g, n, dtype=tdt)
        out = poisoned(m, n, dtype=tdt)
        kernel(a, b, bias, out)
        ref = a.double() * b.double() + bias.double()[None, :]
        check(out, ref, EW_TOL[dtype], f"scale_shift {dtype.name} {target} [{m}, {n}] (seed {seed})")


# ------------------------------------------------------------------------------------------------- GEMM


def _subs(bm: int, bn: int, bk: int, stages: int, group_m: int) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: stages, gm.GROUP_M: group_m}


# (id, subs, waves, shapes (M, N, K)).  Tiles of 64 with BLOCK_K 32: 128 x 128 is 2 x 2 workgroups of
# 2 x 2 waves, K = 96/128 is 3/4 loop iterations; 200 x 136 is 4 x 3 workgroups (GROUP_M = 4 then groups
# rows of workgroups across a ragged last column); M = 1, 3, 100, N = 72, K = 40 are not tile multiples;
# K = 40 with 3 stages has fewer iterations than stages.
GEMM_CONFIGS = [
    ("stages1-group1", _subs(64, 64, 32, 1, 1), (2, 2), [(128, 128, 96), (100, 72, 40), (3, 136, 64)]),
    ("stages2-group4", _subs(64, 64, 32, 2, 4), (2, 2), [(128, 128, 128), (200, 136, 72), (1, 72, 40)]),
    ("stages3-group4", _subs(64, 64, 32, 3, 4), (2, 2), [(128, 128, 128), (100, 72, 40)]),
    ("stages2-waves4x1", _subs(64, 32, 32, 2, 1), (4, 1), [(128, 72, 96)]),
]
NV_MMA = {wc.f16: wc.MMAType.NV_F32_16x8x16_F16, wc.bf16: wc.MMAType.NV_F32_16x8x16_BF16}


def run_gemm(kernel, shapes, what: str, dtype=torch.float16) -> None:
    g, seed = generator()
    for m, n, k in shapes:
        a, b = randn(g, m, k, dtype=dtype), randn(g, n, k, dtype=dtype)
        c = poisoned(m, n)
        kernel(a, b, c)
        check(c, a.double() @ b.double().T, GEMM_TOL, f"{what} M={m} N={n} K={k} (seed {seed})")


NV_PARAMS = [
    pytest.param(dtype, target, cfg, id=f"{dtype.name}-{target}-{cfg[0]}")
    for dtype in (wc.f16, wc.bf16)
    for target in ("sm_90", "sm_80")
    for cfg in GEMM_CONFIGS
    if target == "sm_90" or cfg[0] != "stages2-waves4x1"
]  # one 4x1 wave grid per dtype suffices


@pytest.mark.parametrize("dtype,target,cfg", NV_PARAMS)
def test_gemm_nvidia(dtype, target: str, cfg) -> None:
    name, subs, waves, shapes = cfg
    kernel = wc.compile(gm.make_gemm(dtype, 32, NV_MMA[dtype], waves), subs, backend="emulator", target=target)
    assert kernel.metadata.block[0] == 32 * waves[0] * waves[1]
    run_gemm(kernel, shapes, f"gemm {dtype.name} {target} {name}", TORCH_DTYPE[dtype])


AMD_CONFIGS = [c for c in GEMM_CONFIGS if c[0] != "stages2-waves4x1"]


@pytest.mark.parametrize("cfg", AMD_CONFIGS, ids=[c[0] for c in AMD_CONFIGS])
@pytest.mark.parametrize("mma", [wc.MMAType.F32_16x16x16_F16, wc.MMAType.F32_32x32x8_F16], ids=lambda m: m.name)
def test_gemm_amd(mma, cfg) -> None:
    """The AMD GEMM's numerics (mfma fragment layouts) are validated here: no AMD GPU in CI."""
    name, subs, waves, shapes = cfg
    kernel = wc.compile(gm.make_gemm(wc.f16, 64, mma, waves), subs, backend="emulator", target="gfx942")
    assert kernel.artifact.format == "hsaco" and kernel.metadata.block[0] == 64 * waves[0] * waves[1]
    run_gemm(kernel, shapes, f"gemm f16 gfx942 {mma.name} {name}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_matmul_helper(dtype) -> None:
    """``wavec.kernels.gemm.matmul`` (gemm_config's tile choice) on a decode shape and a small square one."""
    g, seed = generator()
    for m, n, k in [(8, 72, 64), (130, 136, 96)]:
        a, b = randn(g, m, k, dtype=dtype), randn(g, n, k, dtype=dtype)
        c = gm.matmul(a, b, backend="emulator", out_dtype=torch.float32)
        check(c, a.double() @ b.double().T, GEMM_TOL, f"matmul {dtype} M={m} N={n} K={k} (seed {seed})")


def test_matmul_decides_once_per_shape(monkeypatch) -> None:
    """A repeated ``matmul`` of the same dtypes, shapes and options skips the decision (tile choice, compile
    key: tens of microseconds of host time) and still computes on the new values; a new shape or option
    decides again; the decision still validates (a bad ``split`` is refused before any lookup)."""
    decided = []
    runner = gm.matmul_runner
    monkeypatch.setattr(gm, "_DISPATCH", Decisions("matmul"))
    monkeypatch.setattr(gm, "matmul_runner", lambda *args: decided.append(args[1].shape) or runner(*args))
    g, seed = generator()
    for m, n, k, expect in [(130, 136, 96, 1), (130, 136, 96, 1), (64, 72, 64, 2), (130, 136, 96, 2)]:
        a, b = randn(g, m, k, dtype=torch.float16), randn(g, n, k, dtype=torch.float16)
        c = gm.matmul(a, b, backend="emulator", out_dtype=torch.float32)
        check(c, a.double() @ b.double().T, GEMM_TOL, f"matmul M={m} N={n} K={k} (seed {seed})")
        assert len(decided) == expect
    gm.matmul(a, b, backend="emulator", out_dtype=torch.float16)
    assert len(decided) == 3
    config = gemm_config(130, 136, 96)  # an explicit tile decides once too
    for _ in range(2):
        gm.matmul(a, b, backend="emulator", config=config)
    assert len(decided) == 4
    with pytest.raises(wc.WavecError, match="split must be"):
        gm.matmul(a, b, backend="emulator", split=[2])


# --------------------------------------------------------------------------------------------- examples


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_example_on_emulator(path: pathlib.Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("WAVEC_BACKEND", "emulator")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"wavec_example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ok = module.main()
    out = capsys.readouterr().out
    assert ok is True, out
    assert "CPU emulator" in out and "[FAIL]" not in out, out


# ------------------------------------------------------------------------------------ edge cases, bugs


@pytest.mark.parametrize(
    "target,threads,mma",
    [("sm_90", 32, wc.MMAType.NV_F32_16x8x16_F16), ("gfx942", 64, wc.MMAType.F32_16x16x16_F16)],
    ids=["nv", "amd"],
)
def test_gemm_empty_k_writes_zeros_sync_path(target: str, threads: int, mma) -> None:
    kernel = wc.compile(gm.make_gemm(wc.f16, threads, mma), _subs(64, 64, 32, 1, 4), backend="emulator", target=target)
    a, b, c = torch.empty(70, 0, dtype=torch.float16), torch.empty(136, 0, dtype=torch.float16), poisoned(70, 136)
    kernel(a, b, c)
    assert torch.equal(c, torch.zeros(70, 136))


def test_gemm_empty_k_writes_zeros_cp_async_path() -> None:
    kernel = wc.compile(gm.make_gemm(wc.f16), _subs(64, 64, 32, 2, 4), backend="emulator", target="sm_90")
    a, b, c = torch.empty(70, 0, dtype=torch.float16), torch.empty(136, 0, dtype=torch.float16), poisoned(70, 136)
    kernel(a, b, c)
    assert torch.equal(c, torch.zeros(70, 136))


SMALL_TILE_REASON = (
    "wavec bug: coarsen_loads spreads a global->shared tile copy over every thread of the workgroup with "
    "the thread id taken modulo the number of 16-byte vectors, so when the tile has fewer vectors than the "
    "workgroup has threads (BLOCK_M 16 x BLOCK_K 32 f16 = 64 vectors, 128 or 256 threads) the surplus "
    "threads re-load and re-store the same shared addresses from other waves with no barrier between; the "
    "emulator reports a write-write shared-memory race (vector.store / device_async_copy twice)"
)


@pytest.mark.parametrize(
    "target,threads,mma,stages",
    [
        ("sm_90", 32, wc.MMAType.NV_F32_16x8x16_F16, 1),
        ("sm_90", 32, wc.MMAType.NV_F32_16x8x16_F16, 2),
        ("gfx942", 64, wc.MMAType.F32_16x16x16_F16, 1),
    ],
    ids=["nv-sync", "nv-cp.async", "amd"],
)
def test_gemm_tile_smaller_than_workgroup(target: str, threads: int, mma, stages: int) -> None:
    # 16 x 128 tile, 4 waves along N (the decode tile of gemm_config); 2 workgroups, 3 K steps
    kernel = wc.compile(
        gm.make_gemm(wc.f16, threads, mma, (1, 4)), _subs(16, 128, 32, stages, 1), backend="emulator", target=target
    )
    run_gemm(kernel, [(16, 256, 96)], f"gemm {target} 16x128 tile, 1x4 waves")


def test_matmul_decode_shape_with_wide_n() -> None:
    """gemm_config picks the 16x128 tile with 1x4 waves and BLOCK_K 32 for M <= 16, N >= 33792, K = 96."""
    subs, waves = gemm_config(8, 34000, 96)
    assert (subs[gm.BLOCK_M], subs[gm.BLOCK_N], subs[gm.BLOCK_K], waves) == (16, 128, 32, (1, 4))
    a, b = torch.randn(8, 96, dtype=torch.float16), torch.randn(34000, 96, dtype=torch.float16)
    c = gm.matmul(a, b, backend="emulator", out_dtype=torch.float32)
    check(c, a.double() @ b.double().T, GEMM_TOL, "matmul decode 8 x 34000 x 96")


def test_matmul_defaults_follow_torch() -> None:
    """``matmul(a, b)`` returns a's dtype (as ``torch.matmul``) and, off a Hopper GPU, takes mma.sync."""
    g, seed = generator()
    a, b = randn(g, 40, 64, dtype=torch.bfloat16), randn(g, 24, 64, dtype=torch.bfloat16)
    c = gm.matmul(a, b, backend="emulator")
    assert c.dtype == torch.bfloat16
    check(c, a.double() @ b.double().T, 1e-2, f"matmul default bf16 (seed {seed})")
    assert gm.auto_mma(a, "emulator", gm.GemmRequest(mma="auto")) == "mma_sync"
