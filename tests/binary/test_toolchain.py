"""The toolchain layer end to end: MLIR fixtures -> IREE (in-process) -> PTX / HSACO + metadata -> ptxas."""

from __future__ import annotations

import random
import re
import struct
from pathlib import Path

import pytest

pytest.importorskip("iree.compiler")

from wavec.codegen.binary import HEADER_BYTES, GpuBinary, parse_executable  # noqa: E402
from wavec.codegen.iree_compile import compile_hal_executable, compile_hal_executable_subprocess, last_compile_seconds  # noqa: E402
from wavec.codegen.ptxas import assemble, find_ptxas, parse_ptxas_verbose  # noqa: E402
from wavec.errors import CompileError, ToolchainError  # noqa: E402
from wavec.target import Target, get_target  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data"
NV_TARGETS = ["sm_80", "sm_90", "sm_90a"]
needs_ptxas = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas available")


def instantiate(fixture: str, target: Target, **fields: object) -> str:
    """Fill a ``.mlir.in`` template (plain replacement: MLIR text is full of braces)."""
    text = (DATA / fixture).read_text()
    values = {
        "target": target.attr_text(),
        "variant": target.variant_name,
        "subgroup_size": target.threads_per_wave,
        **fields,
    }
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    assert not re.search(r"\{[a-z_]+\}", text), "unfilled template field"
    return text


def compile_fixture(fixture: str, name: str, kernel: str, **fields: object) -> GpuBinary:
    target = get_target(name)
    blob = compile_hal_executable(instantiate(fixture, target, **fields), target, kernel=kernel)
    return parse_executable(blob, target.binary_format)


# --- copy kernel -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NV_TARGETS)
def test_copy_ptx(name: str) -> None:
    binary = compile_fixture("copy.mlir.in", name, "copy")
    assert binary.format == "ptx" and isinstance(binary.image, str)
    ptx = binary.image
    assert ".visible .entry copy(" in ptx
    assert re.search(r"\.maxntid 128, 1, 1", ptx)
    assert "ld.global" in ptx and "st.global" in ptx
    assert re.search(r"ld\.global\.nc\.v2\.b32", ptx), "the in-bounds path should be one 8-byte load"
    assert f".target {get_target(name).arch}" in ptx
    (export,) = binary.exports
    assert export.name == "copy" and export.block == (128, 1, 1)
    assert export.constant_count == 1 and export.binding_count == 2 and export.shared_bytes == 0
    # Kernel ABI: 2 pointers then 1 x b32 constant.
    assert len(re.findall(r"\.param \.u64", ptx)) == 2 and len(re.findall(r"\.param \.b32", ptx)) == 1


def test_copy_hsaco() -> None:
    binary = compile_fixture("copy.mlir.in", "gfx942", "copy")
    assert binary.format == "hsaco" and isinstance(binary.image, bytes)
    assert binary.image[:4] == b"\x7fELF"
    assert b"copy" in binary.image and b"gfx942" in binary.image
    (export,) = binary.exports
    assert export.name == "copy" and export.block == (128, 1, 1)
    assert export.constant_count == 1 and export.binding_count == 2


@needs_ptxas
@pytest.mark.parametrize("name", NV_TARGETS)
def test_ptxas_accepts_copy(name: str) -> None:
    binary = compile_fixture("copy.mlir.in", name, "copy")
    cubin, info = assemble(binary.image, get_target(name).arch)
    assert cubin[:4] == b"\x7fELF"
    assert info.spill_stores == 0 and info.spill_loads == 0 and info.stack_bytes == 0
    assert 0 < info.registers <= 64


def test_in_process_matches_subprocess() -> None:
    target = get_target("sm_80")
    text = instantiate("copy.mlir.in", target)
    a = parse_executable(compile_hal_executable(text, target, kernel="copy"), "ptx")
    b = parse_executable(compile_hal_executable_subprocess(text, target, kernel="copy"), "ptx")
    assert a.image == b.image and a.exports == b.exports


def test_in_process_compile_is_fast() -> None:
    target = get_target("sm_90")
    text = instantiate("copy.mlir.in", target)
    times = []
    for _ in range(3):
        compile_hal_executable(text, target, kernel="copy")
        times.append(last_compile_seconds())
    assert min(times) < 0.5, times  # measured ~45-65 ms; generous bound for loaded CI machines


def test_compile_error_carries_diagnostics() -> None:
    target = get_target("sm_80")
    text = instantiate("copy.mlir.in", target).replace("vector<4xf16>\n", "vector<4xf32>\n", 1)
    with pytest.raises(CompileError) as info:
        compile_hal_executable(text, target, kernel="copy")
    message = str(info.value)
    assert "compiling copy for sm_80 failed" in message and "error:" in message
    assert "copy.mlir:" in message  # the diagnostic points into the module


def test_dump_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WAVEC_DUMP_DIR", str(tmp_path))
    target = get_target("sm_90a")
    compile_hal_executable(instantiate("copy.mlir.in", target), target, kernel="copy")
    assert "hal.executable @copy_exe" in (tmp_path / "copy.sm_90a.mlir").read_text()
    assert ".entry copy" in (tmp_path / "copy.sm_90a.ptx").read_text()


# --- matrix instructions -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NV_TARGETS)
def test_mma_sync(name: str) -> None:
    binary = compile_fixture("mma_sync.mlir.in", name, "mma_16x8x16")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in binary.image
    assert "bar.sync" in binary.image and "__dynamic_shared_memory__" in binary.image
    (export,) = binary.exports
    assert export.name == "mma_16x8x16" and export.block == (32, 1, 1)
    assert export.shared_bytes == 512 and export.binding_count == 3 and export.constant_count == 0


@needs_ptxas
def test_ptxas_accepts_mma_sm80() -> None:
    binary = compile_fixture("mma_sync.mlir.in", "sm_80", "mma_16x8x16")
    _, info = assemble(binary.image, "sm_80")
    assert info.spill_stores == 0 and info.spill_loads == 0


@pytest.mark.parametrize(
    ("shape", "acc", "mnemonic"),
    [("16x16x16", 4, "v_mfma_f32_16x16x16_f16"), ("32x32x8", 16, "v_mfma_f32_32x32x8_f16")],
)
def test_mfma_gfx942(tmp_path, shape: str, acc: int, mnemonic: str) -> None:
    binary = compile_fixture("mfma.mlir.in", "gfx942", "mfma", shape=shape, acc=acc)
    assert binary.image[:4] == b"\x7fELF" and binary.exports[0].block == (64, 1, 1)
    # The HSACO carries no assembly text: check the instruction in IREE's intermediate dump.
    target = get_target("gfx942")
    compile_hal_executable_subprocess(
        instantiate("mfma.mlir.in", target, shape=shape, acc=acc),
        target,
        kernel="mfma",
        extra_flags=(f"--iree-hal-dump-executable-intermediates-to={tmp_path}",),
    )
    asm = next(tmp_path.glob("*.rocmasm")).read_text()
    assert mnemonic in asm


# --- the container parser ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cuda_blob() -> bytes:
    target = get_target("sm_80")
    return compile_hal_executable(instantiate("copy.mlir.in", target), target, kernel="copy")


def test_parse_header(cuda_blob: bytes) -> None:
    magic, version, size = struct.unpack_from("<4sIQ", cuda_blob)
    assert magic == b"CDA1" and version == 0 and size == len(cuda_blob) - HEADER_BYTES
    assert cuda_blob[HEADER_BYTES + 4 : HEADER_BYTES + 8] == b"CDA1"


@pytest.mark.parametrize("cut", [0, 10, HEADER_BYTES, HEADER_BYTES + 8, -1, -200])
def test_truncated_blob_raises(cuda_blob: bytes, cut: int) -> None:
    with pytest.raises(ToolchainError):
        parse_executable(cuda_blob[:cut], "ptx")


def test_wrong_format_raises(cuda_blob: bytes) -> None:
    with pytest.raises(ToolchainError, match="magic"):
        parse_executable(cuda_blob, "hsaco")
    with pytest.raises(ToolchainError, match="unknown binary format"):
        parse_executable(cuda_blob, "cubin")


def test_corrupt_offsets_raise(cuda_blob: bytes) -> None:
    blob = bytearray(cuda_blob)
    struct.pack_into("<I", blob, HEADER_BYTES, 0x7FFFFFF0)  # root table offset out of bounds
    with pytest.raises(ToolchainError):
        parse_executable(bytes(blob), "ptx")


def test_random_corruption_never_escapes(cuda_blob: bytes) -> None:
    """Flipped bytes give a ToolchainError or a parse; never IndexError/struct.error/etc."""
    rng = random.Random(0)
    for _ in range(500):
        blob = bytearray(cuda_blob)
        for _ in range(rng.randint(1, 4)):
            blob[rng.randrange(HEADER_BYTES, HEADER_BYTES + 0x100)] = rng.randrange(256)
        try:
            parse_executable(bytes(blob), "ptx")
        except ToolchainError:
            pass


def test_parse_ptxas_verbose() -> None:
    report = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_90a'
ptxas info    : Function properties for a
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 33024 bytes smem
ptxas info    : Compiling entry function 'b' for 'sm_90a'
ptxas info    : Function properties for b
    0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers
"""
    info = parse_ptxas_verbose(report)
    assert (info.registers, info.spill_stores, info.spill_loads) == (168, 12, 16)
    assert (info.shared_bytes, info.stack_bytes) == (33024, 16)


@needs_ptxas
def test_ptxas_error_message() -> None:
    with pytest.raises(ToolchainError, match="ptxas -arch=sm_80 failed"):
        assemble(".version 7.6\n.target sm_80\n.address_size 64\n.visible .entry k() { bogus; }\n", "sm_80")


def test_ptxas_knob(monkeypatch, tmp_path) -> None:
    from wavec.codegen.ptxas import _wheel_ptxas

    monkeypatch.setenv("WAVEC_PTXAS", str(tmp_path / "missing-ptxas"))
    with pytest.raises(ToolchainError, match="WAVEC_PTXAS"):
        find_ptxas()
    wheel = _wheel_ptxas()
    if wheel is None:
        pytest.skip("nvidia-cuda-nvcc-cu12 wheel not installed")
    monkeypatch.setenv("WAVEC_PTXAS", wheel)
    assert find_ptxas() == wheel
    # The wheel's ptxas (CUDA 12.9) must accept what IREE emits for sm_90a (.version 8.0).
    binary = compile_fixture("copy.mlir.in", "sm_90a", "copy")
    _, info = assemble(binary.image, "sm_90a")
    assert info.spill_stores == 0
