"""IR tier + emulator: ``widen_stores`` (16-byte stores of 2-byte mma.sync accumulators after a transpose
within each quad of lanes), against its docstring's guarantees."""

import pytest
import torch

import wavec as wc
from wavec.frontend.constraints import ConstraintSet
from wavec.frontend.ops import WideStore, Write
from wavec.kernels import gemm as gm
from wavec.passes.context import PassContext
from wavec.passes.pipeline import run_pipeline

SUBS = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: 2, gm.GROUP_M: 8}


def _trace(out, target: str = "sm_90", **extra):
    kernel = gm.make_gemm(wc.f16, waves=(2, 2), out_dtype=out)
    trace = kernel.trace()
    subs = {**SUBS, **{getattr(wc.sym, k): v for k, v in extra.items()}}
    run_pipeline(trace, PassContext.build(trace, ConstraintSet(kernel.constraints, subs), target))
    return trace


def _ops(trace) -> list:
    return [n.meta.get("op") for n in trace.graph.nodes]


def test_f16_accumulators_store_16_bytes_per_lane() -> None:
    ops = _ops(_trace(wc.f16))
    # a 32x32 wave tile: 2 M tiles x 4 N tiles -> 8 fragment writes -> 2 wide stores
    assert ops.count(WideStore) == 2 and Write not in ops
    wide = next(n for n in _trace(wc.f16).graph.nodes if n.meta.get("op") is WideStore)
    assert len(wide.args) == 5 and len(wide.meta["narrow"]) == 4


def test_f32_and_indivisible_static_n_keep_narrow_writes() -> None:
    assert WideStore not in _ops(_trace(wc.f32))  # 8 bytes per lane already, 4-byte elements
    assert WideStore not in _ops(_trace(wc.f16, N=90))  # rows are not 16-byte aligned
    assert WideStore in _ops(_trace(wc.f16, N=96))


def test_cdna3_has_no_wide_stores() -> None:
    kernel = gm.make_gemm(wc.f16, threads_per_wave=64, mma_type=wc.MMAType.F32_16x16x16_F16, out_dtype=wc.f16)
    trace = kernel.trace()
    run_pipeline(trace, PassContext.build(trace, ConstraintSet(kernel.constraints, SUBS), "gfx942"))
    assert WideStore not in _ops(trace)


def test_mlir_branches_on_n_and_stores_16_bytes() -> None:
    pytest.importorskip("iree.compiler")
    k = wc.compile(
        gm.make_gemm(wc.f16, waves=(2, 2), out_dtype=wc.f16), SUBS, target="sm_90", backend="emulator", cache=False
    )
    m = k.mlir
    assert m.count("gpu.shuffle xor") == 2 * 2 * 3  # 2 wide stores x 2 rows x 3 exchanges
    assert m.count("alignment = 16 : memref<?x?xf16>, vector<8xf16>") == 2 * 2
    assert "arith.remui" in m and "vector<2xf16>" in m  # the N % 8 test and the narrow fallback
    # C is written only by WideStores: its binding must not be ReadOnly (LLVM would drop the stores)
    subspans = [line for line in m.splitlines() if "binding.subspan" in line]
    assert len(subspans) == 3 and all("ReadOnly" in line for line in subspans[:2]) and "ReadOnly" not in subspans[2]
    assert k.artifact.metadata.divisibility == (("K", 8), ("N", 2))  # N needs no new divisibility


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16])
@pytest.mark.parametrize("mnk", [(70, 96, 40), (130, 64, 64), (64, 64, 8), (33, 250, 24), (5, 18, 16)])
def test_emulator_numerics(dtype, mnk) -> None:
    """N % 8 == 0 takes the 16-byte stores, other N the narrow ones; every element written, f64 reference."""
    pytest.importorskip("iree.compiler")
    mma = wc.MMAType.NV_F32_16x8x16_F16 if dtype == wc.f16 else wc.MMAType.NV_F32_16x8x16_BF16
    k = wc.compile(
        gm.make_gemm(dtype, mma_type=mma, waves=(2, 2), out_dtype=dtype),
        SUBS,
        target="sm_90",
        backend="emulator",
        cache=False,
    )
    m, n, kk = mnk
    tdt = torch.float16 if dtype == wc.f16 else torch.bfloat16
    g = torch.Generator().manual_seed(m * n)
    a, b = torch.randn(m, kk, generator=g).to(tdt), torch.randn(n, kk, generator=g).to(tdt)
    c = torch.full((m, n), float("nan")).to(tdt)
    k(a, b, c)
    assert not c.isnan().any(), f"{int(c.isnan().sum())} outputs never written"
    ref = a.double() @ b.double().T
    err = float((c.double() - ref).abs().max() / ref.abs().max())
    assert err < (2e-3 if dtype == wc.f16 else 1.6e-2), err


def test_attention_output_keeps_narrow_stores() -> None:
    """4-D outputs (attention's [B, H, M, D]) are left alone until timed and tested on a GPU."""
    from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, make_attention

    kernel = make_attention(wc.f16, "bhsd", False, 4)
    trace = kernel.trace()
    subs = {BLOCK_M: 64, BLOCK_N: 64, NUM_STAGES: 2, D: 64}
    run_pipeline(trace, PassContext.build(trace, ConstraintSet(kernel.constraints, subs), "sm_90"))
    assert WideStore not in _ops(trace) and Write in _ops(trace)


@pytest.mark.parametrize("mnk", [(1, 64, 256), (16, 200, 128), (9, 4096, 136)])
def test_emulator_decode_tile(mnk) -> None:
    """The decode tile (16 x 64, 1 x 2 waves: a 16 x 32 wave tile, one wide store per row pair)."""
    pytest.importorskip("iree.compiler")
    subs = {gm.BLOCK_M: 16, gm.BLOCK_N: 64, gm.BLOCK_K: 128, gm.NUM_STAGES: 4, gm.GROUP_M: 1}
    k = wc.compile(
        gm.make_gemm(wc.f16, waves=(1, 2), out_dtype=wc.f16), subs, target="sm_90", backend="emulator", cache=False
    )
    assert k.mlir.count("vector<8xf16>") >= 2
    m, n, kk = mnk
    g = torch.Generator().manual_seed(n)
    a, b = torch.randn(m, kk, generator=g).half(), torch.randn(n, kk, generator=g).half()
    c = torch.full((m, n), float("nan")).half()
    k(a, b, c)
    assert not c.isnan().any()
    ref = a.double() @ b.double().T
    assert float((c.double() - ref).abs().max() / ref.abs().max()) < 2e-3


def test_non_accumulator_layouts_are_left_alone() -> None:
    """An elementwise kernel's f16 writes (16-byte runs already, no mma layout) get no WideStore."""
    from wavec.kernels import elementwise as ew

    kernel = ew.make_copy(wc.f16)
    trace = kernel.trace()
    run_pipeline(trace, PassContext.build(trace, ConstraintSet(kernel.constraints, ew.DEFAULT_SUBS), "sm_90"))
    assert WideStore not in _ops(trace) and Write in _ops(trace)
