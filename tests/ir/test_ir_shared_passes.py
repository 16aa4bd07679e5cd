# ruff: noqa: E501  (check lines quote whole printed trace and MLIR lines)
"""IR tier: the shared-memory and scheduling passes (promote_to_shared, coarsen_loads, swizzle_shared,
schedule_loops, pipeline_loops, reorder_workgroups, mask_bounds, insert_barriers), each checked against
its docstring's guarantees, FileCheck-style, next to the kernel and constraints that produce the IR.

One compilation per (kernel, subs, target) gives the trace after every pass and the emitted MLIR
(``emit_kernel``, no binary); the emulator tests at the end compile for real and compare with torch.
"""

import functools

import pytest
import sympy
import torch
from filecheck import filecheck
from kernel_fixtures import gemm_kernel

import wavec as wc
from wavec import Memory, Register, f16, f32
from wavec.frontend.constraints import ConstraintSet
from wavec.frontend.ops import MMA, AsyncCommit, AsyncCopy, AsyncWait, Iterate, Read, Write
from wavec.frontend.types import AddressSpace
from wavec.indexing.symbols import THREAD, WORKGROUP, induction_symbol, stage_symbol
from wavec.passes.context import PassContext
from wavec.passes.pipeline import run_pipeline

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
STAGES, GROUP = wc.sym.NUM_STAGES, wc.sym.GROUP_M
ARG_K = induction_symbol(K)

NV = wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_F32_16x8x16_F16)
CDNA3 = wc.HardwareConstraint(threads_per_wave=64, mma_type=wc.MMAType.F32_16x16x16_F16)


def gemm_constraints(hw: wc.HardwareConstraint, promote: bool = True, swizzle: str = "auto") -> list:
    """BM x BN workgroup tile over a 2 x 2 grid of waves, K in steps of BK, NUM_STAGES / GROUP_M from subs."""
    return [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, BM / 2),
        wc.WaveConstraint(N, BN / 2),
        wc.TilingConstraint(K, BK),
        hw,
        wc.SchedulingConstraint(num_stages=STAGES, group_size=GROUP, promote_operands=promote, operand_swizzle=swizzle),
    ]


def _gemm(constraints: list) -> wc.WaveKernel:
    return gemm_kernel(constraints)


gemm = _gemm(gemm_constraints(NV))  # operands promoted (the default)
gemm_amd = _gemm(gemm_constraints(CDNA3))  # the same on CDNA3: no cp.async
gemm_padded = _gemm(gemm_constraints(NV, swizzle="none"))  # mma.sync operand rows padded, not XOR-swizzled
gemm_32b = _gemm(gemm_constraints(NV, swizzle="32B"))  # a named swizzle width
gemm_regs = _gemm(gemm_constraints(NV, promote=False))  # operands straight from global memory


SHARED = "shared"  # (a name: ruff reads a string in an annotation as a forward reference)


@wc.wave(gemm_constraints(NV, promote=False))
def gemm_shared_a(a: Memory[M, K, f16, SHARED], b: Memory[N, K, f16], c: Memory[M, N, f32]):
    """Promotion off, except for ``a``, which its annotation asks to stage through shared memory."""
    acc = Register[M, N, f32](0.0)

    @wc.iterate(K, init_args=[acc])
    def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
        return wc.mma(wc.read(a), wc.read(b), acc)

    wc.write(body, c)


@wc.wave(
    [
        wc.WorkgroupConstraint(M, 4, 0),
        wc.WorkgroupConstraint(N, 512, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 256}),
    ]
)
def copy(src: Memory[M, N, f16], dst: Memory[M, N, f16]):
    wc.write(wc.read(src), dst)


SUBS = {BM: 64, BN: 64, BK: 32, STAGES: 2, GROUP: 1}


class Compiled:
    """The trace after every pass (``after[name]``), the emitted MLIR, the launch interface, the context."""

    def __init__(self, kernel: wc.WaveKernel, subs: dict, target: str, emit: bool) -> None:
        printed: list[str] = []
        self.trace = kernel.trace()
        self.ctx = PassContext.build(self.trace, ConstraintSet(kernel.constraints, subs), target)
        run_pipeline(self.trace, self.ctx, ["all"], printer=printed.append)
        self.after = {}
        for text in printed:
            head, _, body = text.partition("\n")
            self.after[head.removeprefix("// ----- after ").removesuffix(" -----")] = body
        self.mlir = self.iface = None
        if emit:
            pytest.importorskip("iree.compiler")
            from wavec.codegen.emitter import emit_kernel
            from wavec.target import get_target

            self.mlir, self.iface = emit_kernel(self.trace, self.ctx, get_target(target))

    def body(self):
        it = next(n for n in self.trace.graph.nodes if n.meta.get("op") is Iterate)
        return self.trace.subgraphs[it.kwargs["subgraph"]]

    def loop_mlir(self) -> str:
        """The text of the (single) scf.for body, up to its scf.yield."""
        start = self.mlir.index("scf.for")
        end = self.mlir.index(
            "scf.yield", self.mlir.index("nvgpu.mma.sync" if "nvgpu" in self.mlir else "amdgpu.mfma", start)
        )
        # the loop's own yield carries the accumulators
        while ": vector<4xf32>, vector<4xf32>" not in self.mlir[end : self.mlir.index("\n", end)]:
            end = self.mlir.index("scf.yield", end + 1)
        return self.mlir[start : self.mlir.index("\n", end)]


@functools.cache
def _compiled(kernel: wc.WaveKernel, subs: tuple, target: str, emit: bool) -> Compiled:
    return Compiled(kernel, dict(subs), target, emit)


def compiled(kernel: wc.WaveKernel, target: str = "sm_90", emit: bool = True, **subs) -> Compiled:
    extra = {getattr(wc.sym, k): v for k, v in subs.items()}
    assert set(extra) <= {*SUBS, M, N, K}, f"not a symbol of these kernels: {subs}"
    full = {**SUBS, **extra}
    return _compiled(kernel, tuple(sorted(full.items(), key=str)), target, emit)


def globals_of(c: Compiled, op=None):
    """Every access of global memory, in graph order."""
    out = []
    for g in c.trace.graphs():
        for n in g.nodes:
            if n.meta.get("op") in ((op,) if op else (Read, Write, AsyncCopy)):
                mem = n.args[1] if n.meta["op"] is Write else n.args[0]
                if mem.meta["type"].address_space == AddressSpace.GLOBAL:
                    out.append(n)
    return out


def mask_dims_by_memory(c: Compiled) -> dict:
    """{argument name: the set of ``mask_dims`` of its global accesses}."""
    out: dict = {}
    for n in globals_of(c):
        mem = n.args[1] if n.meta["op"] is Write else n.args[0]
        mem = mem.meta.get("capture_of", mem)
        out.setdefault(mem.name, set()).add(n.meta["mask_dims"])
    return out


# ----- promote_to_shared --------------------------------------------------------------------------------

PROMOTE = r"""
CHECK: kernel gemm(a: [M, K] f16 global, b: [N, K] f16 global, c: [M, N] f32 global) {
CHECK: %register = register(, value=0.0) : [M, N] f32
CHECK-NEXT: %[[SA:shared_a]] = allocate(, tile={M: 64, K: 32}, base={M: 64*$WG0, K: 32*$ARG_K}, stages=1, pad=0) : [M, K] f16 shared
CHECK-NEXT: %[[SB:shared_b]] = allocate(, tile={N: 64, K: 32}, base={N: 64*$WG1, K: 32*$ARG_K}, stages=1, pad=0) : [N, K] f16 shared
CHECK-NEXT: %iterate = iterate((%register), (%a, %b, %[[SA]], %[[SB]]), dim=K, subgraph=iterate_0)
CHECK-LABEL: region iterate_0 {
CHECK: %capture_a = capture : [M, K] f16 global
CHECK-NEXT: %capture_b = capture : [N, K] f16 global
CHECK-NEXT: %[[CA:capture_shared_a]] = capture : [M, K] f16 shared
CHECK-NEXT: %[[CB:capture_shared_b]] = capture : [N, K] f16 shared
CHECK-NEXT: %[[GA:read_global]] = read(%capture_a) : [M, K] f16
CHECK-NEXT: = write(%[[GA]], %[[CA]])
CHECK-NEXT: %[[GB:read_1_global]] = read(%capture_b) : [N, K] f16
CHECK-NEXT: = write(%[[GB]], %[[CB]])
CHECK-NEXT: %[[A:read]] = read(%[[CA]]) : [M, K] f16
CHECK-NEXT: %[[B:read_1]] = read(%[[CB]]) : [N, K] f16
CHECK-NEXT: = mma(%[[A]], %[[B]], %iter_arg_0) : [M, N] f32
CHECK-NEXT: return
"""


def test_promote_stages_mma_operands_through_shared() -> None:
    c = compiled(gemm, NUM_STAGES=1)  # (pipelining would turn the copies into async_copy)
    filecheck(c.after["promote_to_shared"], PROMOTE)
    # the global halves of the copies are spread over the whole workgroup ...
    body = c.body()
    staged = [n for n in body.nodes if n.meta.get("op") is Read and n.meta.get("staging")]
    assert staged and all(n.meta.get("distribute") == "workgroup" for n in staged)
    # ... so their layouts are over $THREAD, not over one wave's lanes (the MMA reads keep $LANE)
    filecheck(
        c.after["infer_indices"],
        r"""
CHECK-LABEL: region iterate_0 {
CHECK: = read(%capture_a) : [M, K] f16  #layout {M: ({{[^;]*}}$THREAD{{[^;]*}}) /32, K: ({{.*}}$THREAD{{.*}}; 8x1) /32}
CHECK: = read(%capture_b) : [N, K] f16  #layout {N: ({{[^;]*}}$THREAD{{[^;]*}}) /32, K: ({{.*}}$THREAD{{.*}}; 8x1) /32}
CHECK: = read(%capture_shared_a) : [M, K] f16  #layout {M: ({{.*}}$LANE{{.*}}
CHECK: = read(%capture_shared_b) : [N, K] f16  #layout {N: ({{.*}}$LANE{{.*}}
""",
    )


def test_promote_keeps_a_shared_index_chain_above_the_first_copy() -> None:
    """K and V of paged attention are gathered through one index chain (block table, then row): staging V
    must not move the chain below K's copy, which already uses it."""
    from wavec.kernels.paged_attention import make_paged_attention, paged_subs

    c = Compiled(make_paged_attention(wc.f16, 2, 16), paged_subs(64, 2, 16, 64, 1), "sm_80", emit=False)
    filecheck(
        c.after["promote_to_shared"],
        r"""
CHECK-LABEL: region iterate_0 {
CHECK: %[[POS:\w+]] = binary(%arange, %capture_{{\w+}}, kind=minimum) : [N] i32
CHECK: %[[BLK:\w+]] = read(%capture_block_tables, %{{\w+}}, dynamic=(P,)) : [N] i32
CHECK: %[[ROW:\w+]] = binary(%[[POS]], 16, kind=mod) : [N] i32
CHECK: = read(%capture_k_cache, %[[BLK]], %[[ROW]], mapping={KVH: Mod($TILE_START_Y, KVH)}, dynamic=(NB, PG)) : [N, D] f16
CHECK: = read(%capture_v_cache, %[[BLK]], %[[ROW]], mapping={KVH: Mod($TILE_START_Y, KVH)}, dynamic=(NB, PG)) : [N, D] f16
CHECK: = read(%capture_shared_k_cache{{.*}}) : [N, D] f16
""",
    )


def test_promote_operands_false_keeps_reads_in_registers() -> None:
    c = compiled(gemm_regs)
    text = c.after["promote_to_shared"]
    filecheck(
        text,
        r"""
CHECK: %register = register(, value=0.0) : [M, N] f32
CHECK-NEXT: %iterate = iterate((%register), (%a, %b), dim=K, subgraph=iterate_0)
CHECK-LABEL: region iterate_0 {
CHECK: %[[A:read]] = read(%capture_a) : [M, K] f16
CHECK-NEXT: %[[B:read_1]] = read(%capture_b) : [N, K] f16
CHECK-NEXT: = mma(%[[A]], %[[B]], %iter_arg_0)
""",
    )
    assert "allocate" not in c.after["insert_barriers"] and "shared" not in text
    for bad in ("memref.alloc", "gpu.barrier", "nvgpu.ldmatrix", "nvgpu.device_async", "#gpu.address_space<workgroup>"):
        assert bad not in c.mlir, bad
    filecheck(c.loop_mlir(), "CHECK: vector.load {{.*}} : memref<?x?xf16>\nCHECK: nvgpu.mma.sync")


def test_shared_annotation_requests_promotion() -> None:
    text = compiled(gemm_shared_a, emit=False).after["promote_to_shared"]
    filecheck(
        text,
        r"""
CHECK: kernel gemm_shared_a(a: [M, K] f16 global, b: [N, K] f16 global, c: [M, N] f32 global) {
CHECK: %a = memory : [M, K] f16 global
CHECK: %[[SA:shared_a]] = allocate(, tile={M: 64, K: 32}, base={M: 64*$WG0, K: 32*$ARG_K}, stages=1, pad=0) : [M, K] f16 shared
CHECK-NOT: allocate(
CHECK: iterate((%register), (%a, %b, %[[SA]]), dim=K, subgraph=iterate_0)
CHECK-LABEL: region iterate_0 {
CHECK: %[[G:read_global]] = read(%capture_a) : [M, K] f16
CHECK-NEXT: = write(%[[G]], %capture_shared_a)
CHECK-NEXT: %[[A:read]] = read(%capture_shared_a) : [M, K] f16
CHECK-NEXT: %[[B:read_1]] = read(%capture_b) : [N, K] f16
CHECK-NEXT: = mma(%[[A]], %[[B]], %iter_arg_0)
""",
    )


def test_shared_annotation_compiles_and_runs() -> None:
    k = wc.compile(gemm_shared_a, SUBS, target="sm_90", backend="emulator", cache=False)
    torch.manual_seed(0)
    a, b = torch.randn(70, 40).half(), torch.randn(90, 40).half()
    out = torch.full((70, 90), float("nan"))
    k(a, b, out)
    ref = a.double() @ b.double().T
    assert float((out.double() - ref).abs().max() / ref.abs().max()) < 1e-5


# ----- coarsen_loads ------------------------------------------------------------------------------------

COPY_LAYOUT = r"""
CHECK-LABEL: region iterate_0 {
CHECK: %[[GA0:read_global_m0_k0]] = read(%capture_a) : [M, K] f16  #layout {M: (64*$WG0 + Mod(floor($THREAD/4), 32)) /32, K: (32*$ARG_K + 8*(Mod($THREAD, 4)); 8x1) /32} order[K.0]
CHECK-NEXT: %[[GA1:read_global_m1_k0]] = read(%capture_a) : [M, K] f16  #layout {M: (64*$WG0 + Mod(floor($THREAD/4), 32) + 32) /32, K: (32*$ARG_K + 8*(Mod($THREAD, 4)); 8x1) /32} order[K.0]
CHECK-NEXT: = write(%[[GA0]], %capture_shared_a)  #layout {M: (64*$WG0 + Mod(floor($THREAD/4), 32)) /32, K: (32*$ARG_K + 8*(Mod($THREAD, 4)); 8x1) /32}
CHECK-NEXT: = write(%[[GA1]], %capture_shared_a)  #layout {M: (64*$WG0 + Mod(floor($THREAD/4), 32) + 32) /32, K: (32*$ARG_K + 8*(Mod($THREAD, 4)); 8x1) /32}
CHECK-NEXT: = read(%capture_b) : [N, K] f16  #layout {N: (64*$WG1 + Mod(floor($THREAD/4), 32)) /32, K: (32*$ARG_K + 8*(Mod($THREAD, 4)); 8x1) /32}
CHECK-NEXT: = read(%capture_b) : [N, K] f16  #layout {N: (64*$WG1 + Mod(floor($THREAD/4), 32) + 32) /32, K: (32*$ARG_K + 8*(Mod($THREAD, 4)); 8x1) /32}
CHECK-NOT: read(%capture_a)
CHECK-NOT: read(%capture_b)
"""


def test_coarsen_copies_are_coalesced_16_byte_runs() -> None:
    c = compiled(gemm, NUM_STAGES=1)
    filecheck(c.after["coarsen_loads"], COPY_LAYOUT)
    copies = [n for n in c.body().nodes if n.meta.get("op") in (Read, Write) and n.meta.get("staging")]
    assert len(copies) == 8  # 64x32 f16 tile = 4 KiB = 128 threads x 16 B x 2, for a and for b
    for n in copies:
        ((first, length, _off),) = n.meta["accesses"]  # one 8 x f16 run per instruction
        assert (first, length) == (0, 8) and n.meta["alignments"] == [16]
    # consecutive threads take consecutive 16-byte chunks of the row-major 64x32 tile
    reads_a = [n for n in copies if n.meta["op"] is Read and n.args[0].name == "capture_a"]
    env = {WORKGROUP[0]: 0, ARG_K: 0}
    for i, n in enumerate(reads_a):
        lay = n.meta["layout"]
        for t in range(128):
            row = int(lay.seq(M).start.subs({**env, THREAD: t}))
            col = int(lay.seq(K).start.subs({**env, THREAD: t}))
            assert col % 8 == 0 and (row * 32 + col) // 8 == 128 * i + t, (i, t, row, col)


LDMATRIX = r"""
CHECK: scf.for
CHECK: nvgpu.ldmatrix %[[SA:alloc]][{{.*}}] numTiles = 4 transpose = false : memref<2x1x64x32xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
CHECK: %[[BX4:[0-9]+]] = nvgpu.ldmatrix %[[SB:alloc_[0-9]+]][{{.*}}] numTiles = 4 transpose = false : memref<2x1x64x32xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
CHECK-NEXT: %[[FLAT:[0-9]+]] = vector.shape_cast %[[BX4]] : vector<4x2xf16> to vector<8xf16>
CHECK-NEXT: vector.extract_strided_slice %[[FLAT]] offsets = [4], sizes = [4], strides = [1] : vector<8xf16> to vector<4xf16>
CHECK-NEXT: vector.extract_strided_slice %[[FLAT]] offsets = [0], sizes = [4], strides = [1] : vector<8xf16> to vector<4xf16>
CHECK: nvgpu.ldmatrix %[[SB]][{{.*}}] numTiles = 4
CHECK: nvgpu.ldmatrix %[[SA]][{{.*}}] numTiles = 4
CHECK: nvgpu.mma.sync
"""


def test_coarsen_ldmatrix_for_nv_shared_operands() -> None:
    c = compiled(gemm)
    shared_reads = [
        n
        for n in c.body().nodes
        if n.meta.get("op") is Read and n.args[0].meta["type"].address_space == AddressSpace.SHARED
    ]
    assert len(shared_reads) == 12 and all(n.meta.get("access") == "ldmatrix" for n in shared_reads)
    # B fragments of neighbouring N tiles (n0+n1, n2+n3) share one ldmatrix.x4
    pairs = {(n.name, n.meta["pair_with"].name) for n in shared_reads if n.meta.get("pair_with") is not None}
    assert pairs == {(f"read_1_n{i}_k{k}", f"read_1_n{i + 1}_k{k}") for i in (0, 2) for k in (0, 1)}
    loop = c.loop_mlir()
    filecheck(loop, LDMATRIX)
    # per wave and K step of 16: 2 A fragments (x4) and 2 pairs of B fragments (x4); 2 K steps per BLOCK_K=32
    assert loop.count("nvgpu.ldmatrix") == loop.count("numTiles = 4") == 8
    assert "vector.load" not in loop  # no shared operand read goes through plain loads
    # a wave with a single N tile (BLOCK_N=16 over 2 waves) reads its B fragment with ldmatrix.x2; its
    # 16x32 tile is copied in 8-byte runs (4 elements per thread), so swizzle_shared pads it instead
    narrow = compiled(gemm, BLOCK_N=16).loop_mlir()
    filecheck(
        narrow,
        "CHECK: nvgpu.ldmatrix %alloc_{{[0-9]+}}[{{.*}}] numTiles = 2 transpose = false : "
        "memref<2x16x40xf16, #gpu.address_space<workgroup>> -> vector<2x2xf16>",
    )
    assert narrow.count("numTiles = 2") == 2 and narrow.count("numTiles = 4") == 4
    amd = compiled(gemm_amd, target="gfx942", NUM_STAGES=1)
    assert "ldmatrix" not in amd.mlir
    assert all(n.meta.get("access") != "ldmatrix" for n in amd.body().nodes)


def test_coarsen_16_byte_vector_accesses_carry_alignment_16() -> None:
    c = compiled(gemm, NUM_STAGES=1)  # synchronous copies: vector.load global -> vector.store shared
    filecheck(
        c.loop_mlir(),
        r"""
CHECK: vector.load %{{[0-9]+}}[%{{[0-9]+}}, %{{[0-9]+}}] alignment = 16 : memref<?x?xf16>, vector<8xf16>
CHECK: vector.store %{{[0-9]+}}, %alloc{{\w*}}[%{{\w+}}, %{{\w+}}, %{{[0-9]+}}, %{{[0-9]+}}] alignment = 16 : memref<1x1x64x32xf16, #gpu.address_space<workgroup>>, vector<8xf16>
""",
    )
    vec = [
        line
        for line in c.loop_mlir().splitlines()
        if ("vector.load" in line or "vector.store" in line) and line.rstrip().endswith("vector<8xf16>")
    ]
    assert len(vec) == 8 and all(" alignment = 16 : " in line for line in vec)  # 4 loads + 4 shared stores
    filecheck(
        compiled(copy).mlir,
        "CHECK-COUNT-2: vector.load {{.*}} alignment = 16 : memref<?x?xf16>, vector<8xf16>\n"
        "CHECK-COUNT-2: vector.store {{.*}} alignment = 16 : memref<?x?xf16>, vector<8xf16>",
    )


# ----- swizzle_shared -----------------------------------------------------------------------------------

LAYOUT = "smem_layout=SharedLayout(kind=<SharedLayoutKind.{}: '{}'>, elem_bytes=2, mn_major=False)"


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_swizzle_xor_swizzles_ldmatrix_tiles(stages: int) -> None:
    """The default: 64-byte rows (BLOCK_K 32) get the 64-byte XOR swizzle, unpadded, 1024-byte aligned, and
    the chunk index of every copy and ldmatrix address is XORed with the row phase."""
    c = compiled(gemm, NUM_STAGES=stages)
    assert "pad=0" in c.after["coarsen_loads"] and "smem_layout" not in c.after["coarsen_loads"]
    lay = LAYOUT.format("SWIZZLE_64B", "swizzle_64b")
    filecheck(
        c.after["swizzle_shared"],
        f"CHECK: %shared_a = allocate(, tile={{M: 64, K: 32}}, {{{{.*}}}}, pad=0, {lay}) : [M, K] f16 shared\n"
        f"CHECK-NEXT: %shared_b = allocate(, tile={{N: 64, K: 32}}, {{{{.*}}}}, pad=0, {lay}) : [N, K] f16 shared",
    )
    filecheck(
        c.mlir,
        f"CHECK-COUNT-2: memref.alloc() alignment = 1024 : memref<{stages}x1x64x32xf16, #gpu.address_space<workgroup>>\n"
        "CHECK-NOT: memref.alloc\nCHECK: arith.xori\nCHECK: nvgpu.ldmatrix",
    )
    assert "x64x40xf16" not in c.mlir


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_swizzle_pads_rows_by_16_bytes_without_swizzle(stages: int) -> None:
    """``operand_swizzle="none"``: rows padded by 16 bytes, no XOR."""
    c = compiled(gemm_padded, NUM_STAGES=stages)
    filecheck(
        c.after["swizzle_shared"],
        "CHECK: %shared_a = allocate(, tile={M: 64, K: 32}, {{.*}}, pad=8) : [M, K] f16 shared\n"
        "CHECK-NEXT: %shared_b = allocate(, tile={N: 64, K: 32}, {{.*}}, pad=8) : [N, K] f16 shared",
    )
    filecheck(
        c.mlir,
        f"CHECK-COUNT-2: memref.alloc() alignment = 128 : memref<{stages}x64x40xf16, #gpu.address_space<workgroup>>\n"
        "CHECK-NOT: memref.alloc",
    )
    assert "x64x32xf16" not in c.mlir and "arith.xori" not in c.mlir


@pytest.mark.parametrize(
    "kernel,block_k,kind",
    [
        (gemm, 64, "SWIZZLE_128B"),
        (gemm, 16, "SWIZZLE_32B"),
        (gemm_32b, 64, "SWIZZLE_32B"),
        (gemm_32b, 16, "SWIZZLE_32B"),
    ],
)
def test_swizzle_takes_the_widest_or_the_named_width(kernel, block_k: int, kind: str) -> None:
    text = compiled(kernel, emit=False, BLOCK_K=block_k).after["swizzle_shared"]
    lay = LAYOUT.format(kind, kind.lower())
    filecheck(
        text,
        f"CHECK: %shared_a = allocate(, tile={{M: 64, K: {block_k}}}, {{{{.*}}}}, pad=0, {lay})\n"
        f"CHECK-NEXT: %shared_b = allocate(, tile={{N: 64, K: {block_k}}}, {{{{.*}}}}, pad=0, {lay})",
    )


def test_swizzle_pads_tiles_not_read_by_ldmatrix() -> None:
    """CDNA3 reads its operand tiles with plain vector loads: padded rows, as before."""
    text = compiled(gemm_amd, target="gfx942", emit=False, NUM_STAGES=1).after["swizzle_shared"]
    assert "smem_layout" not in text
    filecheck(text, "CHECK: %shared_a = allocate(, tile={M: 64, K: 32}, {{.*}}, pad=8)")


# ----- schedule_loops -----------------------------------------------------------------------------------

SCHEDULE = r"""
CHECK-LABEL: region iterate_0 {
CHECK: = write(%read_1_global_n1_k0, %capture_shared_b)
CHECK-NOT: = mma(
CHECK-COUNT-6: _k0 = read(%capture_shared_{{[ab]}})
CHECK-NOT: = read(
CHECK: %mma_m0_n0_k0 = mma(%read_m0_k0, %read_1_n0_k0, %iter_arg_0_m0_n0)
CHECK-COUNT-7: _k0 = mma(
CHECK-NOT: = mma(
CHECK-COUNT-6: _k1 = read(%capture_shared_{{[ab]}})
CHECK-NOT: = read(
CHECK: %mma_m0_n0_k1 = mma(%read_m0_k1, %read_1_n0_k1, %mma_m0_n0_k0)
CHECK-COUNT-7: _k1 = mma(
CHECK-NOT: = read(
CHECK: return (%mma_m0_n0_k1,
"""


def test_schedule_fetches_each_k_step_next_to_its_mmas() -> None:
    c = compiled(gemm, emit=False, NUM_STAGES=1)
    filecheck(c.after["schedule_loops"], SCHEDULE)
    # before scheduling all fetches of both K steps precede the first mma
    filecheck(
        c.after["swizzle_shared"],
        "CHECK-LABEL: region iterate_0 {\nCHECK: _k1 = read(%capture_shared_a)\nCHECK: %mma_m0_n0_k0 = mma(",
    )


def test_schedule_orders_every_k_step() -> None:
    c = compiled(gemm, emit=False, BLOCK_K=64)  # 4 K steps, pipelined
    nodes = [n for n in c.body().nodes]
    pos = {n: i for i, n in enumerate(nodes)}
    mmas = [n for n in nodes if n.meta.get("op") is MMA]
    steps = sorted({n.meta["key"][-1][1] for n in mmas})
    assert steps == [0, 1, 2, 3]
    for s in steps:
        these = [m for m in mmas if m.meta["key"][-1][1] == s]
        reads = {a for m in these for a in m.args[:2] if a.meta.get("op") is Read}
        first = min(pos[m] for m in these)
        assert all(pos[r] < first for r in reads), s
        if s:
            last_prev = max(pos[m] for m in mmas if m.meta["key"][-1][1] == s - 1)
            assert all(pos[r] > last_prev for r in reads), s


@pytest.mark.parametrize("block_k", [16, 32, 64])
def test_schedule_issues_copies_after_the_first_k_step(block_k: int) -> None:
    """The next stage's copies sit right before the first mma of K step 1 (step 0 when there is only
    one), after that step's fragment reads and after the body's wait; with three or more K steps (a GEMM
    body) the second half, then the commit, sit right before the first mma of K step 2."""
    c = compiled(gemm, NUM_STAGES=3, BLOCK_K=block_k)
    nodes = list(c.body().nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    ops = [n.meta.get("op") for n in nodes]
    copies = [n for n in nodes if n.meta.get("op") is AsyncCopy]
    mmas = [n for n in nodes if n.meta.get("op") is MMA]
    steps = block_k // 16
    step = min(1, steps - 1)

    def first(s: int) -> int:
        return min(pos[m] for m in mmas if m.meta["key"][-1][1] == s)

    assert len(copies) == block_k // 8  # two 64 x BLOCK_K tiles in 16-byte copies over 128 threads
    groups = (
        [(first(step), len(copies))]
        if steps < 3
        else [(first(1), len(copies) // 2), (first(2), len(copies) - len(copies) // 2)]
    )
    for i, (at, count) in enumerate(groups):
        last = i == len(groups) - 1
        before = at - 1 - last  # the commit closes the last group
        assert not last or ops[at - 1] is AsyncCommit
        assert all(ops[before - j] is AsyncCopy for j in range(count)), (i, ops[before - count + 1 : at])
    assert ops.index(AsyncWait) < min(pos[c] for c in copies)
    if step:
        assert all(pos[m] < min(pos[c] for c in copies) for m in mmas if m.meta["key"][-1][1] == 0)


# ----- pipeline_loops -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_pipeline_trace(stages: int) -> None:
    c = compiled(gemm, NUM_STAGES=stages)
    text = c.after["pipeline_loops"]
    ahead = f"32*Min($ARG_K + {stages - 1}, ceiling(K/32) - 1)"
    prologue = "".join(
        f"CHECK-COUNT-4: _async_prologue{s} = async_copy(%{{{{[ab]}}}}, %shared_{{{{[ab]}}}})  #layout {{{{.*}}}}"
        + (
            f", K: (8*(Mod($THREAD, 4)) + 32*Min({s}, ceiling(K/32) - 1); 8x1) /32}}"
            if s
            else ", K: (8*(Mod($THREAD, 4)); 8x1) /32}"
        )
        + f"\nCHECK-NEXT: %async_commit_prologue{s} = async_commit()\n"
        for s in range(stages - 1)
    )
    filecheck(
        text,
        rf"""
CHECK: %shared_a = allocate(, tile={{M: 64, K: 32}}, {{{{.*}}}}, stages={stages}, pad=0, smem_layout={{{{.*}}}}
CHECK-NEXT: %shared_b = allocate(, tile={{N: 64, K: 32}}, {{{{.*}}}}, stages={stages}, pad=0, smem_layout={{{{.*}}}}
{prologue}CHECK-NEXT: %iterate = iterate(
CHECK-LABEL: region iterate_0 {{
CHECK: %capture_shared_b = capture
CHECK-NEXT: %async_wait = async_wait(, pending={stages - 2})
CHECK-NEXT: = async_copy(%capture_a, %capture_shared_a)  #layout {{M: (64*$WG0 + Mod(floor($THREAD/4), 32)) /32, K: (8*(Mod($THREAD, 4)) + {ahead}; 8x1) /32}}
CHECK-NEXT: = async_copy(%capture_a, %capture_shared_a)  #layout {{M: (64*$WG0 + Mod(floor($THREAD/4), 32) + 32) /32, K: (8*(Mod($THREAD, 4)) + {ahead}; 8x1) /32}}
CHECK-NEXT: = async_copy(%capture_b, %capture_shared_b)  #layout {{N: {{{{.*}}}}, K: (8*(Mod($THREAD, 4)) + {ahead}; 8x1) /32}}
CHECK-NEXT: = async_copy(%capture_b, %capture_shared_b)  #layout {{N: {{{{.*}}}}, K: (8*(Mod($THREAD, 4)) + {ahead}; 8x1) /32}}
CHECK-NEXT: %async_commit = async_commit()
CHECK-NOT: async_
CHECK-NOT: = write(
CHECK: return
""",
    )
    assert text.count("async_commit_prologue") == stages - 1
    # stages: copies of iteration i go to (i + S - 1) % S, the reads of iteration i use i % S (the loop
    # may carry i % S as $STAGE_K)
    body = c.body()
    copies = [n for n in body.nodes if n.meta.get("op") is AsyncCopy]
    reads = [n for n in body.nodes if n.meta.get("op") is Read]
    assert len(copies) == 4 and len(reads) == 12

    def stage(n, i: int) -> int:
        return int(sympy.sympify(n.meta["stage"]).subs({stage_symbol(K): i % stages, ARG_K: i}))

    for i in range(7):
        assert all(stage(n, i) == (i + stages - 1) % stages for n in copies)
        assert all(stage(n, i) == i % stages for n in reads)
    pro = [n for n in c.trace.graph.nodes if n.meta.get("op") is AsyncCopy]
    assert [int(n.meta["stage"]) for n in pro] == [s for s in range(stages - 1) for _ in range(4)]


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_pipeline_mlir(stages: int) -> None:
    c = compiled(gemm, NUM_STAGES=stages)
    head, _, rest = c.mlir.partition("scf.for")
    filecheck(
        head,
        f"CHECK-COUNT-2: memref.alloc() alignment = 1024 : memref<{stages}x1x64x32xf16, #gpu.address_space<workgroup>>\n"
        + "".join(
            f"CHECK-COUNT-4: nvgpu.device_async_copy %{{{{[0-9]+}}}}[{{{{.*}}}}], %alloc{{{{\\w*}}}}[%c{s}{{{{(_[0-9]+)?}}}}, {{{{.*}}}}], 8, %{{{{[0-9]+}}}} bypassL1\n"
            "CHECK: nvgpu.device_async_create_group\n"
            for s in range(stages - 1)
        )
        + "CHECK-NOT: nvgpu.device_async",
    )
    assert head.count("nvgpu.device_async_create_group") == stages - 1
    assert "nvgpu.device_async_wait" not in head and "gpu.barrier" not in head
    filecheck(
        c.loop_mlir(),
        rf"""
CHECK: scf.for
CHECK-NEXT: nvgpu.device_async_wait %{{{{[0-9]+}}}} numGroups = {stages - 2}
CHECK-NEXT: gpu.barrier
CHECK-NOT: nvgpu.device_async
CHECK: nvgpu.ldmatrix
CHECK: nvgpu.mma.sync
CHECK-NOT: nvgpu.device_async
CHECK: nvgpu.ldmatrix
CHECK-COUNT-4: nvgpu.device_async_copy
CHECK: nvgpu.device_async_create_group
CHECK-NOT: nvgpu.device_async
CHECK-NOT: gpu.barrier
CHECK: nvgpu.mma.sync
CHECK: scf.yield
""",
    )


def test_one_stage_is_synchronous() -> None:
    c = compiled(gemm, NUM_STAGES=1)
    assert "async" not in c.after["insert_barriers"]
    assert "nvgpu.device_async" not in c.mlir
    filecheck(
        c.mlir, "CHECK-COUNT-2: memref.alloc() alignment = 1024 : memref<1x1x64x32xf16, #gpu.address_space<workgroup>>"
    )
    filecheck(
        c.loop_mlir(),
        r"""
CHECK: scf.for
CHECK-NEXT: gpu.barrier
CHECK: vector.load {{.*}} : memref<?x?xf16>, vector<8xf16>
CHECK: vector.store {{.*}} : memref<1x1x64x32xf16, #gpu.address_space<workgroup>>, vector<8xf16>
CHECK-NOT: nvgpu.ldmatrix
CHECK: gpu.barrier
CHECK-NOT: vector.store
CHECK: nvgpu.ldmatrix
CHECK-NOT: gpu.barrier
CHECK: scf.yield
""",
    )


def test_cdna3_is_never_pipelined() -> None:
    c = compiled(gemm_amd, target="gfx942", NUM_STAGES=3)
    assert "async" not in c.after["pipeline_loops"] and "stages=1" in c.after["pipeline_loops"]
    assert "nvgpu" not in c.mlir
    filecheck(
        c.mlir, "CHECK-COUNT-2: memref.alloc() alignment = 128 : memref<1x64x40xf16, #gpu.address_space<workgroup>>"
    )
    loop = c.loop_mlir()
    assert loop.count("gpu.barrier") == 2 and c.mlir.count("gpu.barrier") == 2
    assert loop.count("amdgpu.mfma") == 8


# ----- reorder_workgroups -------------------------------------------------------------------------------


def test_group_size_gives_a_1d_grid() -> None:
    grouped = compiled(gemm, GROUP_M=3)
    assert grouped.iface.grid == ("(((M) + 63) // 64) * (((N) + 63) // 64)", "1", "1")
    assert set(grouped.ctx.workgroup_remap) == {WORKGROUP[0], WORKGROUP[1]}
    filecheck(
        grouped.mlir,
        r"""
CHECK-LABEL: func.func @gemm()
CHECK: %[[PID:block_id_x]] = gpu.block_id  x
CHECK-NOT: gpu.block_id  y
CHECK: arith.remui %[[PID]], %{{[0-9]+}} : index
CHECK-NOT: gpu.block_id  y
CHECK: scf.for
""",
    )
    plain = compiled(gemm, GROUP_M=1)
    assert plain.iface.grid == ("((M) + 63) // 64", "((N) + 63) // 64", "1")
    assert not plain.ctx.workgroup_remap and plain.ctx.grid_override is None
    filecheck(plain.mlir, "CHECK: gpu.block_id  x\nCHECK: gpu.block_id  y")


# ----- mask_bounds --------------------------------------------------------------------------------------


def test_divisible_shapes_need_no_masks() -> None:
    c = compiled(gemm, M=128, N=192, K=96, NUM_STAGES=3)
    for n in globals_of(c):
        assert n.meta["mask_dims"] == (), n.name
    assert not c.ctx.masked_loops
    for bad in ("scf.if", "arith.cmpi ult"):
        assert bad not in c.mlir, bad
    copies = [line for line in c.mlir.splitlines() if "nvgpu.device_async_copy" in line]
    assert len(copies) == 4 * 3  # 2 prologue stages + the loop body
    for line in copies:  # no source-size operand: every copy reads its full 16 bytes
        filecheck(
            line,
            r"CHECK: nvgpu.device_async_copy %{{[0-9]+}}[%{{\w+}}, %{{\w+}}], %alloc{{\w*}}[%{{\w+}}, %{{\w+}}, %{{\w+}}, %{{\w+}}], 8 bypassL1 : memref<{{128|192}}x96xf16> to memref<3x1x64x32xf16, #gpu.address_space<workgroup>>",
        )
    filecheck(
        c.mlir,
        "CHECK: scf.for\nCHECK: scf.yield\nCHECK-COUNT-16: vector.store {{.*}} : memref<128x192xf32>, vector<2xf32>",
    )
    assert c.iface.divisibility == ()


def test_dynamic_shapes_are_masked() -> None:
    """K is masked (zero-fill); the GEMM operands' M and N rows past the bound are clamped to the last
    row instead (tests/ir/test_ir_clamp_rows.py), so one K test sizes every copy of a thread."""
    c = compiled(gemm, NUM_STAGES=2)
    assert mask_dims_by_memory(c) == {"a": {(K,)}, "b": {(K,)}, "c": {(M, N)}}
    assert c.ctx.masked_loops == {K}
    filecheck(
        c.loop_mlir(),
        r"""
CHECK: scf.for
CHECK: %[[IN:[0-9]+]] = arith.cmpi ult
CHECK: %[[SIZE:[0-9]+]] = arith.select %[[IN]], %c8, %c0{{\w*}} : index
CHECK: nvgpu.device_async_copy {{.*}}, 8, %[[SIZE]] bypassL1 : memref<?x?xf16>
""",
    )
    assert "arith.andi" not in c.loop_mlir()
    # bounds tests are computed once per distinct coordinate (cached and hoisted), but every copy carries
    # a source size and every store of C is guarded
    copies = [line for line in c.mlir.splitlines() if "nvgpu.device_async_copy" in line]
    assert copies and all(", 8, %" in line for line in copies)
    assert c.mlir.count("vector.store") and c.mlir.count("scf.if") >= c.mlir.count("vector.store")
    filecheck(
        c.mlir,
        "CHECK: scf.yield\nCHECK: arith.cmpi ult\nCHECK: scf.if\nCHECK-NEXT: vector.store {{.*}} : memref<?x?xf32>, vector<2xf32>",
    )
    # the contiguous dims are accessed 8 x f16 (K) and 2 x f32 (N) at a time: the launcher checks those
    assert dict(c.iface.divisibility) == {"K": 8, "N": 2}


def test_masks_only_where_not_provably_divisible() -> None:
    c = compiled(gemm, emit=False, M=128, K=40)  # M divides, K=40 does not divide BLOCK_K=32, N dynamic
    assert mask_dims_by_memory(c) == {"a": {(K,)}, "b": {(K,)}, "c": {(N,)}}  # b's N rows clamp
    assert c.ctx.masked_loops == {K}
    assert c.ctx.requirements == {K: 8, N: 2}


def test_static_contiguous_dim_caps_the_runs() -> None:
    """K=36 bound at compile time: runs along K of 4 elements (36's largest power-of-two divisor; 8-byte
    cp.async copies), where K=64 takes 8; rows of N=128 keep theirs."""
    pytest.importorskip("iree.compiler")

    def run_lengths(c: Compiled) -> dict:
        out: dict = {}
        for n in globals_of(c):
            mem = n.args[1] if n.meta["op"] is Write else n.args[0]
            out.setdefault(mem.meta["type"].shape[-1], set()).update(r for _f, r, _o in n.meta["accesses"])
        return out

    assert run_lengths(compiled(gemm, M=128, N=128, K=36)) == {K: {4}, N: {2}}
    assert run_lengths(compiled(gemm, M=128, N=128, K=64)) == {K: {8}, N: {2}}


# ----- insert_barriers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stages", [2, 4])
def test_one_barrier_after_the_wait_when_pipelined(stages: int) -> None:
    c = compiled(gemm, NUM_STAGES=stages)
    text = c.after["insert_barriers"]
    filecheck(
        text,
        f"""
CHECK-NOT: barrier()
CHECK-LABEL: region iterate_0 {{
CHECK: %async_wait = async_wait(, pending={stages - 2})
CHECK-NEXT: %barrier = barrier()
CHECK-NEXT: = read(%capture_shared_
CHECK-NOT: barrier()
CHECK: = async_copy(
CHECK-NOT: barrier()
CHECK: return
""",
    )
    assert text.count("barrier()") == 1
    assert c.mlir.count("gpu.barrier") == 1 and c.loop_mlir().count("gpu.barrier") == 1


def test_two_barriers_when_synchronous() -> None:
    c = compiled(gemm, NUM_STAGES=1)
    filecheck(
        c.after["insert_barriers"],
        r"""
CHECK-NOT: barrier()
CHECK-LABEL: region iterate_0 {
CHECK: %capture_shared_b = capture
CHECK-NEXT: %barrier = barrier()
CHECK-NEXT: = read(%capture_a)
CHECK: = write(%read_1_global_n1_k0, %capture_shared_b)
CHECK-NEXT: %barrier_1 = barrier()
CHECK-NEXT: %read_m0_k0 = read(%capture_shared_a)
CHECK-NOT: barrier()
CHECK: return
""",
    )
    assert c.mlir.count("gpu.barrier") == 2 and c.loop_mlir().count("gpu.barrier") == 2


def test_no_barriers_without_shared_memory() -> None:
    c = compiled(copy)
    assert "barrier" not in c.after["insert_barriers"]
    assert "gpu.barrier" not in c.mlir and "memref.alloc" not in c.mlir
    r = compiled(gemm_regs)
    assert "barrier" not in r.after["insert_barriers"] and "gpu.barrier" not in r.mlir


# ----- emulator numerics --------------------------------------------------------------------------------


@functools.cache
def _emulated(stages: int, group: int, target: str = "sm_90", static: tuple = ()):
    kernel = gemm_amd if target.startswith("gfx") else gemm
    subs = {**SUBS, STAGES: stages, GROUP: group, **dict(static)}
    return wc.compile(kernel, subs, target=target, backend="emulator", cache=False)


def _check_gemm(k, m: int, n: int, kk: int, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, kk, generator=g).half()
    b = torch.randn(n, kk, generator=g).half()
    out = torch.full((m, n), float("nan"))
    k(a, b, out)
    assert not out.isnan().any(), f"{int(out.isnan().sum())} of {m * n} outputs never written"
    ref = a.double() @ b.double().T
    err = float((out.double() - ref).abs().max() / ref.abs().max())
    assert err < 1e-5, err


@pytest.mark.parametrize("stages,group", [(1, 1), (2, 3), (3, 8), (4, 3)])
def test_emulator_gemm_stages_and_groups(stages: int, group: int) -> None:
    pytest.importorskip("iree.compiler")
    k = _emulated(stages, group)
    meta = k.artifact.metadata
    assert dict(meta.divisibility) == {"K": 8, "N": 2}
    assert (meta.grid[1:] == ("1", "1")) == (group > 1)
    # odd K (1.25 and 2.25 K tiles, fewer iterations than stages), M and N not multiples of 64
    _check_gemm(k, 70, 90, 40)
    _check_gemm(k, 200, 66, 72, seed=1)


def test_emulator_gemm_static_odd_shapes() -> None:
    pytest.importorskip("iree.compiler")
    k = _emulated(3, 3, static=((M, 70), (N, 90), (K, 72)))
    assert k.artifact.metadata.divisibility == () and k.artifact.metadata.grid == ("4", "1", "1")
    _check_gemm(k, 70, 90, 72)


def test_emulator_gemm_cdna3_synchronous() -> None:
    pytest.importorskip("iree.compiler")
    _check_gemm(_emulated(3, 8, target="gfx942"), 70, 90, 40)


def test_launcher_runs_the_narrow_variant_for_the_contiguous_dim() -> None:
    """K=36 breaks the wide kernel's K % 8: the launch runs the variant of runs of 4 along K."""
    pytest.importorskip("iree.compiler")
    k = _emulated(2, 3)
    _check_gemm(k, 64, 64, 36)
    assert list(k._variants) == [(("K", 4),)]
