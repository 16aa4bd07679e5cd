# ruff: noqa: E501  (check lines quote whole printed trace lines)
"""IR tier: the trace after named passes, checked FileCheck-style next to the kernel that produces it.

Each kernel here has its own constraint list (no shared-memory staging), so what the checks describe is
the documented meaning of inference and expansion (DESIGN §3, §4), not a library kernel's tuning.
"""

import pytest
from filecheck import filecheck
from kernel_fixtures import gemm_kernel

import wavec as wc
from wavec import Memory, f16
from wavec.frontend.constraints import ConstraintSet
from wavec.passes.context import PassContext
from wavec.passes.pipeline import PASS_NAMES, run_pipeline

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K


def after(kernel: wc.WaveKernel, names: list, subs: dict | None = None, target: str = "sm_90") -> dict:
    """Run the pipeline printing after ``names``; return {pass name: printed trace}."""
    printed: list[str] = []
    trace = kernel.trace()
    ctx = PassContext.build(trace, ConstraintSet(kernel.constraints, subs or {}), target)
    run_pipeline(trace, ctx, names, printer=printed.append)
    out = {}
    for text in printed:
        head, _, body = text.partition("\n")
        out[head.removeprefix("// ----- after ").removesuffix(" -----")] = body
    return out


# ----- GEMM: one wave, a 4x2 grid of m16n8k16 per K step ----------------------------------------------

GEMM_4x2 = [
    wc.WorkgroupConstraint(M, 64, 0),
    wc.WorkgroupConstraint(N, 16, 1),
    wc.WaveConstraint(M, 64),
    wc.WaveConstraint(N, 16),
    wc.TilingConstraint(K, BK),
    wc.SchedulingConstraint(promote_operands=False),
    wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_F32_16x8x16_F16),
]


gemm = gemm_kernel(GEMM_4x2)


GEMM_TRACE = r"""
CHECK: kernel gemm(a: [M, K] f16 global, b: [N, K] f16 global, c: [M, N] f32 global) {
CHECK: %[[ACC:register]] = register(, value=0.0) : [M, N] f32
CHECK-NEXT: %[[IT:iterate]] = iterate((%[[ACC]]), (%a, %b), dim=K, subgraph=iterate_0)
CHECK-NEXT: %[[RES:get_result]] = get_result(%[[IT]], index=0) : [M, N] f32
CHECK-NEXT: write(%[[RES]], %c)
CHECK-LABEL: region iterate_0 {
CHECK: %iter_arg_0 = iter_arg : [M, N] f32
CHECK: %[[A:read\w*]] = read(%capture_a) : [M, K] f16
CHECK: %[[B:read\w*]] = read(%capture_b) : [N, K] f16
CHECK-NEXT: %[[MMA:mma]] = mma(%[[A]], %[[B]], %iter_arg_0) : [M, N] f32
CHECK-NEXT: return (%[[MMA]])
"""


def test_gemm_after_trace() -> None:
    text = after(gemm, ["trace"], {BK: 16})["trace"]
    filecheck(text, GEMM_TRACE)
    assert "#layout" not in text


GEMM_INDICES = r"""
CHECK: %register = register(, value=0.0) : [M, N] f32  #layout {M: (64*$WAVE0 + 64*$WG0 + floor($LANE/4); 2x8) /16, N: (16*$WAVE1 + 16*$WG1 + 2*(Mod($LANE, 4)); 2x1) /8} order[M.0 N.0]
CHECK: %write = write(%get_result, %c)
CHECK-NOT: #layout
CHECK-LABEL: region iterate_0 {
CHECK: = read(%capture_a) : [M, K] f16  #layout {M: (64*$WAVE0 + 64*$WG0 + floor($LANE/4); 2x8) /16, K: (16*$ARG_K + 2*(Mod($LANE, 4)); 2x1, 2x8) /16} order[K.1 M.0 K.0]
CHECK: = read(%capture_b) : [N, K] f16  #layout {N: (16*$WAVE1 + 16*$WG1 + floor($LANE/4)) /8, K: (16*$ARG_K + 2*(Mod($LANE, 4)); 2x1, 2x8) /16} order[K.1 K.0]
CHECK: = mma({{.*}}) : [M, N] f32  #layout {M: (64*$WAVE0 + 64*$WG0 + floor($LANE/4); 2x8) /16, N: (16*$WAVE1 + 16*$WG1 + 2*(Mod($LANE, 4)); 2x1) /8} order[M.0 N.0]
"""


def test_gemm_after_infer_indices() -> None:
    filecheck(after(gemm, ["infer_indices"], {BK: 16})["infer_indices"], GEMM_INDICES)


GEMM_EXPAND = r"""
CHECK-COUNT-8: = register(, value=0.0) : [M, N] f32
CHECK: iterate((%register_m0_n0, %register_m0_n1, %register_m1_n0, %register_m1_n1, %register_m2_n0, %register_m2_n1, %register_m3_n0, %register_m3_n1), (%a, %b), dim=K, subgraph=iterate_0)
CHECK-COUNT-8: = get_result(%iterate, index={{[0-7]}})
CHECK-COUNT-8: = write(%get_result_m{{[0-3]}}_n{{[01]}}, %c)
CHECK-LABEL: region iterate_0 {
CHECK-COUNT-8: = iter_arg : [M, N] f32
CHECK: %[[A0:read_m0_k0]] = read(%capture_a) : [M, K] f16  #layout {M: ({{.*}}floor($LANE/4); 2x8) /16
CHECK-NEXT: %[[A1:read_m1_k0]] = read(%capture_a) : [M, K] f16  #layout {M: ({{.*}}floor($LANE/4) + 16; 2x8) /16
CHECK-NEXT: = read(%capture_a) : [M, K] f16  #layout {M: ({{.*}}floor($LANE/4) + 32; 2x8) /16
CHECK-NEXT: = read(%capture_a) : [M, K] f16  #layout {M: ({{.*}}floor($LANE/4) + 48; 2x8) /16
CHECK-NOT: read(%capture_a)
CHECK: %[[B0:read\w*_n0_k0]] = read(%capture_b) : [N, K] f16  #layout {N: ({{.*}}floor($LANE/4)) /8
CHECK-NEXT: %[[B1:read\w*_n1_k0]] = read(%capture_b) : [N, K] f16  #layout {N: ({{.*}}floor($LANE/4) + 8) /8
CHECK-NOT: = read(
CHECK: = mma(%[[A0]], %[[B0]], %iter_arg_0_m0_n0)
CHECK-NEXT: = mma(%[[A0]], %[[B1]], %iter_arg_0_m0_n1)
CHECK-NEXT: = mma(%[[A1]], %[[B0]], %iter_arg_0_m1_n0)
CHECK-NEXT: = mma(%[[A1]], %[[B1]], %iter_arg_0_m1_n1)
CHECK-COUNT-4: = mma(
CHECK-NOT: = mma(
CHECK: return (%mma_m0_n0_k0, %mma_m0_n1_k0, {{.*}}, %mma_m3_n1_k0)
"""


def test_gemm_after_expand_4x2_grid() -> None:
    filecheck(after(gemm, ["expand"], {BK: 16})["expand"], GEMM_EXPAND)


GEMM_EXPAND_K2 = r"""
CHECK-LABEL: region iterate_0 {
CHECK-COUNT-8: = read(%capture_a)
CHECK-COUNT-4: = read(%capture_b)
CHECK-NOT: = read(
CHECK: %[[K0:mma_m0_n0_k0]] = mma(%read_m0_k0, %[[B:read\w*]]_n0_k0, %iter_arg_0_m0_n0)
CHECK-NEXT: = mma(%read_m0_k0, %[[B]]_n1_k0, %iter_arg_0_m0_n1)
CHECK: %[[K1:mma_m0_n0_k1]] = mma(%read_m0_k1, %[[B]]_n0_k1, %[[K0]])
CHECK: return (%[[K1]], %mma_m0_n1_k1,
"""


def test_gemm_after_expand_chains_k() -> None:
    out = after(gemm, ["expand"], {BK: 32})["expand"]
    filecheck(out, GEMM_EXPAND_K2)
    # the K offset of the second K tile is 16 logical columns
    filecheck(
        out,
        "CHECK: %read_m0_k1 = read(%capture_a) : [M, K] f16  #layout {M: {{.*}}, "
        "K: (32*$ARG_K + 2*(Mod($LANE, 4)) + 16; 2x1, 2x8) /16}",
    )


# ----- AMD: the same body under a CDNA3 HardwareConstraint --------------------------------------------

GEMM_AMD = [
    wc.WorkgroupConstraint(M, 32, 0),
    wc.WorkgroupConstraint(N, 32, 1),
    wc.TilingConstraint(K, 16),
    wc.SchedulingConstraint(promote_operands=False),
    wc.HardwareConstraint(threads_per_wave=64, mma_type=wc.MMAType.F32_16x16x16_F16),
]
gemm_amd = wc.wave(GEMM_AMD)(gemm.fn)

GEMM_AMD_INDICES = r"""
CHECK-LABEL: region iterate_0 {
CHECK: = read(%capture_a) : [M, K] f16  #layout {M: (32*$WG0 + Mod($LANE, 16)) /16, K: (16*$ARG_K + 4*floor($LANE/16); 4x1) /16} order[K.0]
CHECK: = read(%capture_b) : [N, K] f16  #layout {N: (32*$WG1 + Mod($LANE, 16)) /16, K: (16*$ARG_K + 4*floor($LANE/16); 4x1) /16} order[K.0]
CHECK: = mma({{.*}}) : [M, N] f32  #layout {M: (32*$WG0 + 4*floor($LANE/16); 4x1) /16, N: (32*$WG1 + Mod($LANE, 16)) /16} order[M.0]
"""


def test_gemm_amd_after_infer_indices() -> None:
    out = after(gemm_amd, ["infer_indices", "expand"], target="gfx942")
    filecheck(out["infer_indices"], GEMM_AMD_INDICES)
    filecheck(
        out["expand"],
        "CHECK-LABEL: region iterate_0 {\nCHECK-COUNT-2: read(%capture_a)\n"
        "CHECK-COUNT-2: read(%capture_b)\nCHECK-COUNT-4: = mma(\nCHECK-NOT: = mma(",
    )


# ----- elementwise: defaults from vector_shapes, broadcast operands -----------------------------------

ROWWISE = [
    wc.WorkgroupConstraint(M, 4, 0),
    wc.WorkgroupConstraint(N, 512, 1),
    wc.WaveConstraint(M, 1),
    wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 256}),
]


@wc.wave(ROWWISE)
def scale_shift(a: Memory[M, N, f16], bias: Memory[N, f16], out: Memory[M, N, f16]):
    wc.write(wc.read(a) * 2.0 + wc.read(bias)[None, :], out)


SCALE_SHIFT_INDICES = r"""
CHECK: %[[A:read]] = read(%a) : [M, N] f16  #layout {M: ($WAVE0 + 4*$WG0) /1, N: (512*$WG1 + 8*(Mod($LANE, 32)); 8x1) /256} order[N.0]
CHECK-NEXT: = binary(%[[A]], 2.0, kind=mul) : [M, N] f16  #layout {M: ($WAVE0 + 4*$WG0) /1, N: (512*$WG1 + 8*(Mod($LANE, 32)); 8x1) /256}
CHECK-NEXT: = read(%bias) : [N] f16  #layout {N: (512*$WG1 + 8*(Mod($LANE, 32)); 8x1) /256} order[N.0]
CHECK-NEXT: = broadcast(%{{\w+}}, shape=(1, N)) : [1, N] f16  #layout {N: (512*$WG1 + 8*(Mod($LANE, 32)); 8x1) /256}
CHECK-NEXT: = binary({{.*}}, kind=add) : [M, N] f16  #layout {M: {{.*}}, N: {{.*}}}
CHECK-NEXT: = write(
"""

SCALE_SHIFT_EXPAND = r"""
CHECK-COUNT-2: = read(%a) : [M, N] f16
CHECK: %[[B0:read_1_n0]] = read(%bias) : [N] f16  #layout {N: (512*$WG1 + 8*(Mod($LANE, 32)); 8x1) /256}
CHECK-NEXT: %[[B1:read_1_n1]] = read(%bias) : [N] f16  #layout {N: (512*$WG1 + 8*(Mod($LANE, 32)) + 256; 8x1) /256}
CHECK-NOT: read(%bias)
CHECK: broadcast(%[[B0]], shape=(1, N))
CHECK-NEXT: broadcast(%[[B1]], shape=(1, N))
CHECK: %[[W0:write_m0_n0]] = write(%{{\w+}}, %out)  #layout {M: ($WAVE0 + 4*$WG0) /1, N: (512*$WG1 + 8*(Mod($LANE, 32)); 8x1) /256}
CHECK-NEXT: %[[W1:write_m0_n1]] = write(%{{\w+}}, %out)  #layout {M: ($WAVE0 + 4*$WG0) /1, N: (512*$WG1 + 8*(Mod($LANE, 32)) + 256; 8x1) /256}
CHECK-NOT: write(
"""


def test_scale_shift_after_infer_indices_and_expand() -> None:
    out = after(scale_shift, ["infer_indices", "expand"])
    filecheck(out["infer_indices"], SCALE_SHIFT_INDICES)
    filecheck(out["expand"], SCALE_SHIFT_EXPAND)


# ----- printing options -------------------------------------------------------------------------------


def test_print_all_prints_every_pass_in_order() -> None:
    printed: list[str] = []
    trace = gemm.trace()
    run_pipeline(
        trace,
        PassContext.build(trace, ConstraintSet(gemm.constraints, {BK: 16}), "sm_90"),
        ["all"],
        printer=printed.append,
    )
    text = "\n".join(printed)
    checks = "\n".join(f"CHECK-LABEL: // ----- after {name} -----" for name in ["trace", *PASS_NAMES])
    filecheck(text, checks)
    assert len(printed) == 1 + len(PASS_NAMES)


def test_print_only_named_passes() -> None:
    out = after(gemm, ["infer_types", "expand"], {BK: 16})
    assert list(out) == ["infer_types", "expand"]


@pytest.mark.parametrize("names", [["expnad"], ["expand", "lower_everything"], ["MLIR"]])
def test_unknown_pass_name_raises(names: list) -> None:
    bad = [n for n in names if n not in PASS_NAMES]
    with pytest.raises(ValueError, match="unknown pass") as info:
        after(gemm, names, {BK: 16})
    assert all(b in str(info.value) for b in bad)
    with pytest.raises(ValueError, match="unknown pass"):
        wc.compile(gemm, {BK: 16}, target="sm_90", backend="cuda", print_ir_after=names, cache=False)


def test_compile_prints_after_expand_to_stdout(capsys) -> None:
    wc.compile(gemm, {BK: 16}, target="sm_90", backend="cuda", print_ir_after=["expand"], cache=False)
    out = capsys.readouterr().out
    filecheck(
        out,
        "CHECK: // ----- after expand -----\nCHECK-NEXT: kernel gemm(\n"
        "CHECK-LABEL: region iterate_0 {\nCHECK-COUNT-8: = mma(",
    )
    assert "after infer_indices" not in out and "emitted MLIR" not in out


def test_compile_prints_mlir_to_stdout(capsys) -> None:
    k = wc.compile(gemm, {BK: 16}, target="sm_90", backend="cuda", print_ir_after=["mlir"], cache=False)
    out = capsys.readouterr().out
    filecheck(out, "CHECK: // ----- emitted MLIR -----\nCHECK: hal.executable public @gemm_exe\nCHECK: nvgpu.mma.sync")
    assert "after expand" not in out
    from iree.compiler import ir

    with ir.Context() as ctx:  # the artifact keeps the module with op locations; the printout is without
        ctx.load_all_available_dialects()
        assert str(ir.Module.parse(k.mlir)).strip() in out
    assert 'loc("' in k.mlir and 'loc("' not in out
