# ruff: noqa: E501  (check lines quote whole printed trace and MLIR lines)
"""IR tier: the Hopper passes (``layout_wgmma_operands``, ``insert_wgmma_fences``) and the wgmma lowering,
checked against their docstrings' guarantees, FileCheck-style, on the library's ``gemm`` with a warpgroup
MMA type (2 warpgroups along M, 128 x 128 x 64 tiles, sm_90a)."""

import functools

import pytest
from filecheck import filecheck

import wavec as wc
from wavec.frontend.constraints import ConstraintSet
from wavec.frontend.ops import Allocate
from wavec.indexing.shared_layout import SharedLayoutKind
from wavec.kernels import gemm as gm
from wavec.passes.context import PassContext
from wavec.passes.pipeline import PASS_NAMES, run_pipeline
from wavec.tuning.plan import WGMMA_SUBS, schedule

KERNELS = {
    (s, cp): gm.make_gemm(
        wc.f16,
        32,
        wc.MMAType.NV_WGMMA_F32_64xNx16_F16,
        (2, 1),
        sched=schedule(prefetch_fragments=True, operand_swizzle=s, async_copy=cp),
    )
    for s in ("none", "auto")
    for cp in ("auto", "cp.async", "tma-mbarrier")
}


class Compiled:
    def __init__(self, stages: int, swizzle: str, copy: str) -> None:
        printed: list[str] = []
        subs = {**WGMMA_SUBS, gm.NUM_STAGES: stages}
        kernel = KERNELS[swizzle, copy]
        self.trace = kernel.trace()
        self.ctx = PassContext.build(self.trace, ConstraintSet(kernel.constraints, subs), "sm_90a")
        run_pipeline(self.trace, self.ctx, ["all"], printer=printed.append)
        self.after = {}
        for text in printed:
            head, _, body = text.partition("\n")
            self.after[head.removeprefix("// ----- after ").removesuffix(" -----")] = body
        pytest.importorskip("iree.compiler")
        from wavec.codegen.emitter import emit_kernel
        from wavec.target import get_target

        self.mlir, self.iface = emit_kernel(self.trace, self.ctx, get_target("sm_90a"))

    def loop_mlir(self) -> str:
        start = self.mlir.index("scf.for")
        return self.mlir[start : self.mlir.index("scf.yield", self.mlir.index("nvvm.wgmma.wait", start))]


@functools.cache
def compiled(stages: int, swizzle: str = "none", copy: str = "auto") -> Compiled:
    return Compiled(stages, swizzle, copy)


def test_passes_are_in_the_pipeline() -> None:
    assert (
        PASS_NAMES.index("promote_to_shared")
        < PASS_NAMES.index("layout_wgmma_operands")
        < PASS_NAMES.index("infer_indices")
    )
    assert PASS_NAMES[-6:] == [
        "insert_wgmma_fences",
        "intra_warpgroup_overlap",
        "warp_specialize",
        "pingpong_warpgroups",
        "persistent_grid",
        "cluster_launch",
    ]


def test_operand_tiles_get_the_core_matrix_layout() -> None:
    c = compiled(3)
    allocs = [n for n in c.trace.graph.nodes if n.meta.get("op") is Allocate]
    assert len(allocs) == 2
    for a in allocs:
        assert a.kwargs["smem_layout"].kind is SharedLayoutKind.CORE_K_MAJOR and a.kwargs["pad"] == 0
    # swizzle_shared left them alone; the copies are spread 8 rows x 8 chunks per 64 threads
    filecheck(
        c.after["swizzle_shared"],
        r"""
CHECK: %shared_a = allocate(, tile={M: 128, K: 64}, base={M: 128*$WG0, K: 64*$ARG_K}, stages=1, pad=0, smem_layout=SharedLayout(kind=<SharedLayoutKind.CORE_K_MAJOR
CHECK-LABEL: region iterate_0 {
CHECK: %read_global_m0_k0 = read(%capture_a) : [M, K] f16  #layout {M: (128*$WG0 + Mod($THREAD, 8) + 8*floor($THREAD/64)) /32, K: (64*$ARG_K + 8*(Mod(floor($THREAD/8), 8)); 8x1) /64}
CHECK: %read_m0_k0 = read(%capture_shared_a) : [M, K] f16  #layout {M: (64*$WAVE0 + 128*$WG0) /64, K: (64*$ARG_K) /16}
""",
    )
    assert c.after["coarsen_loads"].count("read(%capture_shared") == 4 + 4  # 2 warpgroups: A 1 x 4, B 1 x 4 K steps


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_fences_and_groups_where_the_pass_guarantees(stages: int) -> None:
    c = compiled(stages)
    text = c.after["insert_wgmma_fences"]
    in_flight = 1 if stages >= 3 else 0  # one wgmma group stays in flight: copies run S - 2 ahead
    publish = (
        f"""
CHECK: %async_wait = async_wait(, pending={stages - 2 - in_flight})
CHECK-NEXT: %proxy_fence = proxy_fence()
CHECK-NEXT: %barrier = barrier()
CHECK-NOT: async_copy("""
        if stages > 1
        else """
CHECK: %barrier = barrier()
CHECK-NOT: proxy_fence
CHECK: = write(%read_1_global_n3_k0, %capture_shared_b)
CHECK-NEXT: %proxy_fence = proxy_fence()
CHECK-NEXT: %barrier_1 = barrier()"""
    )
    root = (
        (
            """
CHECK: %wgmma_accumulator = wgmma_accumulator(%register_m0_n0)
CHECK-NEXT: %iterate = iterate((%wgmma_accumulator), """
            if in_flight
            else """
CHECK: %iterate = iterate((%register_m0_n0), """
        )
        + """
CHECK-NEXT: %get_result_m0_n0 = get_result(%iterate, index=0)"""
        + (
            """
CHECK-NEXT: %wgmma_wait = wgmma_wait(, pending=0, retire=(get_result_m0_n0,))"""
            if in_flight
            else ""
        )
        + """
CHECK-NEXT: %write_m0_n0 = write(%get_result_m0_n0, %c)
"""
    )
    filecheck(
        text,
        "CHECK-NOT: wgmma("
        + root
        + "CHECK-LABEL: region iterate_0 {"
        + publish
        + r"""
CHECK-NOT: = wgmma(
CHECK: %wgmma_fence = wgmma_fence()
CHECK-NEXT: %mma_m0_n0_k0 = wgmma(%read_m0_k0, %read_1_n0_k0, %iter_arg_0_m0_n0)
CHECK-NOT: wgmma_fence
CHECK: %mma_m0_n0_k3 = wgmma(%read_m0_k3, %read_1_n0_k3, %mma_m0_n0_k2)
CHECK-NEXT: %wgmma_commit = wgmma_commit()"""
        + (
            """
CHECK-COUNT-4: = async_copy(%capture_a, %capture_shared_a)
CHECK-COUNT-4: = async_copy(%capture_b, %capture_shared_b)
CHECK-NEXT: %async_commit = async_commit()"""
            if stages > 1
            else ""
        )
        + f"""
CHECK-NEXT: %wgmma_wait = wgmma_wait(, pending={in_flight}, retire=({"" if in_flight else "mma_m0_n0_k3,"}))
CHECK-NEXT: return (%mma_m0_n0_k3)
""",
    )
    body = text[text.index("region iterate_0") :]
    assert body.count("proxy_fence()") == 1 and body.count("wgmma_fence()") == 1
    assert body.count("wgmma_commit()") == 1 and body.count("wgmma_wait(") == 1
    assert body.count("= matrix_descriptor(") == 8 and " = read(%capture_shared" not in body
    # the prologue fetches the D = S - 1 - in_flight tiles the first iterations read
    assert text[: text.index("region")].count("async_commit_prologue") == max(0, stages - 1 - in_flight)


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_mlir_orders_fences_barrier_wgmma_wait(stages: int) -> None:
    c = compiled(stages)
    loop = c.loop_mlir()
    in_flight = 1 if stages >= 3 else 0
    filecheck(
        loop,
        ("CHECK: nvgpu.device_async_wait\n" if stages > 1 else "CHECK: vector.store\n")
        + r"""
CHECK: nvvm.fence.proxy <async.shared>, space = <cta>
CHECK-NEXT: gpu.barrier
CHECK-NOT: nvgpu.device_async_copy
CHECK: nvvm.wgmma.fence.aligned
CHECK: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 128, k = 16>, D[<f32>, <one>], A[<f16>, <one>, <row>], B[<f16>, <one>, <col>]
CHECK-COUNT-3: nvvm.wgmma.mma_async
CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned"""
        + (
            """
CHECK: nvgpu.device_async_copy
CHECK: nvgpu.device_async_create_group"""
            if stages > 1
            else ""
        )
        + f"""
CHECK: nvvm.wgmma.wait.group.sync.aligned {in_flight}
CHECK-NOT: nvgpu.device_async_copy
""",
    )
    after = c.mlir[c.mlir.index("nvvm.wgmma.wait.group.sync.aligned", c.mlir.index("scf.for")) :]
    if in_flight:  # the loop carries the struct; the epilogue waits for the last group, then unpacks it
        assert "scf.yield %" in after and "!llvm.struct<(f32" in c.mlir[c.mlir.index("scf.for") :].split("\n")[0]
        assert after.index("nvvm.wgmma.wait.group.sync.aligned 0") < after.index("llvm.extractvalue")
        assert "llvm.extractvalue" not in loop
    else:
        assert "llvm.extractvalue" in loop and "vector.from_elements" in loop
    assert loop.count("nvvm.wgmma.mma_async") == 4 and loop.count("nvvm.wgmma.fence.aligned") == 1
    # the shared tiles' addresses are taken once, before the loop; descriptors are i64 index math
    assert c.mlir.count("memref.extract_aligned_pointer_as_index") == 2
    assert "memref.extract_aligned_pointer_as_index" not in loop
    assert "memref<1x16x8x8x8xf16, #gpu.address_space<workgroup>>" in c.mlir or stages > 1
    assert f"memref<{stages}x16x8x8x8xf16, #gpu.address_space<workgroup>>" in c.mlir


def test_descriptor_constant_bits() -> None:
    """LBO = 128 B (8 in bits 16-29, in the low word with the start address), SBO = 1024 B (64 in bits 32-45,
    the constant high word ORed in: ``split_descriptor``) for 64-element K rows, no swizzle."""
    c = compiled(3)
    assert f"arith.constant {8 << 16} : index" in c.mlir and f"arith.constant {64 << 32} : i64" in c.mlir


def test_swizzled_tiles() -> None:
    """ "auto" with 128-byte K rows (BLOCK_K = 64): the 128-byte swizzle (memref [K/64, rows, 64], 1024-byte aligned, the
    chunk index XORed with the row), with cp.async the default row-wise copy, descriptors with mode 1 and SBO 1024."""
    c = compiled(3, "auto", "cp.async")
    for a in (n for n in c.trace.graph.nodes if n.meta.get("op") is Allocate):
        assert a.kwargs["smem_layout"].kind is SharedLayoutKind.SWIZZLE_128B
    filecheck(
        c.after["coarsen_loads"],
        r"""
CHECK-LABEL: region iterate_0 {
CHECK: %read_global_m0_k0 = read(%capture_a) : [M, K] f16  #layout {M: (128*$WG0 + Mod(floor($THREAD/8), 32)) /32, K: (64*$ARG_K + 8*(Mod($THREAD, 8)); 8x1) /64}
""",
    )
    filecheck(
        c.mlir,
        r"""
CHECK: memref.alloc() alignment = 1024 : memref<3x1x128x64xf16, #gpu.address_space<workgroup>>
CHECK: memref.alloc() alignment = 1024 : memref<3x1x128x64xf16, #gpu.address_space<workgroup>>
CHECK: arith.xori
CHECK: nvgpu.device_async_copy
""",
    )
    # LBO 16 B in the low word (with the start address), SBO 1024 B and mode 1 the constant high word
    assert f"arith.constant {1 << 16} : index" in c.mlir and f"arith.constant {(64 << 32) | (1 << 62)} : i64" in c.mlir
    assert c.loop_mlir().count("nvvm.wgmma.mma_async") == 4


# ----- TMA (pipeline_tma, lowering_tma) ------------------------------------------------------------------


@pytest.mark.parametrize("stages,war", [(3, "mbarrier"), (4, "barrier")])
def test_tma_pipeline(stages: int, war: str) -> None:
    """128-byte-swizzled tiles on sm_90a: "auto" fills the stages with TMA.  Root: mbarrier_init, then the
    prologue fills (D = S - 1 with empty mbarriers at 3 stages, S - 2 behind the barrier at 4); body: the
    full-mbarrier wait, then (barrier variant) the workgroup barrier, the wgmma group, and the fill issued
    after the commit (barrier) or after the wgmma wait and the release (empty mbarriers)."""
    c = compiled(stages, "auto")
    distance = stages - 1 if war == "mbarrier" else stages - 2
    text = c.after["insert_wgmma_fences"]
    root, body = text.split("region iterate_0 {")
    assert root.count("= tma_fill(") == distance and root.index("mbarrier_init(") < root.index("tma_fill_prologue0")
    empty = 8 if war == "mbarrier" else 0  # one arrival per warp: 2 warpgroups x 4 warps
    assert f"mbarrier_init(, count={stages}, empty_arrivals={empty}, dim=K)" in root
    if war == "barrier":
        filecheck(
            body,
            r"""
CHECK: %mbarrier_wait = mbarrier_wait(, stage=$STAGE_K, parity=Mod(floor($ARG_K/4), 2), war=barrier)
CHECK-NEXT: %barrier = barrier()
CHECK: %wgmma_fence = wgmma_fence()
CHECK: %wgmma_commit = wgmma_commit()
CHECK-NEXT: %tma_fill = tma_fill(%capture_a, %capture_shared_a, %capture_b, %capture_shared_b, stage=Mod($STAGE_K + 2, 4), iteration=$ARG_K + 2, stop=ceiling(K/64))
CHECK-NEXT: %wgmma_wait = wgmma_wait(, pending=1, retire=())
""",
        )
    else:
        filecheck(
            body,
            r"""
CHECK: %mbarrier_wait = mbarrier_wait(, stage=$STAGE_K, parity=Mod(floor($ARG_K/3), 2), war=mbarrier)
CHECK: %wgmma_fence = wgmma_fence()
CHECK: %wgmma_commit = wgmma_commit()
CHECK-NEXT: %wgmma_wait = wgmma_wait(, pending=1, retire=())
CHECK-NEXT: %mbarrier_arrive = mbarrier_arrive(, stage=Mod($STAGE_K + 2, 3), iteration=$ARG_K - 1, first=0)
CHECK-NEXT: %tma_fill = tma_fill(%capture_a, %capture_shared_a, %capture_b, %capture_shared_b, stage=Mod($STAGE_K + 2, 3), iteration=$ARG_K + 2, stop=ceiling(K/64), empty_parity=Mod(floor($ARG_K/3 + 2/3) + 1, 2), refill_from=3)
""",
        )
        assert "barrier()" not in body and "proxy_fence" not in body
    assert [(m.arg, m.box, m.swizzle) for m in c.iface.tensor_maps] == [(0, (64, 128), 128), (1, (64, 128), 128)]
    loop = c.loop_mlir()
    assert loop.count("nvvm.cp.async.bulk.tensor.shared.cluster.global") == 2  # one box each of A and B
    assert loop.count("nvvm.mbarrier.try_wait.parity") == (2 if war == "mbarrier" else 1)
    assert ("nvvm.mbarrier.arrive " in loop) == (war == "mbarrier") and "nvgpu.device_async_copy" not in c.mlir
    head = c.mlir[: c.mlir.index("scf.for")]
    assert head.count("nvvm.mbarrier.init") == stages * (2 if war == "mbarrier" else 1)
    assert head.count("nvvm.fence.proxy.acquire") == 2 and "nvvm.fence.mbarrier.init" in head
    assert "binding(3) alignment(64) offset(%c0) flags(ReadOnly) : memref<32xi64>" in c.mlir  # the tensor maps


def test_attention_body_waits_before_the_softmax_and_fences_before_pv() -> None:
    """The attention kernel with ``mma="wgmma"``: S = Q Kᵀ is one group waited for (``retire`` = S) before
    the row max reads it; P reaches P·V through ``convert_layout(via=registers)`` (each 64 x 16 register-A
    tile is 8 registers of S's accumulator); a fence precedes P·V (its A and accumulator were written by
    ordinary instructions) and a wait retires O before the yield; the next tiles' copies go out after the
    first commit; V is an MN-major tile."""
    from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, make_attention

    printed: list[str] = []
    kernel = make_attention(wc.f16, "bhsd", False, 1, mma="wgmma")
    trace = kernel.trace()
    subs = {BLOCK_M: 64, BLOCK_N: 32, NUM_STAGES: 2, D: 32}
    ctx = PassContext.build(trace, ConstraintSet(kernel.constraints, subs), "sm_90a")
    run_pipeline(trace, ctx, ["layout_wgmma_operands", "insert_wgmma_fences"], printer=printed.append)
    layouts, fences = printed
    assert "kind=<SharedLayoutKind.SWIZZLE_64B: 'swizzle_64b'>, elem_bytes=2, mn_major=True)" in layouts  # V
    assert "kind=<SharedLayoutKind.SWIZZLE_64B: 'swizzle_64b'>, elem_bytes=2, mn_major=False)" in layouts  # K
    filecheck(
        fences,
        r"""
CHECK-LABEL: region iterate_0 {
CHECK: %proxy_fence = proxy_fence()
CHECK-NEXT: %barrier = barrier()
CHECK: %wgmma_fence = wgmma_fence()
CHECK-NEXT: %mma_m0_n0_d0 = wgmma(%capture_read_m0_d0, %read_n0_d0, %register_m0_n0)
CHECK: %mma_m0_n0_d1 = wgmma(%capture_read_m0_d1, %read_n0_d1, %mma_m0_n0_d0)
CHECK-NEXT: %wgmma_commit = wgmma_commit()
CHECK-NEXT: %read_global_n0_d0_async = async_copy(
CHECK-NEXT: %read_1_global_n0_d0_async = async_copy(
CHECK-NEXT: %async_commit = async_commit()
CHECK-NEXT: %wgmma_wait = wgmma_wait(, pending=0, retire=(mma_m0_n0_d1,))
CHECK-NEXT: %reduce_m0_n0 = reduce(%mma_m0_n0_d1, dim=N, kind=max)
CHECK: %convert_layout_m0_n0 = convert_layout((%cast_m0_n0), via=registers)
CHECK-NEXT: %convert_layout_m0_n1 = convert_layout((%cast_m0_n0), via=registers)
CHECK-NEXT: %wgmma_fence_1 = wgmma_fence()
CHECK-NEXT: %mma_1_m0_d0_n0 = wgmma(%convert_layout_m0_n0, %permute_d0_n0,
CHECK-NEXT: %mma_1_m0_d0_n1 = wgmma(%convert_layout_m0_n1, %permute_d0_n1, %mma_1_m0_d0_n0)
CHECK-NEXT: %wgmma_commit_1 = wgmma_commit()
CHECK-NEXT: %wgmma_wait_1 = wgmma_wait(, pending=0, retire=(mma_1_m0_d0_n1,))
CHECK-NEXT: return (%binary_m0, %binary_7_m0, %mma_1_m0_d0_n1)
""",
    )


# ----- warp specialization (warp_specialize, lowering_tma) ---------------------------------------------------


def test_warp_specialize_splits_producer_and_consumers() -> None:
    """``warp_specialize=True``: no fill left in the root graph or the loop body; a ``warp_specialize`` node
    after the mbarrier init (and the tiles) runs region ``producer_0`` (one fill of iteration $ARG_K into
    stage $ARG_K % S, refills waiting for the stage's release) in one extra warpgroup; the consumers' loop is
    the wait, the wgmma group, the wait retiring group i - 1 and the release.  MLIR: ``scf.if`` on the thread
    id, setmaxnreg down in the producer and up in the consumers, the fills in the producer's own loop, the
    block 256 + 128 threads."""
    kernel = gm.make_gemm(
        wc.f16,
        32,
        wc.MMAType.NV_WGMMA_F32_64xNx16_F16,
        (2, 1),
        sched=schedule(prefetch_fragments=True, warp_specialize=True),
    )
    trace = kernel.trace()
    ctx = PassContext.build(trace, ConstraintSet(kernel.constraints, {**WGMMA_SUBS, gm.NUM_STAGES: 4}), "sm_90a")
    printed: list[str] = []
    run_pipeline(trace, ctx, ["warp_specialize"], printer=printed.append)
    root, rest = printed[0].split("region iterate_0 {")
    body, producer = rest.split("region producer_0 {")
    filecheck(
        root,
        r"""
CHECK: %shared_b = allocate(
CHECK: %mbarrier_init = mbarrier_init(, count=4, empty_arrivals=8, dim=K, fence_maps=False)
CHECK-NEXT: %warp_specialize = warp_specialize(%a, %shared_a, %b, %shared_b, dim=K, subgraph=producer_0, start=0, stop=ceiling(K/64), consumers=256, regs=(40, 232))
CHECK: %iterate = iterate(
CHECK: %write_m0_n0 = write(
""",
    )
    assert "tma_fill" not in root and "tma_fill" not in body and "barrier()" not in body
    filecheck(
        body,
        r"""
CHECK: %mbarrier_wait = mbarrier_wait(, stage=$STAGE_K, parity=Mod(floor($ARG_K/4), 2), war=mbarrier)
CHECK: %wgmma_fence = wgmma_fence()
CHECK: %wgmma_commit = wgmma_commit()
CHECK-NEXT: %wgmma_wait = wgmma_wait(, pending=1, retire=())
CHECK-NEXT: %mbarrier_arrive = mbarrier_arrive(, stage=Mod($STAGE_K + 3, 4), iteration=$ARG_K - 1, first=0)
""",
    )
    filecheck(
        producer,
        r"""
CHECK: %tma_fill = tma_fill(%capture_a, %capture_shared_a, %capture_b, %capture_shared_b, stage=Mod($ARG_K, 4), iteration=$ARG_K, empty_parity=Mod(floor($ARG_K/4) + 1, 2), refill_from=4)
""",
    )
    pytest.importorskip("iree.compiler")
    from wavec.codegen.emitter import emit_kernel
    from wavec.target import get_target

    mlir, iface = emit_kernel(trace, ctx, get_target("sm_90a"))
    assert iface.block == (384, 1, 1) and "workgroup_size = [384, 1, 1]" in mlir
    filecheck(
        mlir,
        r"""
CHECK: nvvm.mbarrier.init
CHECK: nvvm.fence.mbarrier.init
CHECK: gpu.barrier
CHECK: scf.if
CHECK-NEXT: nvvm.setmaxregister decrease 40
CHECK: nvvm.fence.proxy.acquire
CHECK: scf.for
CHECK: nvvm.mbarrier.try_wait.parity
CHECK: nvvm.mbarrier.arrive.expect_tx
CHECK-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global
CHECK: } else {
CHECK-NEXT: nvvm.setmaxregister increase 232
CHECK: scf.for
CHECK: nvvm.mbarrier.try_wait.parity
CHECK: nvvm.wgmma.mma_async
CHECK: nvvm.wgmma.wait.group.sync.aligned 1
CHECK: nvvm.mbarrier.arrive
CHECK: nvvm.wgmma.wait.group.sync.aligned 0
CHECK: vector.store
""",
    )
    assert mlir.count("gpu.barrier") == 1 and mlir.count("nvvm.cp.async.bulk.tensor") == 2
