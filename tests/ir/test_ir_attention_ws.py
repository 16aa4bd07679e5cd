# ruff: noqa: E501  (check lines quote whole printed trace lines)
"""IR tier: warp-specialized attention (``make_attention(..., warp_specialize=True)``) after
``warp_specialize`` and ``pingpong_warpgroups``: one set of mbarriers for both key loops (K and V stage
groups: 2 x 2 full + 2 x 2 empty), a producer region per loop, the second loop's stages and parities
continuing the first's count, and in each consumer body the waits and releases where
``insert_wgmma_fences`` put them; the ping-pong's named barriers around each chain."""

from filecheck import filecheck

import wavec as wc
from wavec.frontend.constraints import ConstraintSet
from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, make_attention
from wavec.passes.context import PassContext
from wavec.passes.pipeline import run_pipeline


def _printed(after: str, pingpong: bool = False) -> str:
    groups = 2 if pingpong else 1
    kernel = make_attention(wc.f16, "bhsd", False, groups, mma="wgmma", warp_specialize=True, pingpong=pingpong)
    trace = kernel.trace()
    subs = {BLOCK_M: 64 * groups, BLOCK_N: 32, NUM_STAGES: 2, D: 64}
    ctx = PassContext.build(trace, ConstraintSet(kernel.constraints, subs), "sm_90a")
    printed: list[str] = []
    run_pipeline(trace, ctx, [after], printer=printed.append)
    return printed[0]


def test_one_set_of_mbarriers_and_a_producer_per_loop() -> None:
    text = _printed("warp_specialize")
    root, rest = text.split("region iterate_0 {")
    assert root.count("mbarrier_init(") == 1 and "barrier()" not in root.split("warp_specialize(")[1]
    filecheck(
        root,
        r"""
CHECK: %mbarrier_init = mbarrier_init(, count=4, empty_arrivals=4, dim=N, fence_maps=False)
CHECK-NEXT: %warp_specialize = warp_specialize({{.*}}subgraph=producer_0{{.*}}loops=(('producer_0', 0,{{.*}}('producer_1',
CHECK: %iterate = iterate(
CHECK: %iterate_1 = iterate(
""",
    )
    body, rest = rest.split("region iterate_1 {")
    filecheck(
        body,
        r"""
CHECK: %mbarrier_wait = mbarrier_wait(, stage=$STAGE_N, parity=Mod(floor($ARG_N/2), 2), war=mbarrier)
CHECK-NEXT: %wgmma_fence = wgmma_fence()
CHECK: %wgmma_wait = wgmma_wait(, pending=0
CHECK-NEXT: %mbarrier_arrive = mbarrier_arrive(, stage=Mod($STAGE_N, 2), iteration=$ARG_N, first=0)
CHECK: kind=exp2
CHECK: %mbarrier_wait_1 = mbarrier_wait(, stage=$STAGE_N, parity=Mod(floor($ARG_N/2), 2), war=mbarrier, bar_offset=2)
CHECK-NEXT: %wgmma_fence_1 = wgmma_fence()
CHECK: %wgmma_wait_1 = wgmma_wait(, pending=0
CHECK-NEXT: %mbarrier_arrive_1 = mbarrier_arrive(, stage=Mod($STAGE_N, 2), iteration=$ARG_N, first=0, bar_offset=2)
""",
    )
    edge, producers = rest.split("region producer_0 {")
    # the edge loop's parity counts on from the full loop's iterations (floor(N/32) of them)
    assert "parity=Mod(floor($ARG_N/2 + ceiling(Min(N, 32*floor(N/32))/32)/2 - floor(N/32)/2), 2)" in edge
    first, second = producers.split("region producer_1 {")
    filecheck(
        first,
        r"""
CHECK: tma_fill(%capture_k, %capture_shared_k, stage=Mod($ARG_N, 2), iteration=$ARG_N, empty_parity=Mod(floor($ARG_N/2) + 1, 2), refill_from=2)
CHECK-NEXT: tma_fill(%capture_v, %capture_shared_v, stage=Mod($ARG_N, 2), iteration=$ARG_N, empty_parity=Mod(floor($ARG_N/2) + 1, 2), refill_from=2, bar_offset=2)
""",
    )
    assert "refill_from=2, refill_index=$ARG_N + ceiling(Min(N, 32*floor(N/32))/32) - floor(N/32)" in second


def test_pingpong_barriers_around_each_chain() -> None:
    text = _printed("pingpong_warpgroups", pingpong=True)
    root, rest = text.split("region iterate_0 {")
    body = rest.split("region iterate_1 {")[0]
    filecheck(
        root,
        r"""
CHECK: %warp_specialize = warp_specialize(
CHECK-NEXT: %named_barrier_arrive = named_barrier(, action=arrive, turn=other, threads=256, only=1)
CHECK: %iterate_1 = iterate(
CHECK-NEXT: %named_barrier_sync = named_barrier(, action=sync, turn=mine, threads=256, only=0)
""",
    )
    filecheck(
        body,
        r"""
CHECK: %mbarrier_wait = mbarrier_wait(
CHECK-NEXT: %named_barrier_sync = named_barrier(, action=sync, turn=mine, threads=256)
CHECK-NEXT: %wgmma_fence = wgmma_fence()
CHECK: %wgmma_commit = wgmma_commit()
CHECK-NEXT: %named_barrier_arrive = named_barrier(, action=arrive, turn=other, threads=256)
CHECK-NEXT: %wgmma_wait = wgmma_wait(
CHECK: %mbarrier_wait_1 = mbarrier_wait(
CHECK-NEXT: %named_barrier_sync_1 = named_barrier(, action=sync, turn=mine, threads=256)
CHECK-NEXT: %wgmma_fence_1 = wgmma_fence()
CHECK: %wgmma_commit_1 = wgmma_commit()
CHECK-NEXT: %named_barrier_arrive_1 = named_barrier(, action=arrive, turn=other, threads=256)
""",
    )
