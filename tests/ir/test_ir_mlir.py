# ruff: noqa: E501  (check lines quote whole MLIR lines)
"""IR tier: the emitted MLIR module (``compiled.mlir``), checked FileCheck-style next to each kernel.

Kernels are compiled for real (IREE in-process, no GPU needed); only the MLIR text is checked here; the
binaries are the binary tier's business.
"""

import pytest
from filecheck import filecheck
from kernel_fixtures import gemm_kernel

import wavec as wc
from wavec import Memory, f16, f32
from wavec.kernels import elementwise as ew_lib
from wavec.kernels import gemm as gemm_lib
from wavec.tuning.plan import DEFAULT_SUBS

pytest.importorskip("iree.compiler")

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BK = wc.sym.BLOCK_K


def mlir(kernel: wc.WaveKernel, subs: dict | None = None, target: str = "sm_90") -> str:
    backend = "rocm" if target.startswith("gfx") else "cuda"
    return wc.compile(kernel, subs or {}, target=target, backend=backend, cache=False).mlir


def _gemm(constraints: list) -> wc.WaveKernel:
    """The GEMM body of DESIGN §1 under ``constraints`` (its entry point is called ``gemm``)."""
    return gemm_kernel(constraints)


# ----- GEMM on NVIDIA: one wave, 4x2 grid of m16n8k16 per K step --------------------------------------

gemm_nv = _gemm(
    [
        wc.WorkgroupConstraint(M, 64, 0),
        wc.WorkgroupConstraint(N, 16, 1),
        wc.WaveConstraint(M, 64),
        wc.WaveConstraint(N, 16),
        wc.TilingConstraint(K, BK),
        wc.SchedulingConstraint(promote_operands=False),
        wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_F32_16x8x16_F16),
    ]
)

GEMM_NV = r"""
CHECK: #hal.executable.target<"cuda", "cuda-nvptx-fb", {{.*}}arch = "sm_90", features = "+ptx80"
CHECK: #pipeline_layout = #hal.pipeline.layout<constants = 3, bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>
CHECK: pipeline = #iree_codegen.no_pipeline workgroup_size = [32, 1, 1] subgroup_size = 32
CHECK-LABEL: hal.executable public @gemm_exe {
CHECK-NEXT: hal.executable.variant public @cuda target(
CHECK-NEXT: hal.executable.export public @gemm ordinal(0) layout(#pipeline_layout)
CHECK-LABEL: func.func @gemm()
CHECK: %[[M32:[0-9]+]] = hal.interface.constant.load layout(#pipeline_layout) ordinal(0) : i32
CHECK-NEXT: %[[M:[0-9]+]] = arith.index_castui %[[M32]] : i32 to index
CHECK-NEXT: %[[K32:[0-9]+]] = hal.interface.constant.load layout(#pipeline_layout) ordinal(1) : i32
CHECK-NEXT: %[[K:[0-9]+]] = arith.index_castui %[[K32]] : i32 to index
CHECK-NEXT: %[[N32:[0-9]+]] = hal.interface.constant.load layout(#pipeline_layout) ordinal(2) : i32
CHECK-NEXT: %[[N:[0-9]+]] = arith.index_castui %[[N32]] : i32 to index
CHECK-NOT: hal.interface.constant.load
CHECK: %[[A:[0-9]+]] = hal.interface.binding.subspan layout(#pipeline_layout) binding(0) alignment({{[0-9]+}}) offset(%c0) flags(ReadOnly) : memref<?x?xf16>{%[[M]], %[[K]]}
CHECK-NEXT: %[[B:[0-9]+]] = hal.interface.binding.subspan layout(#pipeline_layout) binding(1) alignment({{[0-9]+}}) offset(%c0) flags(ReadOnly) : memref<?x?xf16>{%[[N]], %[[K]]}
CHECK-NEXT: %[[C:[0-9]+]] = hal.interface.binding.subspan layout(#pipeline_layout) binding(2) alignment({{[0-9]+}}) offset(%c0) : memref<?x?xf32>{%[[M]], %[[N]]}
CHECK: gpu.thread_id  x
CHECK: gpu.block_id  x
CHECK: %[[TRIPS:[0-9]+]] = arith.divui %{{[0-9]+}}, %c16{{(_[0-9]+)?}} : index
CHECK: %{{[0-9]+}}:8 = scf.for %[[IV:arg[0-9]+]] = %{{\w+}} to %[[TRIPS]] step %{{\w+}} iter_args(
CHECK-SAME: -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>) {
CHECK: vector.load %[[A]][
CHECK: vector.load %[[B]][
CHECK-COUNT-8: nvgpu.mma.sync({{.*}}) mmaShape = [16, 8, 16] : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
CHECK-NOT: nvgpu.mma.sync
CHECK: scf.yield
CHECK-NOT: vector.load %[[A]]
CHECK-NOT: nvgpu.mma.sync
CHECK: vector.store {{.*}}, %[[C]][
CHECK-NOT: vector.store {{.*}}, %[[A]][
CHECK: return
"""


def test_gemm_nvidia_mlir() -> None:
    text = mlir(gemm_nv, {BK: 16})
    filecheck(text, GEMM_NV)
    assert text.count("hal.executable public") == 1
    assert text.count("hal.executable.export") == 1
    assert text.count("scf.for") == 1
    assert text.count("nvgpu.mma.sync") == 8
    assert "amdgpu" not in text


def test_gemm_nvidia_mlir_mma_count_scales_with_k_tile() -> None:
    text = mlir(gemm_nv, {BK: 48})
    assert text.count("nvgpu.mma.sync") == 8 * 3
    filecheck(text, "CHECK: arith.divui %{{[0-9]+}}, %c48{{(_[0-9]+)?}} : index\nCHECK: scf.for")


def test_gemm_static_k_has_one_fewer_constant() -> None:
    text = mlir(gemm_nv, {BK: 16, K: 64})
    filecheck(
        text,
        r"""
CHECK: #hal.pipeline.layout<constants = 2, bindings =
CHECK-LABEL: func.func @gemm()
CHECK: %[[M32:[0-9]+]] = hal.interface.constant.load layout(#pipeline_layout) ordinal(0) : i32
CHECK: %[[N32:[0-9]+]] = hal.interface.constant.load layout(#pipeline_layout) ordinal(1) : i32
CHECK-NOT: ordinal(2)
CHECK: binding(0) {{.*}} : memref<?x64xf16>{%{{[0-9]+}}}
CHECK-NEXT: binding(1) {{.*}} : memref<?x64xf16>{%{{[0-9]+}}}
CHECK-NEXT: binding(2) {{.*}} : memref<?x?xf32>{%{{[0-9]+}}, %{{[0-9]+}}}
CHECK: %[[FOUR:c4\w*]] = arith.constant 4 : index
CHECK: scf.for %{{\w+}} = %{{\w+}} to %[[FOUR]] step
""",
    )


# ----- the same body on CDNA3 ---------------------------------------------------------------------------

gemm_amd = _gemm(
    [
        wc.WorkgroupConstraint(M, 64, 0),
        wc.WorkgroupConstraint(N, 32, 1),
        wc.WaveConstraint(M, 32),
        wc.WaveConstraint(N, 32),
        wc.TilingConstraint(K, 32),
        wc.SchedulingConstraint(promote_operands=False),
        wc.HardwareConstraint(threads_per_wave=64, mma_type=wc.MMAType.F32_16x16x16_F16),
    ]
)

GEMM_AMD = r"""
CHECK: #hal.executable.target<"rocm", "rocm-hsaco-fb", {{.*}}arch = "gfx942"
CHECK: workgroup_size = [128, 1, 1] subgroup_size = 64
CHECK-LABEL: hal.executable public @gemm_exe {
CHECK-NEXT: hal.executable.variant public @rocm target(
CHECK-LABEL: func.func @gemm()
CHECK-COUNT-3: hal.interface.constant.load
CHECK: binding(0) {{.*}} flags(ReadOnly)
CHECK-NEXT: binding(1) {{.*}} flags(ReadOnly)
CHECK-NEXT: binding(2) alignment({{[0-9]+}}) offset(%c0) : memref<?x?xf32>
CHECK: gpu.thread_id  x
CHECK: %{{[0-9]+}}:4 = scf.for {{.*}} iter_args(%[[ACC0:arg[0-9]+]] = %{{\w+}}, %[[ACC1:arg[0-9]+]] = {{.*}} -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>) {
CHECK: %[[R0:[0-9]+]] = amdgpu.mfma 16x16x16 %{{[0-9]+}} * %{{[0-9]+}} + %[[ACC0]] : vector<4xf16>, vector<4xf16>, vector<4xf32>
CHECK-NEXT: amdgpu.mfma 16x16x16 %{{[0-9]+}} * %{{[0-9]+}} + %[[ACC1]]
CHECK-COUNT-2: amdgpu.mfma 16x16x16
CHECK: %[[R1:[0-9]+]] = amdgpu.mfma 16x16x16 %{{[0-9]+}} * %{{[0-9]+}} + %[[R0]] : vector<4xf16>, vector<4xf16>, vector<4xf32>
CHECK-COUNT-3: amdgpu.mfma 16x16x16
CHECK-NOT: amdgpu.mfma
CHECK: scf.yield %[[R1]],
"""


def test_gemm_amd_mlir() -> None:
    text = mlir(gemm_amd, target="gfx942")
    filecheck(text, GEMM_AMD)
    assert "nvgpu" not in text and text.count("amdgpu.mfma") == 8


def test_gemm_amd_32x32x8_mlir() -> None:
    k = gemm_lib.make_gemm(wc.f16, 64, wc.MMAType.F32_32x32x8_F16)
    text = mlir(k, {**DEFAULT_SUBS, wc.sym.BLOCK_M: 64, wc.sym.BLOCK_N: 64, BK: 16}, target="gfx942")
    # per wave: a 32x32 tile is one instruction tile; BLOCK_K / 8 = 2 of them chained along K
    filecheck(
        text,
        "CHECK: scf.for\nCHECK: amdgpu.mfma 32x32x8 {{.*}} : vector<4xf16>, vector<4xf16>, vector<16xf32>\n"
        "CHECK-NOT: amdgpu.mfma 16x16x16",
    )
    assert text.count("amdgpu.mfma 32x32x8") % 2 == 0 and "amdgpu.mfma 32x32x8" in text


# ----- library GEMM: the invariants whatever its schedule ---------------------------------------------


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_library_gemm_mlir(target: str) -> None:
    text = mlir(gemm_lib.make_gemm(), DEFAULT_SUBS, target=target)
    filecheck(
        text,
        rf"""
CHECK: arch = "{target}"
CHECK: #hal.pipeline.layout<constants = 3, bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>
CHECK-LABEL: hal.executable public @gemm_exe {{
CHECK-LABEL: func.func @gemm()
CHECK: hal.interface.constant.load layout(#pipeline_layout) ordinal(0) : i32
CHECK: hal.interface.constant.load layout(#pipeline_layout) ordinal(1) : i32
CHECK: hal.interface.constant.load layout(#pipeline_layout) ordinal(2) : i32
CHECK: binding(0) {{{{.*}}}} flags(ReadOnly) : memref<?x?xf16>
CHECK: binding(1) {{{{.*}}}} flags(ReadOnly) : memref<?x?xf16>
CHECK: binding(2) alignment({{{{[0-9]+}}}}) offset(%c0) : memref<?x?xf32>
CHECK: gpu.thread_id  x
CHECK: scf.for {{{{.*}}}} iter_args(
CHECK: nvgpu.mma.sync({{{{.*}}}}) mmaShape = [16, 8, 16]
CHECK: scf.yield
CHECK: vector.store
""",
    )
    assert text.count("hal.executable public") == 1
    assert "flags(ReadOnly) : memref<?x?xf32>" not in text


# ----- elementwise ------------------------------------------------------------------------------------

ROWWISE = [
    wc.WorkgroupConstraint(M, 4, 0),
    wc.WorkgroupConstraint(N, 512, 1),
    wc.WaveConstraint(M, 1),
    wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 256}),
]


@wc.wave(ROWWISE)
def copy(src: Memory[M, N, f16], dst: Memory[M, N, f16]):
    wc.write(wc.read(src), dst)


COPY = r"""
CHECK: #hal.pipeline.layout<constants = 2, bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>
CHECK: workgroup_size = [128, 1, 1] subgroup_size = 32
CHECK-LABEL: func.func @copy()
CHECK: %[[SRC:[0-9]+]] = hal.interface.binding.subspan {{.*}} binding(0) {{.*}} flags(ReadOnly) : memref<?x?xf16>
CHECK-NEXT: %[[DST:[0-9]+]] = hal.interface.binding.subspan {{.*}} binding(1) alignment({{[0-9]+}}) offset(%c0) : memref<?x?xf16>
CHECK: vector.load %[[SRC]][%[[ROW:[0-9]+]], %[[COL0:[0-9]+]]]{{.*}} : memref<?x?xf16>, vector<8xf16>
CHECK: %[[COL1:[0-9]+]] = arith.addi %[[COL0]], %c256 : index
CHECK: vector.load %[[SRC]][%[[ROW]], %[[COL1]]]{{.*}} : memref<?x?xf16>, vector<8xf16>
CHECK-NOT: vector.load
CHECK: vector.store %{{[0-9]+}}, %[[DST]][%[[ROW]], %[[COL0]]]{{.*}} : memref<?x?xf16>, vector<8xf16>
CHECK-NOT: vector.load
CHECK: vector.store %{{[0-9]+}}, %[[DST]][%[[ROW]], %[[COL1]]]{{.*}} : memref<?x?xf16>, vector<8xf16>
CHECK-NOT: vector.store
CHECK: return
"""


def test_copy_mlir_uses_16_byte_accesses() -> None:
    text = mlir(copy)
    filecheck(text, COPY)
    for bad in ("vector.shuffle", "insert_strided_slice", "extract_strided_slice", "scf.for"):
        assert bad not in text, bad


@pytest.mark.parametrize(
    "dtype,threads,target,width",
    [
        (f16, 32, "sm_80", "vector<8xf16>"),
        (f32, 32, "sm_90", "vector<4xf32>"),
        (wc.bf16, 32, "sm_90", "vector<8xbf16>"),
        (f16, 64, "gfx942", "vector<8xf16>"),
    ],
)
def test_library_copy_mlir(dtype, threads: int, target: str, width: str) -> None:
    text = mlir(
        ew_lib.make_copy(dtype, threads),
        ew_lib.DEFAULT_SUBS if threads == 32 else {wc.sym.BLOCK_M: 4, wc.sym.BLOCK_N: 1024},
        target=target,
    )
    filecheck(
        text,
        f"CHECK: subgroup_size = {threads}\nCHECK-COUNT-2: vector.load {{{{.*}}}} {width}\n"
        f"CHECK-COUNT-2: vector.store {{{{.*}}}} {width}\nCHECK-NOT: vector.load",
    )
    assert "vector.shuffle" not in text


@wc.wave(
    [
        wc.WorkgroupConstraint(M, 4, 0),
        wc.WorkgroupConstraint(N, 256, 1),
        wc.WaveConstraint(M, 2),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 2, N: 256}),
    ]
)
def bcast(a: Memory[M, N, f16], row: Memory[N, f16], col: Memory[M, f16], out: Memory[M, N, f16]):
    wc.write(wc.read(a) * wc.read(row)[None, :] + wc.read(col)[:, None], out)


BCAST = r"""
CHECK-LABEL: func.func @bcast()
CHECK: %[[A:[0-9]+]] = hal.interface.binding.subspan {{.*}} binding(0)
CHECK-NEXT: %[[ROW:[0-9]+]] = hal.interface.binding.subspan {{.*}} binding(1) {{.*}} : memref<?xf16>
CHECK-NEXT: %[[COL:[0-9]+]] = hal.interface.binding.subspan {{.*}} binding(2) {{.*}} : memref<?xf16>
CHECK: vector.load %[[A]][{{.*}}]{{.*}} : memref<?x?xf16>, vector<8xf16>
CHECK: vector.load %[[A]][{{.*}}]{{.*}} : memref<?x?xf16>, vector<8xf16>
CHECK: vector.load %[[ROW]][%{{[0-9]+}}]{{.*}} : memref<?xf16>, vector<8xf16>
CHECK: %[[RB:[0-9]+]] = vector.shuffle %[[R:[0-9]+]], %[[R]] [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7] : vector<8xf16>, vector<8xf16>
CHECK-NEXT: %[[P:[0-9]+]] = arith.mulf %{{[0-9]+}}, %[[RB]] fastmath<contract> : vector<16xf16>
CHECK: vector.load %[[COL]][%{{[0-9]+}}]{{.*}} : memref<?xf16>, vector<2xf16>
CHECK: %[[CB:[0-9]+]] = vector.shuffle %[[C:[0-9]+]], %[[C]] [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1] : vector<2xf16>, vector<2xf16>
CHECK-NEXT: arith.addf %[[P]], %[[CB]] fastmath<contract> : vector<16xf16>
CHECK-COUNT-2: vector.store {{.*}} : memref<?x?xf16>, vector<8xf16>
"""


def test_broadcast_shuffles_when_a_thread_holds_several_rows() -> None:
    filecheck(mlir(bcast), BCAST)


@wc.wave(ROWWISE)
def scale_shift(a: Memory[M, N, f16], bias: Memory[N, f16], out: Memory[M, N, f16]):
    wc.write(wc.read(a) * 2.0 + wc.read(bias)[None, :], out)


SCALE_SHIFT = r"""
CHECK-LABEL: func.func @scale_shift()
CHECK: %[[CST:\w+]] = arith.constant dense<2.000000e+00> : vector<8xf16>
CHECK: vector.load %{{[0-9]+}}[%{{[0-9]+}}]{{.*}} : memref<?xf16>, vector<8xf16>
CHECK: %[[BIAS:[0-9]+]] = scf.if
CHECK: arith.addf %{{[0-9]+}}, %[[BIAS]] fastmath<contract> : vector<8xf16>
"""


def test_scale_shift_mlir_structure() -> None:
    text = mlir(scale_shift)
    filecheck(text, "CHECK: arith.mulf\nCHECK: vector.load {{.*}} : memref<?xf16>, vector<8xf16>\nCHECK: arith.addf")
    assert text.count("vector.store") == 2


def test_broadcast_without_replication_needs_no_shuffle() -> None:
    text = mlir(scale_shift)
    assert "vector.shuffle" not in text
    filecheck(text, SCALE_SHIFT)


# ----- f32 -> bf16: one packed conversion per pair on NVIDIA (IREE expands arith.truncf to bf16 in software) --


def _cast_bf16(threads: int) -> wc.WaveKernel:
    @wc.wave(ew_lib.rowwise_constraints(threads, 4))
    def cast_bf16(x: Memory[M, N, f32], out: Memory[M, N, wc.bf16]):
        wc.write(wc.cast(wc.read(x), wc.bf16), out)

    return cast_bf16


CAST_BF16_NV = r"""
CHECK-LABEL: func.func @cast_bf16()
CHECK: %[[E0:[0-9]+]] = vector.extract %[[X:[0-9]+]][0] : f32 from vector<4xf32>
CHECK-NEXT: %[[E1:[0-9]+]] = vector.extract %[[X]][1] : f32 from vector<4xf32>
CHECK-NEXT: %[[E2:[0-9]+]] = vector.extract %[[X]][2] : f32 from vector<4xf32>
CHECK-NEXT: %[[E3:[0-9]+]] = vector.extract %[[X]][3] : f32 from vector<4xf32>
CHECK-NEXT: %[[P0:[0-9]+]] = nvvm.convert.f32x2.to.bf16x2 %[[E1]], %[[E0]] rnd = <rn> : vector<2xbf16>
CHECK-NEXT: %[[W0:[0-9]+]] = vector.bitcast %[[P0]] : vector<2xbf16> to vector<1xi32>
CHECK: nvvm.convert.f32x2.to.bf16x2 %[[E3]], %[[E2]] rnd = <rn> : vector<2xbf16>
CHECK: %[[WS:[0-9]+]] = vector.from_elements %{{[0-9]+}}, %{{[0-9]+}} : vector<2xi32>
CHECK-NEXT: %{{[0-9]+}} = vector.bitcast %[[WS]] : vector<2xi32> to vector<4xbf16>
"""


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_90a"])
def test_cast_to_bf16_is_a_packed_conversion_on_nvidia(target: str) -> None:
    """``cvt.rn.bf16x2.f32 d, hi, lo`` per pair (element 2i in the low half); no arith.truncf to bf16."""
    text = mlir(_cast_bf16(32), ew_lib.DEFAULT_SUBS, target=target)
    filecheck(text, CAST_BF16_NV)
    assert "arith.truncf" not in text


def test_cast_to_bf16_stays_truncf_on_amd() -> None:
    text = mlir(_cast_bf16(64), {wc.sym.BLOCK_M: 4, wc.sym.BLOCK_N: 1024}, target="gfx942")
    filecheck(text, "CHECK: arith.truncf %{{[0-9]+}} : vector<4xf32> to vector<4xbf16>")
    assert "nvvm.convert" not in text
