"""wc.topk on the emulator against torch.topk on fresh random inputs: f32, i32, f16 and bf16 rows within one
wave (one or two instruction tiles) and split over two or four waves, 32- and 64-lane waves, k from 1 to
128, rows full of ties (the lower index first), NaN and infinities (NaN largest); every output written;
bad arguments name themselves."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import reduce_kernels as rk
from wavec.errors import ConstraintError, DTypeError, ShapeError

ROWS = 7


def _run(dtype: str, k: int, x: torch.Tensor, target: str = "sm_90", **shape) -> tuple[torch.Tensor, torch.Tensor]:
    kern = rk.make_topk(getattr(wc, dtype), **shape)
    emu = wc.compile(kern, {rk.N: x.shape[1], rk.K: k}, target=target, backend="emulator", cache=False)
    values = torch.full((ROWS, k), 99 if dtype == "i32" else 1e4, dtype=rk.TORCH[dtype])  # never a result
    indices = torch.full((ROWS, k), -1, dtype=torch.int32)
    emu(x, values, indices)
    return values, indices


SHAPES = {  # (target, waves_n, tiles per wave, threads per wave)
    "one_wave": ("sm_90", 1, 1, 32),
    "one_wave_two_tiles": ("sm_90", 1, 2, 32),
    "two_waves": ("sm_90", 2, 2, 32),
    "amd_two_waves": ("gfx942", 2, 1, 64),
}


@pytest.mark.parametrize("dtype", ["f32", "i32", "f16", "bf16"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_topk_distinct(dtype: str, shape: str) -> None:
    target, waves, tiles, tpw = SHAPES[shape]
    gen = torch.Generator().manual_seed(hash((dtype, shape)) % 1000)
    x = rk.random_values((ROWS, 512), dtype, gen, ties=False)
    values, indices = _run(dtype, 8, x, target, tpw=tpw, waves_n=waves, tiles=tiles)
    rk.check_topk(x, 8, values, indices)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_topk_ties(dtype: str, shape: str) -> None:
    """Few distinct values (many equal ones cross the k boundary): the lower index first."""
    target, waves, tiles, tpw = SHAPES[shape]
    gen = torch.Generator().manual_seed(hash((dtype, shape, "ties")) % 1000)
    x = rk.random_values((ROWS, 512), dtype, gen, ties=True)
    values, indices = _run(dtype, 16, x, target, tpw=tpw, waves_n=waves, tiles=tiles)
    rk.check_topk(x, 16, values, indices)


@pytest.mark.parametrize("shape", ["one_wave_two_tiles", "two_waves"])
def test_topk_nan_and_inf(shape: str) -> None:
    """NaN is larger than every number (the lower-indexed NaN first), then +inf; -inf last; -0.0 ties +0.0."""
    target, waves, tiles, tpw = SHAPES[shape]
    x = torch.randn(ROWS, 512, generator=torch.Generator().manual_seed(7))
    x[0, 300] = x[0, 7] = x[0, 450] = float("nan")
    x[1, 5] = x[1, 200] = float("inf")
    x[2] = float("-inf")
    x[2, 100] = 0.0
    x[3] = 0.0
    x[3, 3] = x[3, 9] = -0.0
    x[4, 511] = float("nan")
    values, indices = _run("f32", 4, x, target, tpw=tpw, waves_n=waves, tiles=tiles)
    rk.check_topk(x, 4, values, indices)
    assert indices[0, :3].tolist() == [7, 300, 450] and indices[3].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("k, waves", [(1, 2), (2, 1), (32, 4), (128, 4)])
def test_topk_k_range(k: int, waves: int) -> None:
    """k = 1 (argmax), and up to 128 over four waves (the merge sees 512 candidates)."""
    x = torch.randn(ROWS, 512, generator=torch.Generator().manual_seed(k))
    values, indices = _run("f32", k, x, tpw=32, waves_n=waves, tiles=2)
    rk.check_topk(x, k, values, indices)


def test_topk_rows_of_k() -> None:
    """k equal to the row: a full descending sort."""
    x = torch.randn(ROWS, 128, generator=torch.Generator().manual_seed(3))
    values, indices = _run("f32", 128, x, tpw=32, waves_n=1, tiles=1, n_tile=128)
    rk.check_topk(x, 128, values, indices)


def _bad(body, cons_extra=(), k: int = 8) -> None:
    M, N, K = rk.M, rk.N, rk.K
    cons = [wc.WorkgroupConstraint(M, 1, 0), wc.WorkgroupConstraint(N, 64, 1), *cons_extra]
    cons.append(wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 64}))

    @wc.wave(cons)
    def bad(x: wc.Memory[M, N, wc.f32], out: wc.Memory[M, K, wc.i32]):
        wc.write(body(wc.read(x)), out)

    wc.compile(bad, {N: 64, K: k}, backend="emulator", cache=False)


def test_bad_arguments_name_the_argument() -> None:
    K, N = rk.K, rk.N
    with_k = [wc.WorkgroupConstraint(K, K, None)]
    with pytest.raises(ShapeError, match="k_dim must be a new dimension symbol"):
        _bad(lambda v: wc.topk(v, N, N)[1], with_k)
    with pytest.raises(ShapeError, match="k_dim must be a new dimension symbol"):
        _bad(lambda v: wc.topk(v, 8, N)[1], with_k)
    with pytest.raises(ShapeError, match="dim Q is not a dimension"):
        _bad(lambda v: wc.topk(v, K, wc.sym.Q)[1], with_k)
    with pytest.raises(ConstraintError, match=r"needs WorkgroupConstraint\(K, K, None\)"):
        _bad(lambda v: wc.topk(v, K, N)[1])
    with pytest.raises(ConstraintError, match=r"k = K = 65 must be at most 128 and at most .* of N \(64\)"):
        _bad(lambda v: wc.topk(v, K, N)[1], with_k, k=65)


def test_bad_dtype_names_x() -> None:
    M, N, K = rk.M, rk.N, rk.K
    cons = [wc.WorkgroupConstraint(M, 1, 0), wc.WorkgroupConstraint(N, 64, 1), wc.WorkgroupConstraint(K, K, None)]
    cons.append(wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 64}))

    @wc.wave(cons)
    def bad(x: wc.Memory[M, N, wc.i64], out: wc.Memory[M, K, wc.i32]):
        wc.write(wc.topk(wc.read(x), K, N)[1], out)

    with pytest.raises(DTypeError, match="topk.*x must be one of f32, i32, f16, bf16, got i64"):
        wc.compile(bad, {N: 64, K: 8}, backend="emulator", cache=False)
