"""IR tier + emulator: GEMM operand rows past M / N are clamped to the last row instead of masked
(``mask_bounds``, "clamped"), only where the out-of-range rows cannot reach a stored or reduced value."""

import pytest
from test_ir_shared_passes import BK, GROUP, NV, STAGES, SUBS, Compiled, K, M, N, _check_gemm, _gemm

import wavec as wc
from wavec import Memory, Register, f16, f32
from wavec.frontend.ops import AsyncCopy

BM, BN = wc.sym.BLOCK_M, wc.sym.BLOCK_N
gemm = _gemm(
    [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, BM / 2),
        wc.WaveConstraint(N, BN / 2),
        wc.TilingConstraint(K, BK),
        NV,
        wc.SchedulingConstraint(num_stages=STAGES, group_size=GROUP),
    ]
)


@wc.wave(
    [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, BM / 2),
        wc.WaveConstraint(N, BN / 2),
        wc.TilingConstraint(K, BK),
        NV,
        wc.SchedulingConstraint(num_stages=STAGES, group_size=GROUP),
    ]
)
def gemm_scaled(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]):
    """The loop's result goes through an op other than a cast: rows are masked as before."""
    acc = Register[M, N, f32](0.0)

    @wc.iterate(K, init_args=[acc])
    def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
        return wc.mma(wc.read(a), wc.read(b), acc)

    wc.write(body * 2.0, c)


def _copies(c: Compiled) -> dict:
    """{argument name: {(mask_dims, clamp_dims)}} over every async copy (prologue and loop)."""
    out: dict = {}
    for g in c.trace.graphs():
        for n in g.nodes:
            if n.meta.get("op") is AsyncCopy:
                mem = n.args[0].meta.get("capture_of", n.args[0])
                out.setdefault(mem.name, set()).add((n.meta["mask_dims"], n.meta["clamp_dims"]))
    return out


def test_gemm_operand_rows_clamp_and_k_masks() -> None:
    c = Compiled(gemm, {**SUBS, STAGES: 3}, "sm_90", emit=True)
    assert _copies(c) == {"a": {((K,), (M,))}, "b": {((K,), (N,))}}
    loop = c.mlir[c.mlir.index("scf.for") :]
    # the clamps are loop-invariant: computed before the loop, none inside it
    assert "arith.minui" in c.mlir[: c.mlir.index("scf.for")]
    body = loop[: loop.index("nvgpu.mma.sync")]
    assert "arith.andi" not in body


def test_static_divisible_rows_need_no_clamp() -> None:
    c = Compiled(gemm, {**SUBS, STAGES: 3, M: 128, N: 128}, "sm_90", emit=False)
    assert _copies(c) == {"a": {((K,), ())}, "b": {((K,), ())}}


def test_result_not_only_written_keeps_row_masks() -> None:
    c = Compiled(gemm_scaled, {**SUBS, STAGES: 3}, "sm_90", emit=False)
    assert _copies(c) == {"a": {((M, K), ())}, "b": {((N, K), ())}}


def test_attention_keeps_key_row_masks() -> None:
    """Attention reduces over the key rows (softmax) inside the loop: its K and V tiles stay masked."""
    from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, make_attention

    k = make_attention(wc.f16, "bhsd", False, 4)
    c = Compiled(k, {BLOCK_M: 64, BLOCK_N: 64, NUM_STAGES: 2, D: 64}, "sm_90", emit=False)
    copies = _copies(c)
    assert copies and all(clamp == () for v in copies.values() for _mask, clamp in v)


@pytest.mark.parametrize("m,n,kk", [(70, 90, 40), (1, 130, 24), (129, 2, 64), (65, 66, 8)])
def test_emulator_ragged_rows(m: int, n: int, kk: int) -> None:
    """Rows past M and N re-read the last row: every stored element still matches float64, none is
    left unwritten, and the emulator's bounds check sees no access outside a or b."""
    pytest.importorskip("iree.compiler")
    k = wc.compile(gemm, {**SUBS, STAGES: 3}, target="sm_90", backend="emulator", cache=False)
    _check_gemm(k, m, n, kk, seed=m + n)
