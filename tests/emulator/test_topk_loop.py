"""wc.topk of rows walked in loop tiles (``carry=``: the running top-k merged with each tile's) on the
emulator against torch.topk on fresh random inputs: f32, i32, f16, bf16; k in {1, 8, 64, 128} (k above
the tile); rows not a multiple of the tile (a masked last tile); ties (integer-valued floats) and NaN;
32- and 64-lane waves, one or two instruction tiles per loop tile; every output written; a bad carry
names itself."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import reduce_kernels as rk
from wavec.errors import ConstraintError, DTypeError, ShapeError

ROWS = 5  # two rows per workgroup: the last workgroup's second row is masked


def _run(dtype: str, k: int, x: torch.Tensor, target: str = "sm_90", **shape) -> tuple[torch.Tensor, torch.Tensor]:
    kern = rk.make_topk_loop(getattr(wc, dtype), **shape)
    emu = wc.compile(kern, {rk.N: x.shape[1], rk.K: k}, target=target, backend="emulator", cache=False)
    values = torch.full((ROWS, k), 99 if dtype == "i32" else 1e4, dtype=rk.TORCH[dtype])  # never a result
    indices = torch.full((ROWS, k), -7, dtype=torch.int32)
    emu(x, values, indices)
    return values, indices


def _fresh(dtype: str, n: int, ties: bool, seed) -> torch.Tensor:
    return rk.random_values((ROWS, n), dtype, torch.Generator().manual_seed(hash(seed) % 10000), ties=ties)


@pytest.mark.parametrize("dtype", ["f32", "i32", "f16", "bf16"])
@pytest.mark.parametrize("k, n", [(1, 200), (8, 200), (64, 256), (128, 300), (20, 130), (100, 333)])
def test_running_topk(dtype: str, k: int, n: int) -> None:
    """Loop tiles of 64: k = 100 and 128 span two tiles; 130, 200, 300 and 333 end in a partial tile;
    k = 20 and 100 are no power of two (the merge pads)."""
    x = _fresh(dtype, n, ties=False, seed=(dtype, k, n))
    values, indices = _run(dtype, k, x)
    rk.check_topk(x, k, values, indices)


@pytest.mark.parametrize("dtype", ["f32", "i32", "f16", "bf16"])
@pytest.mark.parametrize("k", [8, 64])
def test_running_topk_ties(dtype: str, k: int) -> None:
    """Few distinct values, so equal values cross tiles and the k boundary: the lower index first."""
    x = _fresh(dtype, 333, ties=True, seed=(dtype, k, "ties"))
    values, indices = _run(dtype, k, x)
    rk.check_topk(x, k, values, indices)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_running_topk_nan_inf_and_negative_rows(dtype: str) -> None:
    """NaN largest (the lower-indexed first, in different tiles), -inf rows (the init's -inf and index -1
    lose to them), rows of negatives only (the masked tail's padding never wins)."""
    x = _fresh(dtype, 150, ties=True, seed="nan")
    x[0, 140] = x[0, 3] = x[0, 70] = float("nan")
    x[1] = float("-inf")
    x[1, 149] = 1.0
    x[2] = -x[2].abs() - 1
    x[3, 64:] = float("inf")
    values, indices = _run(dtype, 8, x)
    rk.check_topk(x, 8, values, indices)
    assert indices[0, :3].tolist() == [3, 70, 140] and indices[1, :3].tolist() == [149, 0, 1]


@pytest.mark.parametrize("target, tpw, tiles", [("sm_90", 32, 2), ("gfx942", 64, 1), ("gfx942", 64, 2)])
def test_running_topk_lanes_and_tiles(target: str, tpw: int, tiles: int) -> None:
    x = _fresh("f32", 250, ties=True, seed=(target, tpw, tiles))
    values, indices = _run("f32", 16, x, target, tpw=tpw, block=128, tiles=tiles)
    rk.check_topk(x, 16, values, indices)


def test_k_above_the_row_needs_the_carry() -> None:
    """Without carry, k may not exceed the loop tile (the tile's winners would be too few)."""
    M, N, K = rk.M, rk.N, rk.K
    cons = [wc.WorkgroupConstraint(M, 1, 0), wc.TilingConstraint(N, 64), wc.WorkgroupConstraint(K, K, None)]
    cons.append(wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 64}))

    @wc.wave(cons)
    def tile_only(x: wc.Memory[M, N, wc.f32], out: wc.Memory[M, K, wc.i32]):
        @wc.iterate(N, init_args=[wc.Register[M, K, wc.i32](0)])
        def loop(i: wc.Register[M, K, wc.i32]):
            return wc.topk(wc.read(x), K, N)[1]

        wc.write(loop, out)

    with pytest.raises(ConstraintError, match="a row walked in loop tiles takes carry"):
        wc.compile(tile_only, {N: 256, K: 65}, backend="emulator", cache=False)


def _bad_carry(carry) -> None:
    M, N, K = rk.M, rk.N, rk.K
    cons = [wc.WorkgroupConstraint(M, 1, 0), wc.TilingConstraint(N, 64), wc.WorkgroupConstraint(K, K, None)]
    cons.append(wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 64}))

    @wc.wave(cons)
    def bad(x: wc.Memory[M, N, wc.f16], out: wc.Memory[M, K, wc.i32]):
        @wc.iterate(N, init_args=[wc.Register[M, K, wc.f16](0.0), wc.Register[M, K, wc.i32](-1)])
        def loop(v: wc.Register[M, K, wc.f16], i: wc.Register[M, K, wc.i32]):
            return wc.topk(wc.read(x), K, N, carry=carry(v, i))

        wc.write(loop[1], out)

    wc.compile(bad, {N: 256, K: 8}, backend="emulator", cache=False)


def test_bad_carry_names_itself() -> None:
    with pytest.raises(ShapeError, match=r"carry must be a \(values, indices\) pair"):
        _bad_carry(lambda v, i: (v,))
    with pytest.raises(DTypeError, match="carry values must be f16, got f32"):
        _bad_carry(lambda v, i: (wc.cast(v, wc.f32), i))
    with pytest.raises(DTypeError, match="carry indices must be i32, got f16"):
        _bad_carry(lambda v, i: (v, v))
    with pytest.raises(ShapeError, match=r"carry values must have shape \[K\], got \[\]"):
        _bad_carry(lambda v, i: (wc.max(v, rk.K), i))
