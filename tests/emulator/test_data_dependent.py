"""Gathers, scatters, atomics and computed indices (DESIGN §12) on the emulator against torch, with fresh
random indices (repeats included) and every output element checked; out-of-bounds indices and races."""

from __future__ import annotations

import functools

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.errors import ArgumentError, EmulatorError, GlobalMemoryRaceError, OutOfBoundsError
from wavec.kernels import elementwise, indexing
from wavec.kernels.indexing import embedding, index_add_, index_select

pytestmark = pytest.mark.filterwarnings("ignore:index_reduce")  # torch marks the reference beta


@functools.cache
def _compiled(name: str, *args):
    make = getattr(dk, f"make_{name}")
    subs = dk.GEMM_SUBS if name == "gather_gemm" else {}
    kernel = make(dk.gemm_constraints()) if name == "gather_gemm" else make(*args)
    return wc.compile(kernel, subs, backend="emulator", cache=False)


@pytest.mark.parametrize("t, m", [(23, 40), (64, 64)])
def test_gather_gemm_scatters_weighted_rows(t: int, m: int) -> None:
    x = torch.randn(t, 64, dtype=torch.float16)
    ids = torch.randint(0, dk.TOP_K * t, (m,), dtype=torch.int32)
    b = torch.randn(48, 64, dtype=torch.float16)
    w = torch.rand(m)
    c = torch.randn(t, 48)
    want = dk.reference_gather_gemm(x, ids, b, w, c)
    _compiled("gather_gemm")(x, ids, b, w, c)
    torch.testing.assert_close(c, want, rtol=1e-4, atol=1e-3)


def test_paged_two_level_read() -> None:
    pages, s_len = 20, 70
    bt = torch.stack([torch.randperm(pages)[: (s_len + dk.PAGE - 1) // dk.PAGE] for _ in range(3)]).int()
    kc = torch.randn(pages * dk.PAGE, 64, dtype=torch.float16)
    out = torch.full((3, s_len, 64), float("nan"), dtype=torch.float16)
    _compiled("paged_read")(bt, kc, out)
    assert torch.equal(out, dk.reference_paged(bt, kc, s_len))


def test_computed_index_relative_bias() -> None:
    bias, x = torch.randn(2 * dk.R + 1), torch.randn(20, 70)
    out = torch.full_like(x, float("nan"))
    _compiled("relative_bias")(bias, x, out)
    assert torch.equal(out, dk.reference_relative_bias(bias, x))


@pytest.mark.parametrize("index_dtype", [wc.i32, wc.i64])
def test_scatter_rows(index_dtype) -> None:
    src = torch.randn(10, 132)
    idx = torch.randperm(20)[:10].to(index_dtype.torch())
    out = torch.full((20, 132), float("nan"))
    want = out.clone()
    want[idx.long()] = src
    _compiled("scatter", index_dtype)(src, idx, out)
    assert torch.equal(out.nan_to_num(7.0), want.nan_to_num(7.0))


@pytest.mark.parametrize("kind, dtype", [("add", wc.f32), ("add", wc.i32), ("min", wc.f32), ("max", wc.i32)])
def test_atomics_combine_repeated_indices(kind: str, dtype) -> None:
    td = dtype.torch()
    src = torch.randn(30, 132).to(td) if dtype.is_float else torch.randint(-99, 99, (30, 132), dtype=td)
    idx = torch.randint(0, 10, (30,), dtype=torch.int32)  # 30 rows into 5: every target repeats
    out = torch.randn(5, 132).to(td) if dtype.is_float else torch.randint(-99, 99, (5, 132), dtype=td)
    t = (idx // 2).long()
    if kind == "add":
        want = out.clone().index_add_(0, t, src)
    else:
        want = out.clone().index_reduce_(0, t, src, "amin" if kind == "min" else "amax")
    _compiled("atomic", kind, dtype)(src, idx, out)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


def test_library_index_select_embedding_index_add() -> None:
    x = torch.randn(50, 300, dtype=torch.bfloat16)  # 300: 4-element accesses
    i = torch.randint(0, 50, (33,))
    assert torch.equal(index_select(x, i, backend="emulator"), x[i])
    ids = torch.randint(0, 50, (3, 5), dtype=torch.int32)
    assert torch.equal(embedding(ids, x, backend="emulator"), torch.nn.functional.embedding(ids.long(), x))
    out, src, j = torch.randn(7, 256), torch.randn(20, 256), torch.randint(0, 7, (20,))
    want = out.clone().index_add_(0, j, src)
    torch.testing.assert_close(index_add_(out, j, src, backend="emulator"), want)


def test_out_of_bounds_index_is_named() -> None:
    x = torch.randn(50, 256, dtype=torch.float16)
    with pytest.raises(wc.WavecError, match=r"index 55 in dim 0 .*lane"):
        index_select(x, torch.tensor([0, 55, 3]), backend="emulator")
    with pytest.raises(wc.WavecError, match=r"index -1 in dim 0"):
        index_select(x, torch.tensor([-1]), backend="emulator")


def test_bad_index_arguments() -> None:
    x = torch.randn(50, 256, dtype=torch.float16)
    with pytest.raises(wc.WavecError, match="index must be a 1-D int32 or int64"):
        index_select(x, torch.zeros(3))
    with pytest.raises(wc.WavecError, match="out must be a 2-D tensor"):
        index_add_(torch.zeros(4, 8, dtype=torch.int32), torch.zeros(2, dtype=torch.int32), torch.zeros(2, 8))


ATOMIC_TARGETS = [("sm_80", 32), ("sm_90a", 32), ("gfx942", 64)]  # scalar red, vector red, memref.atomic_rmw


def _atomic_inputs(dtype, rows: int = 30, n: int = 132):
    td = dtype.torch()
    if dtype.is_float:
        return torch.randn(rows, n).to(td), torch.randn(5, n).to(td)
    return torch.randint(-99, 99, (rows, n), dtype=td), torch.randint(-99, 99, (5, n), dtype=td)


@pytest.mark.parametrize("target, tpw", ATOMIC_TARGETS)
@pytest.mark.parametrize(
    "kind, dtype",
    [("add", wc.f32), ("add", wc.f16), ("add", wc.bf16), ("add", wc.i32), ("max", wc.f32), ("min", wc.f16)]
    + [("max", wc.bf16)],
)
def test_atomics_exact_in_lane_order(kind: str, dtype, target: str, tpw: int) -> None:
    """Every target's lowering (inline red of f32 / f16x2 / bf16x2 words, vector red, memref.atomic_rmw)
    lands bit-exactly the sequential updates in lane order, one rounding per element update."""
    k = wc.compile(dk.make_atomic(kind, dtype, tpw), {}, target=target, backend="emulator", cache=False)
    src, out = _atomic_inputs(dtype)
    idx = torch.randint(0, 10, (30,), dtype=torch.int32)
    want, _old = dk.sequential_atomic(kind, out, (idx // 2).long(), src)
    k(src, idx, out)
    assert torch.equal(out, want)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(
    "kind, dtype", [("add", wc.i32), ("add", wc.f32), ("max", wc.i32), ("min", wc.f32), ("max", wc.f16)]
)
def test_atomic_results_are_the_old_values(kind: str, dtype, target: str) -> None:
    k = wc.compile(dk.make_atomic_old(kind, dtype), {}, target=target, backend="emulator", cache=False)
    if target == "sm_90a" and (kind, dtype) in (("add", wc.i32), ("add", wc.f32)):
        assert "atom.relaxed.gpu.global.add" in k.mlir and "red." not in k.mlir  # a used result: atom
    src, out = _atomic_inputs(dtype)
    idx = torch.randint(0, 10, (30,), dtype=torch.int32)
    want, want_old = dk.sequential_atomic(kind, out, (idx // 2).long(), src)
    old = torch.full_like(src, -7)
    k(src, idx, out, old)
    assert torch.equal(out, want) and torch.equal(old, want_old)


def test_scatter_race_names_lanes_and_line() -> None:
    """Two rows scattered to one row without an atomic: a race (same workgroup: lanes of two waves;
    different workgroups); distinct rows and atomics are not."""
    src, out = torch.randn(10, 132), torch.zeros(20, 132)
    k = _compiled("scatter", wc.i32)
    for dup, other in ((3, "lane 96 of workgroup (0, 0, 0)"), (9, "lane 32 of workgroup (2, 0, 0)")):
        idx = torch.arange(10, dtype=torch.int32)
        idx[dup] = 1
        with pytest.raises(GlobalMemoryRaceError, match=r"dyn_kernels\.py:\d+\) in lane") as info:
            k(src, idx, out)
        text = str(info.value)
        assert "at element [1, 0] of binding 2" in text and "lane 32 of workgroup (0, 0, 0)" in text, text
        assert other in text, text
    k(src, torch.randperm(20)[:10].int(), out)  # distinct rows: no report
    _compiled("atomic", "add", wc.f32)(src, torch.zeros(10, dtype=torch.int32), torch.zeros(5, 132))


def test_out_of_bounds_names_kernel_line_index_and_bound(monkeypatch) -> None:
    """The emulator's own check, and the compiled WAVEC_CHECK_BOUNDS record: one error class, the kernel
    line of the access, the index, the bound and the lane; masked-out lanes are never reported."""
    x = torch.randn(50, 256, dtype=torch.float16)
    line = r"indexing\.py:\d+: wc\.write\(wc\.read\(x, mapping=\{T: wc\.read\(index\)\}\), out\)"
    with pytest.raises(OutOfBoundsError, match=rf"(?s){line}.*index 55 in dim 0 \(size 50\) by lane 32"):
        index_select(x, torch.tensor([0, 55, 3]), backend="emulator")
    out, src = torch.zeros(7, 256), torch.randn(3, 256)
    with pytest.raises(OutOfBoundsError, match=r"(?s)wc\.scatter_add.*memref\.subview.*index 9 in dim 0 \(size 7\)"):
        index_add_(out, torch.tensor([1, 9, 2]), src, backend="emulator")
    monkeypatch.setenv("WAVEC_CHECK_BOUNDS", "1")
    subs = {elementwise.BLOCK_M: 4, elementwise.BLOCK_N: 256}
    checked = wc.compile(indexing.make_index_select(wc.f16, wc.i64, 8), subs, backend="emulator", cache=False)
    assert checked.artifact.metadata.bounds_checks
    y = torch.full((3, 256), float("nan"), dtype=torch.float16)
    with pytest.raises(
        OutOfBoundsError, match=rf"(?s){line}.*wc\.read: .* to x: index -4 in dim T \(size 50\) by lane 64"
    ):
        checked(x, torch.tensor([0, 2, -4]), y)
    assert torch.equal(y[:2], x[[0, 2]]) and torch.equal(y[2], torch.zeros(256, dtype=torch.float16))
    checked(x, torch.tensor([49, 0, 7]), y)  # three rows of a four-row tile: the masked fourth never reports
    assert torch.equal(y, x[[49, 0, 7]])


def test_index_tensor_dtype_and_device_are_argument_errors() -> None:
    k = _compiled("scatter", wc.i32)
    src, out = torch.randn(10, 132), torch.zeros(20, 132)
    with pytest.raises(ArgumentError, match=r"argument 'idx': expected dtype i32 .* got torch\.int64"):
        k(src, torch.arange(10), out)
    with pytest.raises(ArgumentError, match=r"argument 'idx': expected a CPU tensor, got one on meta"):
        k(src, torch.empty(10, dtype=torch.int32, device="meta"), out)


def test_inline_ptx_is_parsed_strictly() -> None:
    from wavec.emulator import EmulatedKernel

    k = wc.compile(dk.make_atomic("add", wc.f32), {}, target="sm_90a", backend="emulator", cache=False)
    assert "red.relaxed.gpu.global.add.v4.f32" in k.mlir
    for bad in ("red.release.gpu.global.add.v4.f32", "red.relaxed.gpu.global.add.v4.s32"):
        with pytest.raises(EmulatorError, match="unsupported inline PTX"):
            EmulatedKernel(k.mlir.replace("red.relaxed.gpu.global.add.v4.f32", bad), k.artifact.metadata.entry)


def test_gathered_rows_gemm_writes_every_row() -> None:
    kernel = wc.compile(dk.make_gathered_rows_gemm(dk.gemm_constraints()), dk.GEMM_SUBS, backend="emulator")
    x, b = torch.randn(40, 64, dtype=torch.float16), torch.randn(32, 64, dtype=torch.float16)
    ids = torch.randperm(dk.TOP_K * 40)[:64].int()
    c = torch.full((64, 32), float("nan"))
    kernel(x, ids, b, c)
    want = x[(ids // dk.TOP_K).long()].double() @ b.double().T
    torch.testing.assert_close(c.double(), want, rtol=1e-3, atol=1e-3)
