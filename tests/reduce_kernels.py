"""Kernels of the reductions, arg-reductions and scans (``wc.sum/max/min``, ``wc.argmax/argmin``,
``wc.scan``), shared by the emulator, binary and GPU tiers, and their torch references."""

from __future__ import annotations

import torch

import wavec as wc
from wavec import Memory

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
TORCH = {
    "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32, "i64": torch.int64,
}  # fmt: skip
REDUCE = {"sum": wc.sum, "max": wc.max, "min": wc.min}
ARG = {"argmax": wc.argmax, "argmin": wc.argmin}


def row_constraints(tpw: int = 32, waves_n: int = 2, n_tile: int = 512) -> list:
    """Two rows per workgroup, one per wave along M; ``waves_n`` waves split each row (partials meet in
    shared memory) and each wave's part of the row is two instruction tiles (a chain of partials)."""
    wave_n = n_tile // waves_n
    return [
        wc.WorkgroupConstraint(M, 2, 0),
        wc.WorkgroupConstraint(N, n_tile, 1),
        wc.WaveConstraint(M, 1),
        wc.WaveConstraint(N, wave_n),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, N: wave_n // 2}),
    ]


def make_reduce(kind: str, dtype, out_dtype=None, tpw: int = 32, waves_n: int = 2) -> wc.WaveKernel:
    """``out[m] = kind(x[m, :])`` (``out_dtype``: the result's dtype, default ``dtype``)."""
    res = out_dtype or dtype

    @wc.wave(row_constraints(tpw, waves_n))
    def reduce(x: Memory[M, N, dtype], out: Memory[M, res]):
        wc.write(REDUCE[kind](wc.read(x), N, dtype=out_dtype), out)

    return reduce


def make_arg(kind: str, dtype, tpw: int = 32, waves_n: int = 2) -> wc.WaveKernel:
    """``values[m], indices[m] = torch.max(x[m, :], 0)`` (or min)."""

    @wc.wave(row_constraints(tpw, waves_n))
    def arg(x: Memory[M, N, dtype], values: Memory[M, dtype], indices: Memory[M, wc.i32]):
        v, i = ARG[kind](wc.read(x), N)
        wc.write(v, values)
        wc.write(i, indices)

    return arg


def make_topk(dtype, tpw: int = 32, waves_n: int = 2, n_tile: int = 512, tiles: int = 2) -> wc.WaveKernel:
    """``values[m], indices[m] = torch.topk(x[m, :], K)`` with K bound in subs: rows of ``n_tile`` split
    over ``waves_n`` waves, each wave's part ``tiles`` instruction tiles."""
    wave_n = n_tile // waves_n
    cons = [
        wc.WorkgroupConstraint(M, 2, 0),
        wc.WorkgroupConstraint(N, n_tile, 1),
        wc.WorkgroupConstraint(K, K, None),
        wc.WaveConstraint(M, 1),
        *([wc.WaveConstraint(N, wave_n)] if waves_n > 1 else []),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, N: wave_n // tiles}),
    ]

    @wc.wave(cons)
    def topk(x: Memory[M, N, dtype], values: Memory[M, K, dtype], indices: Memory[M, K, wc.i32]):
        v, i = wc.topk(wc.read(x), K, N)
        wc.write(v, values)
        wc.write(i, indices)

    return topk


def make_topk_loop(dtype, tpw: int = 32, block: int = 64, tiles: int = 1) -> wc.WaveKernel:
    """``torch.topk(x[m, :], K)`` of rows walked in loop tiles of ``block`` (``tiles`` instruction tiles
    each), a wave per row: the running top-k carried through ``wc.iterate`` and merged with each tile's."""
    cons = [
        wc.WorkgroupConstraint(M, 2, 0),
        wc.WaveConstraint(M, 1),
        wc.TilingConstraint(N, block),
        wc.WorkgroupConstraint(K, K, None),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, N: block // tiles}),
    ]
    lowest = float("-inf") if dtype.is_float else -(2**31)

    @wc.wave(cons)
    def topk_rows(x: Memory[M, N, dtype], values: Memory[M, K, dtype], indices: Memory[M, K, wc.i32]):
        @wc.iterate(N, init_args=[wc.Register[M, K, dtype](lowest), wc.Register[M, K, wc.i32](-1)])
        def running(v: wc.Register[M, K, dtype], i: wc.Register[M, K, wc.i32]):
            return wc.topk(wc.read(x), K, N, carry=(v, i))

        wc.write(running[0], values)
        wc.write(running[1], indices)

    return topk_rows


def make_scan(kind: str, exclusive: bool, dtype, tpw: int = 32, waves: int = 1, tile: int = 256) -> wc.WaveKernel:
    """``y = scan(x)`` along N per workgroup tile: rows of [M, N] by one wave each (``waves`` = 1), or a
    1-D x split over ``waves`` waves (the carry crosses them in shared memory)."""
    if waves == 1:
        cons = [
            wc.WorkgroupConstraint(M, 2, 0),
            wc.WorkgroupConstraint(N, tile, 1),
            wc.WaveConstraint(M, 1),
            wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, N: tile}),
        ]

        @wc.wave(cons)
        def scan2(x: Memory[M, N, dtype], y: Memory[M, N, dtype]):
            wc.write(wc.scan(wc.read(x), N, kind, exclusive), y)

        return scan2
    cons = [
        wc.WorkgroupConstraint(N, tile, 0),
        wc.WaveConstraint(N, tile // waves),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={N: tile // waves}),
    ]

    @wc.wave(cons)
    def scan1(x: Memory[N, dtype], y: Memory[N, dtype]):
        wc.write(wc.scan(wc.read(x), N, kind, exclusive), y)

    return scan1


def random_values(shape: tuple, dtype: str, gen: torch.Generator, ties: bool = True) -> torch.Tensor:
    """Fresh values of ``dtype``; ``ties``: drawn from few distinct values, so rows hold repeats."""
    if dtype in ("i32", "i64"):
        hi = 8 if ties else 1 << 20
        return torch.randint(-hi, hi, shape, generator=gen).to(TORCH[dtype])
    x = torch.randn(shape, generator=gen) * 4
    return (x.round() if ties else x).to(TORCH[dtype])


def torch_reduce(kind: str, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    if kind == "sum":
        if x.is_floating_point():
            return x.double().sum(-1).to(out_dtype)
        return x.sum(-1).to(out_dtype)  # integers wrap in the result width
    return (x.amax(-1) if kind == "max" else x.amin(-1)).to(out_dtype)


def torch_scan(kind: str, exclusive: bool, x: torch.Tensor) -> torch.Tensor:
    """The scan along the last dim in float64 (floats) or the integer dtype."""
    xs = x.double() if x.is_floating_point() else x
    if kind == "add":
        incl = xs.cumsum(-1)
    else:
        incl = (xs.cummax(-1) if kind == "max" else xs.cummin(-1)).values
    if not exclusive:
        return incl
    if kind == "add":
        ident = 0
    elif x.is_floating_point():
        ident = float("-inf") if kind == "max" else float("inf")
    else:
        info = torch.iinfo(x.dtype)
        ident = info.min if kind == "max" else info.max
    first = torch.full_like(incl[..., :1], ident)
    return torch.cat([first, incl[..., :-1]], -1)


def check_topk(x: torch.Tensor, k: int, values: torch.Tensor, indices: torch.Tensor) -> None:
    """Values exactly torch's (NaN largest); each index holds its value; equal values take the lowest
    indices of the row, in order; where a value occurs once in its row, the index is torch's."""
    values, indices = values.to(x.device), indices.to(x.device)  # a GPU kernel's results beside CPU inputs
    ref = torch.topk(x.double(), k, -1)
    torch.testing.assert_close(values.double(), ref.values, rtol=0, atol=0, equal_nan=True)
    assert ((indices >= 0) & (indices < x.shape[1])).all(), "an index was not written"
    xd, vd = x.double(), values.double()
    torch.testing.assert_close(xd.gather(-1, indices.long()), vd, rtol=0, atol=0, equal_nan=True)
    for r in range(x.shape[0]):
        for val in torch.unique(vd[r]):

            def same(t: torch.Tensor) -> torch.Tensor:
                return t.isnan() if val.isnan() else t == val  # noqa: B023 - used within the iteration

            chosen, pool = indices[r][same(vd[r])], same(xd[r]).nonzero().flatten()
            assert torch.equal(chosen.long(), pool[: len(chosen)]), f"row {r}: ties of {val} not lowest-first"
            if len(pool) == 1:
                assert chosen.item() == ref.indices[r][same(ref.values[r])].item()
