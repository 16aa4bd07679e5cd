"""IR of the persistent grid (``SchedulingConstraint(persistent=True)``, ``passes/hopper/persistent_grid.py``): the
tile loop after the mbarrier initialisation, stages and parities counted over the whole persistent loop
(``$TILE_COUNT`` x K iterations), the release of each tile's last stage, and the launch grid."""

from __future__ import annotations

import pytest
from filecheck import filecheck

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import schedule


def _compile(copy: str, capsys) -> tuple[str, str, object]:
    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 64, gm.NUM_STAGES: 3, gm.GROUP_M: 2}
    k = wc.compile(
        gm.make_gemm(
            wc.f16,
            32,
            wc.MMAType.NV_WGMMA_F32_64xNx16_F16,
            (1, 1),
            sched=schedule(prefetch_fragments=True, async_copy=copy, persistent=True),
        ),
        subs,
        backend="emulator",
        target="sm_90a",
        cache=False,
        print_ir_after=["persistent_grid"],
    )
    return capsys.readouterr().out, k.artifact.mlir, k.metadata


@pytest.mark.parametrize("copy", ["tma-mbarrier", "tma-barrier"])
def test_tile_loop(copy: str, capsys) -> None:
    text, mlir, meta = _compile(copy, capsys)
    root, body = text.split("region iterate_0 {")
    empty = copy == "tma-mbarrier"
    filecheck(
        root,
        r"""
CHECK: %mbarrier_init = mbarrier_init(
CHECK-NEXT: %persistent_tiles = persistent_tiles(, tiles=ceiling(M/64)*ceiling(N/64), remap={$WG0: {{.*}}$TILE{{.*}}"""
        r"""barrier="""
        + str(not empty)
        + r""")
CHECK-NEXT: %tma_fill_prologue0 = tma_fill(%a, %shared_a, %b, %shared_b, stage=Mod($TILE_COUNT*ceiling(K/64), 3)
CHECK: %iterate = iterate(
""",
    )
    assert (
        "mbarrier_arrive_tile_end = mbarrier_arrive(, stage=Mod($TILE_COUNT*ceiling(K/64) + ceiling(K/64) + 2, 3)"
        in root
    ) == empty
    assert "parity=Mod(floor($ARG_K/3 + $TILE_COUNT*ceiling(K/64)/3), 2)" in body
    assert meta.grid == ("min((4) * (WAVEC_SMS), (((M) + 63) // 64) * (((N) + 63) // 64))", "1", "1")
    # MLIR: the tile loop from the block id in steps of the grid size, the K loop inside it; the carried
    # stage starts at the running count modulo the stages; a tile-start barrier only for the barrier release
    tile_loop = mlir[mlir.index("scf.for %arg0") :]
    filecheck(
        tile_loop,
        r"""
CHECK: scf.for %arg0 = %block_id_x{{.*}} to %{{.*}} step %grid_dim_x {
CHECK-NEXT: arith.subi %arg0, %block_id_x
CHECK-NEXT: arith.divui %{{.*}}, %grid_dim_x
CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
CHECK: scf.for %arg1 = {{.*}} iter_args(
""",
    )
    assert ("gpu.barrier" in tile_loop[: tile_loop.index("nvvm.cp.async.bulk")]) == (not empty)
