"""Reductions (wc.max, wc.sum; the other kinds and dtypes: test_reductions_general.py) and softmax on the
emulator, NVIDIA and AMD waves, against torch."""

import pytest
import torch

import wavec as wc
from wavec import Memory
from wavec.errors import DTypeError
from wavec.kernels.row_softmax import BLOCK_M, N, make_softmax

M = wc.sym.M
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
TOL = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-6}


def _rel(out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16, wc.f32])
@pytest.mark.parametrize("target,tpw", [("sm_90", 32), ("gfx942", 64)])
@pytest.mark.parametrize("rows,n", [(9, 512), (1, 1024)])
def test_softmax(dtype, target, tpw, rows, n) -> None:
    k = wc.compile(make_softmax(dtype, tpw), {BLOCK_M: 4, N: n}, target=target, backend="emulator", cache=False)
    x = (torch.randn(rows, n) * 3).to(TORCH[dtype.name])
    out = torch.full_like(x, float("nan"))
    k(x, out)
    assert not out.isnan().any()
    assert _rel(out, torch.softmax(x.double(), dim=-1)) < TOL[dtype.name]


@pytest.mark.parametrize("waves_per_row", [2, 4])
@pytest.mark.parametrize("target,tpw", [("sm_90", 32), ("gfx942", 64)])
def test_softmax_with_several_waves_per_row(waves_per_row, target, tpw) -> None:
    n = tpw * 8 * waves_per_row
    k = wc.compile(
        make_softmax(wc.f16, tpw, waves_per_row), {BLOCK_M: 2, N: n}, target=target, backend="emulator", cache=False
    )
    assert k.mlir.count("gpu.barrier") == 4  # two reductions, each across waves through shared memory
    x = (torch.randn(5, n) * 3).half()
    out = torch.full_like(x, float("nan"))
    k(x, out)  # race checker on
    assert not out.isnan().any() and _rel(out, torch.softmax(x.double(), dim=-1)) < TOL["f16"]


def _row_reduce(kind: str, tpw: int = 32):
    cons = [
        wc.WorkgroupConstraint(M, 2, 0),
        wc.WorkgroupConstraint(N, N, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, N: tpw * 4}),
    ]
    op = wc.max if kind == "max" else wc.sum

    @wc.wave(cons)
    def row_reduce(x: Memory[M, N, wc.f32], out: Memory[M, wc.f32]):
        wc.write(op(wc.read(x), N), out)

    return row_reduce


@pytest.mark.parametrize("kind", ["max", "sum"])
def test_row_reductions(kind: str) -> None:
    k = wc.compile(_row_reduce(kind), {N: 256}, backend="emulator", cache=False)
    x = torch.randn(7, 256)
    out = torch.full((7,), float("nan"))
    k(x, out)
    ref = x.double().amax(-1) if kind == "max" else x.double().sum(-1)
    assert _rel(out, ref) < 1e-6


def test_butterfly_covers_exactly_the_lanes_of_the_row() -> None:
    mlir = wc.compile(make_softmax(), {BLOCK_M: 4, N: 1024}, target="sm_90", backend="cuda", cache=False).mlir
    # two reductions (max, sum), each over the 32 lanes of a row: xor 1, 2, 4, 8, 16
    assert mlir.count("gpu.shuffle  xor") + mlir.count("gpu.shuffle xor") == 10


def _split_rows(kind: str, tpw: int = 32):
    """Rows reduced by 2 x 2 waves: two along M, two along N (the partials meet in shared memory)."""
    cons = [
        wc.WorkgroupConstraint(M, 2, 0),
        wc.WorkgroupConstraint(N, 512, 1),
        wc.WaveConstraint(M, 1),
        wc.WaveConstraint(N, 256),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, N: 128}),
    ]
    op = wc.max if kind == "max" else wc.sum

    @wc.wave(cons)
    def split(x: Memory[M, N, wc.f32], out: Memory[M, N, wc.f32]):
        v = wc.read(x)
        wc.write(v - op(v, N)[:, None], out)

    return split


@pytest.mark.parametrize("kind", ["max", "sum"])
@pytest.mark.parametrize("target,tpw", [("sm_90", 32), ("gfx942", 64)])
def test_reduction_split_across_waves(kind: str, target: str, tpw: int) -> None:
    k = wc.compile(_split_rows(kind, tpw), {N: 512}, target=target, backend="emulator", cache=False)
    assert k.mlir.count("gpu.barrier") == 2 and "#gpu.address_space<workgroup>" in k.mlir
    x = torch.randn(5, 512)
    out = torch.full_like(x, float("nan"))
    k(x, out)  # the race checker is on: a missing barrier would raise
    red = x.double().amax(-1, keepdim=True) if kind == "max" else x.double().sum(-1, keepdim=True)
    assert _rel(out, x.double() - red) < 1e-6


def test_reduction_rejects_a_boolean_operand() -> None:
    cons = [
        wc.WorkgroupConstraint(M, 2, 0),
        wc.WorkgroupConstraint(N, N, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 128}),
    ]

    @wc.wave(cons)
    def bool_max(x: Memory[M, N, wc.f32], out: Memory[M, wc.f32]):
        wc.write(wc.max(wc.read(x) > 0.0, N), out)

    with pytest.raises(DTypeError, match="x must be one of f32, i32, i64, f16, bf16, got i1"):
        wc.compile(bool_max, {N: 256}, target="sm_90", backend="cuda", cache=False)
