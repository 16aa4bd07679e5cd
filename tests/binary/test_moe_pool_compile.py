"""Binary tier for the routing-aware MoE pool (``tuning/moe_profile.build_pool``): a reduced pool of a model
shape compiles (in worker processes) for sm_90a and sm_80, keeps the static rule's configurations, and
has resident-workgroup slots from the compiled kernels; the legality filter rejects a configuration that
spills; GROUP_M > 1 compiles without spills and changes the workgroup order; swap-AB and split-K
configurations compile in the pool worker."""

from __future__ import annotations

import pytest

from wavec.codegen.ptxas import find_ptxas
from wavec.kernels.fused_moe import MoeConfig
from wavec.tuning import legality
from wavec.tuning import moe as tm
from wavec.tuning import moe_profile as mp

pytest.importorskip("iree.compiler")
pytestmark = pytest.mark.skipif(find_ptxas() is None, reason="spills and registers need ptxas")


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_reduced_pool_compiles(target: str) -> None:
    shape = tm.MODELS["Qwen3-30B-A3B"]
    pool = mp.build_pool(shape, target, 132, 50 << 20, max_configs=5, workers=2)
    assert pool.candidates == 220 and pool.compiled == 10 and 0 < len(pool.pool) == min(5, pool.legal)
    assert pool.legal + len([r for r in pool.rejected.values() if r != "shared memory"]) == pool.compiled
    cfgs = {p.cfg for p in pool.pool}
    assert len(cfgs) == len(pool.pool)
    assert {c.block_m for c in cfgs} >= {16, 128}  # the static rule's small and large ends are kept
    for p in pool.pool:
        assert p.slots_up >= 132 and p.slots_down >= 132 and p.slots_up % 132 == 0
    for label, why in pool.rejected.items():
        assert why, label


def test_legality_rejects_spills() -> None:
    """Two 128 x 128 accumulators of the up-projection do not fit in 255 registers."""
    meta = mp._compile_gemm("up", "bf16", 8, (128, 128, 128, 64, 4, 1), "sm_90a")
    assert "spill" in (legality.reject_after_compile(meta) or "")
    ok = mp._compile_gemm("up", "bf16", 8, (64, 64, 128, 64, 3, 1), "sm_90a")
    assert legality.reject_after_compile(ok) is None and ok["spills"] == 0


@pytest.mark.parametrize("kind", ["up", "down"])
def test_group_m_compiles_without_spills(kind: str) -> None:
    import wavec as wc
    from wavec.kernels import fused_moe_kernels as fk
    from wavec.tuning.plan import mma_type_for

    cfg = MoeConfig(64, 64, 128, 64, 3, group_m=8)
    meta = mp._compile_gemm(kind, "bf16", 2, mp._astuple(cfg), "sm_90a")
    assert "error" not in meta and meta["spills"] == 0, meta
    tpw, mma = mma_type_for("mma_sync", wc.bf16, "sm_90a")
    if kind == "up":
        make = fk.make_up(wc.bf16, 2, "silu", False, tpw, mma, 64)
    else:
        make = fk.make_down(wc.bf16, 2, True, True, tpw, mma, 64)
    grouped = wc.compile(make, cfg.subs(kind == "down"), target="sm_90a", backend="cuda").mlir
    plain = wc.compile(make, MoeConfig(64, 64, 128, 64, 3).subs(kind == "down"), target="sm_90a", backend="cuda").mlir
    assert grouped != plain and "scf.if" in grouped


@pytest.mark.parametrize("kind", ["up", "down"])
def test_swap_candidates_compile_in_the_pool_worker(kind: str) -> None:
    """The pool's compile worker builds a swap-AB configuration as ``fused_experts`` does (wgmma, its
    warpgroups): no spills, legal, its slots from the compiled block."""
    cfg = MoeConfig(8, 64, 128, 128, 3, swap=True)
    meta = mp._compile_gemm(kind, "bf16", 8, mp._astuple(cfg), "sm_90a")
    assert "error" not in meta and meta["spills"] == 0 and legality.reject_after_compile(meta) is None, meta
    assert meta["block"] == [128 * cfg.swap_waves(kind == "down"), 1, 1]
    assert legality.ctas_per_sm(meta, "sm_90a") >= 1
    bad = mp._compile_gemm(kind, "bf16", 8, mp._astuple(cfg), "sm_80")  # wgmma needs sm_90a
    assert "error" in bad


@pytest.mark.parametrize("kind", ["up", "down"])
def test_wgmma_candidates_compile_in_the_pool_worker(kind: str) -> None:
    """The pool's compile worker builds a wgmma token-block configuration as ``fused_experts`` does (one
    warpgroup per 64 tokens): no spills, legal; sm_80 refuses it."""
    cfg = MoeConfig(128, 128, 256, 64, 4, wgmma=True)
    meta = mp._compile_gemm(kind, "bf16", 8, mp._astuple(cfg), "sm_90a")
    assert "error" not in meta and meta["spills"] == 0 and legality.reject_after_compile(meta) is None, meta
    assert meta["block"] == [256, 1, 1] and legality.ctas_per_sm(meta, "sm_90a") >= 1
    assert "error" in mp._compile_gemm(kind, "bf16", 8, mp._astuple(cfg), "sm_80")


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("kind", ["up", "down"])
def test_split_candidates_compile_in_the_pool_worker(kind: str, target: str) -> None:
    """The pool's compile worker builds a split-K configuration as ``fused_experts`` does (the atomic
    down-projection with SPLIT slices; the up-projection unsplit): no spills, legal, slots >= 1."""
    cfg = MoeConfig(16, 32, 256, 64, 3, split_k=4)  # the static decode up-projection tile
    meta = mp._compile_gemm(kind, "bf16", 2, mp._astuple(cfg), target)
    assert "error" not in meta and meta["spills"] == 0 and legality.reject_after_compile(meta) is None, meta
    assert meta["block"] == [128, 1, 1] and legality.ctas_per_sm(meta, target) >= 1
