"""wc.sum / max / min over f32, i32, i64, f16 and bf16 (f32 accumulation), wc.argmax / argmin (ties and
NaN like torch) and wc.scan (add / max / min, inclusive and exclusive) on the emulator, NVIDIA (32 lanes)
and AMD (64 lanes) waves, against torch on fresh random inputs, every output element checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import reduce_kernels as rk
from wavec.errors import DTypeError, ShapeError

WAVES = [("sm_90", 32), ("gfx942", 64)]


def _emu(kernel, target: str = "sm_90"):
    return wc.compile(kernel, {rk.N: 512}, target=target, backend="emulator", cache=False)


def _sentinel(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, 77 if not dtype.is_floating_point else float("nan"), dtype=dtype)


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype", ["f32", "i32", "i64", "f16", "bf16"])
@pytest.mark.parametrize("target,tpw", WAVES)
def test_row_reduction(kind: str, dtype: str, target: str, tpw: int) -> None:
    """Rows of 512 over two waves (two chained tiles each): in-thread, butterfly, shared memory."""
    gen = torch.Generator().manual_seed(hash((kind, dtype, tpw)) % 1000)
    x = rk.random_values((7, 512), dtype, gen, ties=False)
    if dtype == "i32" and kind == "sum":
        x[0] = 1 << 30  # the sum wraps like torch's int32 sum
    out = _sentinel((7,), rk.TORCH[dtype])
    _emu(rk.make_reduce(kind, getattr(wc, dtype), tpw=tpw), target)(x, out)
    ref = rk.torch_reduce(kind, x, rk.TORCH[dtype])
    if dtype in ("i32", "i64") or kind != "sum":
        assert torch.equal(out, ref)
    else:  # f16/bf16 summed in f32 then rounded once: within one rounding of the exact sum
        tol = {"f32": 1e-5, "f16": 1e-3, "bf16": 8e-3}[dtype]
        torch.testing.assert_close(out.double(), ref.double(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_sum_accumulates_in_f32(dtype: str) -> None:
    """A row of 512 ones plus one 2048 (f16 has 11 significant bits): summed in f16 the ones would be lost."""
    x = torch.ones(4, 512, dtype=rk.TORCH[dtype])
    x[:, 0] = 2048
    out = _sentinel((4,), torch.float32)
    _emu(rk.make_reduce("sum", getattr(wc, dtype), wc.f32))(x, out)
    assert torch.equal(out, torch.full((4,), 2048.0 + 511.0))


def _with_specials(x: torch.Tensor) -> torch.Tensor:
    x[1, 100] = x[1, 300] = float("nan")  # the first NaN wins
    x[2, 5] = float("-inf")
    x[3, 400] = float("inf")
    x[4] = 0.0
    x[4, 7] = -0.0  # ties with +0.0: the first index
    x[5, 511] = float("nan")
    return x


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["f32", "i32", "f16", "bf16"])
@pytest.mark.parametrize("target,tpw", WAVES)
def test_arg_reduction(kind: str, dtype: str, target: str, tpw: int) -> None:
    gen = torch.Generator().manual_seed(hash((kind, dtype, tpw)) % 1000)
    x = rk.random_values((7, 512), dtype, gen)  # few distinct values: many ties
    if x.is_floating_point():
        x = _with_specials(x)
    values, indices = _sentinel((7,), rk.TORCH[dtype]), torch.full((7,), -1, dtype=torch.int32)
    _emu(rk.make_arg(kind, getattr(wc, dtype), tpw=tpw), target)(x, values, indices)
    want = x.max(-1) if kind == "argmax" else x.min(-1)
    assert torch.equal(indices, want.indices.int())
    torch.testing.assert_close(values, want.values, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("kind", ["add", "max", "min"])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "i32", "i64", "bf16"])
@pytest.mark.parametrize("waves", [1, 4])
def test_scan(kind: str, exclusive: bool, dtype: str, waves: int) -> None:
    gen = torch.Generator().manual_seed(hash((kind, exclusive, dtype, waves)) % 1000)
    shape = (3, 512) if waves == 1 else (512,)
    x = rk.random_values(shape, dtype, gen, ties=False)
    y = _sentinel(shape, rk.TORCH[dtype])
    _emu(rk.make_scan(kind, exclusive, getattr(wc, dtype), waves=waves))(x, y)
    tiles = x.reshape(-1, 2, 256)  # one scan per workgroup tile of 256
    ref = rk.torch_scan(kind, exclusive, tiles).reshape(shape)
    if kind == "add" and x.is_floating_point():
        tol = {"f32": 1e-5, "bf16": 8e-3}[dtype]
        torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol * 64)
    else:
        assert torch.equal(y, ref.to(y.dtype))


@pytest.mark.parametrize("target,tpw", WAVES)
def test_scan_on_amd_waves(target: str, tpw: int) -> None:
    x = torch.randint(-9, 10, (512,), dtype=torch.int32)
    y = _sentinel((512,), torch.int32)
    _emu(rk.make_scan("max", True, wc.i32, tpw=tpw, waves=2), target)(x, y)
    assert torch.equal(y, rk.torch_scan("max", True, x.reshape(2, 256)).reshape(512))


def test_exclusive_cumsum_is_cumsum_minus_x() -> None:
    cons = [wc.WorkgroupConstraint(rk.N, 128, 0), wc.WaveConstraint(rk.N, 128)]
    cons.append(wc.HardwareConstraint(threads_per_wave=32, vector_shapes={rk.N: 128}))

    @wc.wave(cons)
    def excl(x: wc.Memory[rk.N, wc.i32], y: wc.Memory[rk.N, wc.i32]):
        wc.write(wc.cumsum(wc.read(x), rk.N, exclusive=True), y)

    x = torch.randint(-50, 50, (256,), dtype=torch.int32)
    y = _sentinel((256,), torch.int32)
    wc.compile(excl, {}, backend="emulator", cache=False)(x, y)
    assert torch.equal(y, torch.cat([t.cumsum(0).int() - t for t in x.split(128)]))


def _row_scan_in_tiles(kind: str, dtype) -> wc.WaveKernel:
    """A scan of whole rows walked in loop tiles of BLOCK_N: each tile's scan combined with the prefix the
    loop carries (the running total or extreme of the tiles before), as a Wave or Triton author writes it."""
    M, N, BN = wc.sym.M, wc.sym.N, wc.sym.BLOCK_N
    cons = [wc.WorkgroupConstraint(M, 2, 0), wc.WaveConstraint(M, 1), wc.TilingConstraint(N, BN)]
    cons.append(wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: BN}))
    first = {"add": 0.0, "max": float("-inf")}[kind] if dtype == wc.f32 else {"add": 0, "max": -(2**31)}[kind]
    scan_combine, total = {"add": (lambda a, b: a + b, wc.sum), "max": (wc.maximum, wc.max)}[kind]

    @wc.wave(cons)
    def scan_rows(x: wc.Memory[M, N, dtype], y: wc.Memory[M, N, dtype]):
        @wc.iterate(N, init_args=[wc.Register[M, dtype](first)])
        def tiles(prefix: wc.Register[M, dtype]):
            v = wc.read(x)
            wc.write(scan_combine(wc.scan(v, N, kind), prefix[:, None]), y)
            return scan_combine(prefix, total(v, N))

    return scan_rows


@pytest.mark.parametrize("kind", ["add", "max"])
@pytest.mark.parametrize("dtype", ["f32", "i32"])
@pytest.mark.parametrize("n", [64, 256, 200])
def test_scan_across_loop_tiles_with_a_carried_prefix(kind: str, dtype: str, n: int) -> None:
    """Rows of 1-4 tiles of 64 (200: a ragged last tile, masked) against torch's cumsum / cummax."""
    gen = torch.Generator().manual_seed(n)
    x = rk.random_values((5, n), dtype, gen, ties=False)
    y = _sentinel((5, n), rk.TORCH[dtype])
    wc.compile(_row_scan_in_tiles(kind, getattr(wc, dtype)), {wc.sym.BLOCK_N: 64}, backend="emulator", cache=False)(
        x, y
    )
    want = x.double().cumsum(1) if kind == "add" else x.double().cummax(1).values
    if dtype == "f32" and kind == "add":
        torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-4)
    else:
        assert torch.equal(y.double(), want)


def _one_row(body) -> wc.WaveKernel:
    @wc.wave(rk.row_constraints())
    def k(x: wc.Memory[rk.M, rk.N, wc.i64], out: wc.Memory[rk.M, wc.i64]):
        body(wc.read(x))

    return k


@pytest.mark.parametrize(
    "body, error, match",
    [
        (lambda v: wc.argmax(v, rk.N), DTypeError, "argmax.*x must be one of f32, i32, f16, bf16, got i64"),
        (lambda v: wc.sum(v, rk.M, dtype=wc.f32), DTypeError, "dtype must be i64, got f32"),
        (lambda v: wc.scan(v, rk.N, "mul"), ShapeError, "combine must be one of"),
        (lambda v: wc.scan(v, rk.N, exclusive=1), ShapeError, "exclusive must be a bool"),
        (lambda v: wc.min(v, wc.sym.Q), ShapeError, "dim Q is not a dimension of"),
    ],
)
def test_bad_arguments_name_the_argument(body, error, match: str) -> None:
    with pytest.raises(error, match=match):
        _emu(_one_row(body))


def test_reduction_over_a_dim_split_across_workgroups_is_rejected() -> None:
    """N = 1024 over 512-element workgroup tiles: two workgroups would each write their half's result."""
    kernel = rk.make_reduce("sum", wc.f32)
    with pytest.raises(wc.WavecError, match=r"splits over 2 workgroups whose partial results never meet"):
        wc.compile(kernel, {rk.N: 1024}, backend="emulator", cache=False)
    wc.compile(kernel, {rk.N: 512}, backend="emulator", cache=False)  # one workgroup per row: fine
