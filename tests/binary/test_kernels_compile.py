"""Binary tier: every kernel of ``wavec.kernels`` compiles to PTX (sm_80, sm_90), to a spill-free cubin
where ptxas exists, and to HSACO (gfx942); the same GEMM source retargets by its HardwareConstraint only.

``wc.compile`` assembles PTX with ptxas whenever one is found; to look at the PTX itself the tests hide
ptxas (``find_ptxas`` returning None is exactly the machine-without-ptxas path of ``compiler._build``).
"""

import functools
import re
import struct

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.frontend.constraints import HardwareConstraint
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm
from wavec.passes.printer import format_trace
from wavec.tuning.plan import DEFAULT_SUBS, MMA_FOR_TARGET

pytest.importorskip("iree.compiler")

ELF_MAGIC = b"\x7fELF"
EM_AMDGPU = 224
NV_TARGETS = ["sm_80", "sm_90"]
HAS_PTXAS = find_ptxas() is not None

MMA_F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
MMA_BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


def _elementwise_subs(threads: int) -> dict:
    # each lane moves 16 bytes: a wave covers threads * 8 f16; a workgroup tile of N holds two wave tiles
    return {**ew.DEFAULT_SUBS, ew.BLOCK_N: 2 * threads * 8}


# name -> (factory(threads_per_wave, mma_type), subs(threads), expected block size, mma instruction)
KERNELS = {
    "copy": (lambda t, _m: ew.make_copy(wc.f16, t), _elementwise_subs, 4, None),
    "scale_shift": (lambda t, _m: ew.make_scale_shift(wc.f16, t), _elementwise_subs, 4, None),
    "gemm_f16": (
        lambda t, m: gm.make_gemm(wc.f16, t, m or wc.MMAType.NV_F32_16x8x16_F16),
        lambda _t: DEFAULT_SUBS,
        4,
        MMA_F16,
    ),
    "gemm_bf16": (
        lambda t, m: gm.make_gemm(wc.bf16, t, m or wc.MMAType.NV_F32_16x8x16_BF16),
        lambda _t: DEFAULT_SUBS,
        4,
        MMA_BF16,
    ),
}
ENTRY = {"copy": "copy", "scale_shift": "scale_shift", "gemm_f16": "gemm", "gemm_bf16": "gemm"}


def _compile(name: str, target: str, mma=None, *, ptx: bool = False):
    factory, subs, _, _ = KERNELS[name]
    threads = 64 if target.startswith("gfx") else 32
    backend = "rocm" if target.startswith("gfx") else "cuda"
    kernel = factory(threads, mma)
    if not ptx:
        return wc.compile(kernel, subs(threads), target=target, backend=backend, cache=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        return wc.compile(kernel, subs(threads), target=target, backend=backend, cache=False)


@functools.cache
def ptx_of(name: str, target: str) -> tuple[str, object]:
    k = _compile(name, target, ptx=True)
    assert k.artifact.format == "ptx"
    return k.artifact.binary.decode(), k.metadata


# ----- PTX --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", NV_TARGETS)
@pytest.mark.parametrize("name", list(KERNELS))
def test_compiles_to_ptx(name: str, target: str) -> None:
    ptx, meta = ptx_of(name, target)
    _, _, waves, mma = KERNELS[name]
    entry = ENTRY[name]
    assert re.search(rf"^\.target {target}\b", ptx, re.M)
    m = re.search(rf"\.visible \.entry {entry}\((.*?)\)", ptx, re.S)
    assert m, f".entry {entry} missing"
    params = m.group(1)
    # kernel ABI: one pointer per binding, then one 32-bit value per dynamic symbol
    assert len(re.findall(r"\.param \.u64", params)) == len(meta.args)
    assert len(re.findall(r"\.param \.b32", params)) == len(meta.constants)
    assert re.search(rf"\.maxntid {waves * 32}, 1, 1\b", ptx)
    assert meta.block == (waves * 32, 1, 1)
    assert meta.entry == entry
    if mma is None:
        assert "mma.sync" not in ptx
    else:
        n = ptx.count(mma)
        other = MMA_BF16 if mma == MMA_F16 else MMA_F16
        # per wave: (64/2)/16 x (64/2)/8 tiles per K step, 32/16 K steps per loop iteration
        assert n >= 16 and n % 16 == 0, n
        assert other not in ptx
        # operands come from global memory (directly, or staged through shared memory with cp.async)
        assert re.search(r"ld\.global|cp\.async", ptx) and "st.global" in ptx


@pytest.mark.parametrize("target", NV_TARGETS)
def test_copy_ptx_uses_16_byte_accesses(target: str) -> None:
    ptx, _ = ptx_of("copy", target)
    assert not re.search(r"ld\.global(\.nc)?\.b16", ptx)
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.(b|u)32", ptx)) == 2
    assert len(re.findall(r"st\.global\.v4\.(b|u)32", ptx)) == 2


# ----- cubin ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize("target", NV_TARGETS)
@pytest.mark.parametrize("name", list(KERNELS))
def test_assembles_to_cubin_without_spills(name: str, target: str) -> None:
    k = _compile(name, target)
    art = k.artifact
    assert art.format == "cubin"
    assert art.binary[:4] == ELF_MAGIC
    assert art.metadata.spills == 0
    assert art.metadata.registers is not None and 0 < art.metadata.registers <= 255
    assert art.target == target


# ----- HSACO ------------------------------------------------------------------------------------------


def _check_hsaco(k, entry: str, block: int) -> None:
    art = k.artifact
    assert art.format == "hsaco"
    b = art.binary
    assert b[:4] == ELF_MAGIC
    assert b[4] == 2  # ELFCLASS64
    assert struct.unpack_from("<H", b, 18)[0] == EM_AMDGPU
    assert f"{entry}.kd".encode() in b  # the kernel descriptor symbol
    assert b"gfx942" in b
    assert art.metadata.block == (block, 1, 1)
    assert art.metadata.registers is None and art.metadata.spills is None


@pytest.mark.parametrize("name", ["copy", "scale_shift", "gemm_f16"])
def test_compiles_to_hsaco(name: str) -> None:
    mma = wc.MMAType.F32_16x16x16_F16 if name.startswith("gemm") else None
    _check_hsaco(_compile(name, "gfx942", mma), ENTRY[name], KERNELS[name][2] * 64)


def test_gemm_hsaco_32x32x8() -> None:
    k = _compile("gemm_f16", "gfx942", wc.MMAType.F32_32x32x8_F16)
    _check_hsaco(k, "gemm", 4 * 64)
    assert "amdgpu.mfma 32x32x8" in k.mlir and "amdgpu.mfma 16x16x16" not in k.mlir


def test_bf16_gemm_has_no_amd_mma_type() -> None:
    """No bf16 MFMA is described yet: the NVIDIA bf16 type cannot run on 64-wide waves."""
    with pytest.raises(wc.WavecError, match="threads"):
        gm.make_gemm(wc.bf16, 64, wc.MMAType.NV_F32_16x8x16_BF16)


# ----- retargeting ------------------------------------------------------------------------------------

RETARGET = [
    ("sm_80", 32, wc.MMAType.NV_F32_16x8x16_F16),
    ("sm_90", 32, wc.MMAType.NV_F32_16x8x16_F16),
    ("gfx942", 64, wc.MMAType.F32_16x16x16_F16),
]


def test_gemm_retargets_by_hardware_constraint_only() -> None:
    kernels = {t: gm.make_gemm(wc.f16, threads, mma) for t, threads, mma in RETARGET}
    # the library's own table agrees with what is used here
    for t, threads, mma in RETARGET:
        assert MMA_FOR_TARGET[t] == (threads, mma)
    codes = {t: k.fn.__code__ for t, k in kernels.items()}
    assert len({c.co_code for c in codes.values()}) == 1
    assert len({c.co_consts for c in codes.values()}) == 1
    # the constraint lists differ only in their HardwareConstraint
    rest = {t: [c for c in k.constraints if not isinstance(c, HardwareConstraint)] for t, k in kernels.items()}
    assert rest["sm_80"] == rest["sm_90"] == rest["gfx942"]
    hw = {t: next(c for c in k.constraints if isinstance(c, HardwareConstraint)) for t, k in kernels.items()}
    assert hw["sm_90"] != hw["gfx942"]
    # and the traced body is identical
    assert len({format_trace(k.trace()) for k in kernels.values()}) == 1

    outs = {}
    for t, _threads, _mma in RETARGET:
        backend = "rocm" if t == "gfx942" else "cuda"
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
            outs[t] = wc.compile(kernels[t], DEFAULT_SUBS, target=t, backend=backend, cache=False).artifact
    for t in ("sm_80", "sm_90"):
        assert outs[t].format == "ptx"
        ptx = outs[t].binary.decode()
        assert f".target {t}" in ptx and MMA_F16 in ptx and ".visible .entry gemm(" in ptx
        assert "nvgpu.mma.sync" in outs[t].mlir and "amdgpu" not in outs[t].mlir
    assert outs["gfx942"].format == "hsaco" and outs["gfx942"].binary[:4] == ELF_MAGIC
    assert "amdgpu.mfma 16x16x16" in outs["gfx942"].mlir and "nvgpu" not in outs["gfx942"].mlir
    assert outs["gfx942"].metadata.block == (256, 1, 1) and outs["sm_90"].metadata.block == (128, 1, 1)


# ----- f32 -> bf16 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", NV_TARGETS)
def test_cast_to_bf16_selects_the_packed_cvt(target: str) -> None:
    """``wc.cast(f32 -> bf16)``: one ``cvt.rn.bf16x2.f32`` per pair (PTX ISA 7.0, sm_80+), no integer
    rounding sequence; assembles when ptxas is available."""

    @wc.wave(ew.rowwise_constraints(32, 8))
    def cast_bf16(x: wc.Memory[wc.sym.M, wc.sym.N, wc.f32], out: wc.Memory[wc.sym.M, wc.sym.N, wc.bf16]):
        wc.write(wc.cast(wc.read(x), wc.bf16), out)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = wc.compile(cast_bf16, ew.DEFAULT_SUBS, target=target, backend="cuda", cache=False)
    ptx = k.artifact.binary.decode()
    assert ptx.count("cvt.rn.bf16x2.f32") == 8  # 2 wave tiles of 8 elements per lane: 8 pairs
    assert "setp.nan" not in ptx and "prmt" not in ptx
    if HAS_PTXAS:
        assert wc.compile(cast_bf16, ew.DEFAULT_SUBS, target=target, backend="cuda", cache=False).metadata.spills == 0
