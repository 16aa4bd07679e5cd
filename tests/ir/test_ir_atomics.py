"""IR tier: ``coarsen_loads`` gives an atomic the runs one reduction instruction of the target updates
(``atomic_width``): 4 f32 / 8 halves (16 bytes) on vector-``red`` targets, a packed f16x2 / bf16x2 pair,
else one element (a used result, min/max, bf16 before sm_90, AMD)."""

import pytest

import wavec as wc
from tests import dyn_kernels as dk
from wavec.frontend.constraints import ConstraintSet
from wavec.frontend.ops_atomic import Atomic
from wavec.passes.context import PassContext
from wavec.passes.pipeline import run_pipeline


def _runs(kernel: wc.WaveKernel, target: str, subs: dict | None = None) -> set:
    trace = kernel.trace()
    ctx = PassContext.build(trace, ConstraintSet(kernel.constraints, subs or {}), target)
    run_pipeline(trace, ctx, (), stop_after="mask_bounds")
    atomics = [n for g in trace.graphs() for n in g.nodes if n.meta.get("op") is Atomic]
    assert atomics
    return {(n, a) for x in atomics for (_f, n, _o), a in zip(x.meta["accesses"], x.meta["alignments"])}


@pytest.mark.parametrize(
    "kind, dtype, target, runs",
    [
        ("add", wc.f32, "sm_90a", {(4, 16)}),  # red.global.add.v4.f32
        ("add", wc.f32, "sm_80", {(1, 4)}),
        ("add", wc.f16, "sm_90a", {(4, 8)}),  # the thread's 4 halves: v2.f16x2 (8 would need 8 per row)
        ("add", wc.f16, "sm_80", {(2, 4)}),  # f16x2 pairs
        ("add", wc.bf16, "sm_90", {(2, 4)}),  # bf16x2 from sm_90, no vector form under sm_90's PTX 8.0
        ("add", wc.bf16, "sm_80", {(1, 2)}),
        ("add", wc.i32, "sm_90a", {(1, 4)}),
        ("min", wc.f32, "sm_90a", {(1, 4)}),
        ("add", wc.f32, "gfx942", {(1, 4)}),
    ],
)
def test_atomic_run_width(kind: str, dtype, target: str, runs: set) -> None:
    assert _runs(dk.make_atomic(kind, dtype, 64 if target == "gfx942" else 32), target) == runs


def test_used_result_takes_single_elements() -> None:
    assert _runs(dk.make_atomic_old("add", wc.f32), "sm_90a") == {(1, 4)}


def test_gather_gemm_scatter_pairs_accumulator_columns() -> None:
    """The mma.sync C fragment holds two neighbouring columns per register pair: one 8-byte v2 red."""
    kernel = dk.make_gather_gemm(dk.gemm_constraints())
    assert _runs(kernel, "sm_90a", dk.GEMM_SUBS) == {(2, 8)}
    assert _runs(kernel, "sm_80", dk.GEMM_SUBS) == {(1, 4)}
