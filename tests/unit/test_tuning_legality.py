"""Legality filter of the autotuner: hand-checked legal and illegal tuples, and the shared-memory estimate
against what the compiler allocates."""

import pytest

import wavec as wc
from wavec.kernels.gemm import make_gemm
from wavec.tuning import legal, reject_after_compile, shared_bytes
from wavec.tuning.legality import ctas_per_sm, front_half
from wavec.tuning.plan import schedule


def S(bm, bn, bk, stages=2, group=4):
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "NUM_STAGES": stages, "GROUP_M": group}


LEGAL = [
    ((2, 2), S(64, 64, 32)),
    ((2, 2), S(128, 128, 64, 3)),
    ((2, 4), S(128, 256, 64, 3)),
    ((1, 4), S(16, 128, 128, 4)),
    ((2, 2), S(32, 16, 16)),  # 16x16 tiles: 2-element runs, 8 per row, 128 threads
]

ILLEGAL = [
    ((2, 2), S(48, 64, 32), "wave tile 24 of M is not a multiple"),  # m16n8k16: M % 16
    ((2, 2), S(64, 8, 32), "wave tile 4 of N is not a multiple"),  # N % 8
    ((2, 2), S(64, 64, 24), "loop tile 24 of K is not a multiple"),  # K % 16
    ((2, 2), S(16, 64, 32), "wave tile 8 of M"),
    ((2, 2), S(256, 256, 128, 4), "bytes of shared memory (with 4 stages) exceed"),  # 557056 > 232448
    ((32, 2), S(512, 64, 32), "2048 threads per workgroup exceed the limit of 1024"),
    ((1, 16), S(16, 128, 16), "fewer elements than the 512 threads"),  # A tile 16x16 among 512 threads
    # 96 threads; 16-byte runs: a 512-wide row is 64 runs, which do not split among 96 threads
    ((1, 3), S(16, 24, 512), "96 threads cannot split rows of 64 runs of 8"),
]


@pytest.mark.parametrize("waves,subs", LEGAL)
def test_legal(waves, subs):
    assert legal(make_gemm(waves=waves), subs, "sm_90") == (True, "")


@pytest.mark.parametrize("waves,subs,reason", ILLEGAL)
def test_illegal(waves, subs, reason):
    ok, why = legal(make_gemm(waves=waves), subs, "sm_90")
    assert not ok
    assert reason in why


def test_illegal_copy_is_what_the_compiler_rejects():
    with pytest.raises(wc.WavecError, match="cannot split rows"):
        wc.compile(
            make_gemm(waves=(1, 3)),
            {wc.sym(k): v for k, v in S(16, 24, 512).items()},
            backend="cuda",
            target="sm_90",
            cache=False,
        )


def test_target_mismatch():
    ok, why = legal(make_gemm(), S(64, 64, 32), "gfx942")
    assert not ok and "waves of 64" in why
    amd = make_gemm(threads_per_wave=64, mma_type=wc.MMAType.F32_32x32x8_F16)
    assert legal(amd, S(64, 64, 32), "gfx942") == (True, "")
    ok, why = legal(amd, S(32, 64, 32), "gfx942")  # wave tile 16 of M < 32
    assert not ok and "instruction's M = 32" in why
    assert not legal(amd, S(64, 64, 32), "sm_90")[0]


def test_symbol_keys_accepted():
    assert legal(make_gemm(), {wc.sym(k): v for k, v in S(64, 64, 32).items()}, "sm_90")[0]


def test_front_half_reads_the_passes():
    """The numbers come from the pass pipeline's result: 16-byte runs of the 64x32 A and B tiles, two per
    thread of 128 (coarsen_loads), two stages of XOR-swizzled (unpadded) tiles."""
    from wavec.frontend.constraints import ConstraintSet

    k = make_gemm(waves=(2, 2))
    front = front_half(k, ConstraintSet(k.constraints, {wc.sym(n): v for n, v in S(64, 64, 32).items()}), "sm_90")
    assert front.threads == 128 and front.stages == 2
    assert front.shared_bytes == 2 * (64 + 64) * 32 * 2
    assert front.copies and all(run == 8 for run, _n in front.copies)


@pytest.mark.parametrize(
    "waves,subs", [((2, 2), S(64, 64, 32)), ((2, 2), S(128, 128, 64, 3)), ((1, 4), S(16, 64, 128, 4))]
)
def test_shared_bytes_match_compiled(waves, subs):
    k = make_gemm(waves=waves)
    ck = wc.compile(k, {wc.sym(n): v for n, v in subs.items()}, backend="cuda", target="sm_90", cache=False)
    meta = ck.artifact.metadata
    assert shared_bytes(k, subs, "sm_90") == meta.shared_bytes
    if meta.registers is not None:  # ptxas present
        assert reject_after_compile(meta) is None
        assert ctas_per_sm(meta, "sm_90") >= 1


@pytest.mark.parametrize(
    "bk,stages,swizzle,copy",
    [(64, 4, "auto", "auto"), (32, 3, "auto", "auto"), (64, 3, "none", "auto"), (64, 3, "auto", "cp.async")],
)
def test_shared_bytes_match_compiled_wgmma(bk, stages, swizzle, copy):
    """wgmma tiles, with TMA (its mbarriers take a 1024-byte slot) and without (64-byte swizzle, core
    matrices, cp.async)."""
    k = make_gemm(
        wc.f16,
        32,
        wc.MMAType.NV_WGMMA_F32_64xNx16_F16,
        (2, 1),
        sched=schedule(prefetch_fragments=True, operand_swizzle=swizzle, async_copy=copy),
    )
    subs = S(128, 128, bk, stages)
    ck = wc.compile(k, {wc.sym(n): v for n, v in subs.items()}, backend="emulator", target="sm_90a", cache=False)
    assert shared_bytes(k, subs, "sm_90a") == ck.artifact.metadata.shared_bytes
    assert bool(ck.artifact.metadata.tensor_maps) == (bk == 64 and swizzle == "auto" and copy == "auto")


def test_reject_after_compile():
    assert reject_after_compile({"registers": 128, "spills": 0, "block": [128, 1, 1]}) is None
    assert "spill" in reject_after_compile({"registers": 255, "spills": 16, "block": [128, 1, 1]})
    assert "exceed 200" in reject_after_compile(
        {"registers": 240, "spills": 0, "block": [128, 1, 1]}, max_registers=200
    )
    assert "register file" in reject_after_compile({"registers": 128, "spills": 0, "block": [1024, 1, 1]})
    assert reject_after_compile({"registers": None, "spills": None, "block": [128, 1, 1]}) is None


def test_ctas_per_sm():
    assert ctas_per_sm({"registers": 238, "shared_bytes": 110592, "block": [128, 1, 1]}, "sm_90") == 2
    assert ctas_per_sm({"registers": 72, "shared_bytes": 20480, "block": [128, 1, 1]}, "sm_90") == 7
