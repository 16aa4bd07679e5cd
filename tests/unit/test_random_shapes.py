"""Random shapes and random tile configurations against torch, on the CPU emulator (hypothesis).

Every example draws a legal tile configuration and a few shapes, including 1 and primes.  The random-tile
tests keep the contiguous (last) dimension of each memory a multiple of the 16-byte vector run (``K % 8``
for the f16 GEMM inputs, ``N % 2`` for its f32 output, ``N % 4`` / ``N % 8`` for the f32 / f16 elementwise
kernel: the wide kernel); the ``misaligned`` tests draw any size (the launch runs the narrow variant);
every other dimension is free and the tiles it does not divide are masked.

Each output is poisoned with NaN and lives at the front of a larger NaN buffer, so the test checks that the
kernel writes every output element and nothing past the end; the inputs must be left unchanged.

One compiled kernel serves every shape of its configuration (M, N, K are dynamic), so kernels are kept in a
module-level table and an example runs several shapes through one compile; the time goes to shapes.
Budget: about 30 s on a 2-core machine (compile ~0.5 s per configuration, emulation ~0.05-0.3 s per shape).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wavec as wc
from wavec.kernels.elementwise import make_scale_shift
from wavec.kernels.gemm import BLOCK_K, BLOCK_M, BLOCK_N, GROUP_M, NUM_STAGES, make_gemm

EW_BLOCK_M, EW_BLOCK_N = wc.sym.BLOCK_M, wc.sym.BLOCK_N

# Hypothesis keeps no example database (nothing is written into the checkout); a failure prints the
# falsifying example and a @reproduce_failure blob.  The autouse cache fixture of conftest.py is
# function-scoped; sharing its directory across the examples of one test is harmless.
SETTINGS = dict(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# 1, primes, powers of two and their neighbours.
SPECIAL = [1, 2, 3, 5, 7, 13, 31, 64, 97, 100, 128, 131]


def free_dim(hi: int = 160) -> st.SearchStrategy[int]:
    """A dimension with no divisibility requirement (masked where the tile does not divide it)."""
    return st.one_of(st.sampled_from(SPECIAL), st.integers(1, hi))


def run_dim(run: int, max_runs: int = 33) -> st.SearchStrategy[int]:
    """A contiguous dimension: ``run`` times 1, a prime, or any count of runs."""
    return st.one_of(st.sampled_from([x for x in SPECIAL if x <= max_runs]), st.integers(1, max_runs)).map(
        lambda x: x * run
    )


def poisoned(shape: tuple[int, ...], dtype: torch.dtype, guard: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """(output view, whole buffer): a NaN output at the front of a NaN buffer with ``guard`` spare elements."""
    n = 1
    for s in shape:
        n *= s
    buf = torch.full((n + guard,), float("nan"), dtype=dtype)
    return buf[:n].view(shape), buf


def check_written(out: torch.Tensor, buf: torch.Tensor) -> None:
    assert not out.isnan().any(), f"{int(out.isnan().sum())} of {out.numel()} output elements never written"
    assert buf[out.numel() :].isnan().all(), "the kernel wrote past the end of its output"


# ----------------------------------------------------------------------------------------------- GEMM

MMA_M, MMA_N, MMA_K = 16, 8, 16  # NV_F32_16x8x16_F16


def _copy_threads_exceed_tile(bm: int, bn: int, waves: tuple[int, int], bk: int) -> bool:
    """True when the workgroup has more threads than 16-byte runs in the A or B tile of one K step.

    Until c5a252f, ``copy_layout`` (wavec/passes/infer_indices.py) wrapped thread ids with ``Mod`` there, so
    several threads copied the same run into shared memory and the emulator reported a shared-memory race;
    now the runs get shorter.  ``test_gemm_more_threads_than_tile_runs`` keeps a few of them as regressions.
    """
    threads = 32 * waves[0] * waves[1]
    runs_per_row = bk // 8
    rows = threads // runs_per_row
    return rows > bm or rows > bn


def _gemm_configs() -> list[tuple]:
    """Every legal (BLOCK_M, BLOCK_N, waves, BLOCK_K): the wave tile is a multiple of the 16x8 MMA tile."""
    out = []
    for bm, bn, wm, wn, bk in itertools.product(
        [16, 32, 64, 128], [16, 32, 64, 128], [1, 2, 4], [1, 2, 4], [16, 32, 64]
    ):
        if bm % (wm * MMA_M) or bn % (wn * MMA_N) or bk % MMA_K:
            continue
        out.append((bm, bn, (wm, wn), bk))
    return out


GEMM_CONFIGS = _gemm_configs()
SMALL_TILE_CONFIGS = [c for c in GEMM_CONFIGS if _copy_threads_exceed_tile(*c)]
_GEMM_KERNELS: dict[tuple, object] = {}


def gemm_kernel(bm: int, bn: int, waves: tuple[int, int], bk: int, stages: int, group: int):
    key = (bm, bn, waves, bk, stages, group)
    k = _GEMM_KERNELS.get(key)
    if k is None:
        subs = {BLOCK_M: bm, BLOCK_N: bn, BLOCK_K: bk, NUM_STAGES: stages, GROUP_M: group}
        k = _GEMM_KERNELS[key] = wc.compile(make_gemm(wc.f16, waves=waves), subs, backend="emulator")
    return k


def run_gemm(kernel, m: int, n: int, k: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).half()
    b = torch.randn(n, k, generator=g).half()
    a0, b0 = a.clone(), b.clone()
    c, buf = poisoned((m, n), torch.float32)
    kernel(a, b, c)
    check_written(c, buf)
    assert torch.equal(a, a0) and torch.equal(b, b0), "an input was modified"
    ref = (a.double() @ b.double().T).float()
    torch.testing.assert_close(c, ref, rtol=1e-4, atol=1e-4 * max(1, k) ** 0.5, msg=lambda s: f"gemm {m}x{n}x{k}: {s}")


gemm_shape = st.tuples(free_dim(), run_dim(2, 80), run_dim(8, 24))  # M, N (f32 out: N % 2), K (f16: K % 8)


@settings(max_examples=25, **SETTINGS)
@given(
    config=st.sampled_from(GEMM_CONFIGS),
    stages=st.integers(1, 3),
    group=st.integers(1, 4),
    shapes=st.lists(gemm_shape, min_size=2, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_gemm_random_shapes_and_tiles(config, stages, group, shapes, seed) -> None:
    kernel = gemm_kernel(*config, stages, group)
    for i, (m, n, k) in enumerate(shapes):
        run_gemm(kernel, m, n, k, seed + i)


@pytest.mark.parametrize("m,n,k", [(1, 2, 8), (1, 262, 8), (131, 2, 136), (97, 194, 104), (128, 128, 128)])
def test_gemm_edge_shapes(m, n, k) -> None:
    """Fixed corners that the random draw may miss: a single row / column, one K run, exact tiles."""
    run_gemm(gemm_kernel(64, 64, (2, 2), 32, 2, 4), m, n, k, seed=m + n + k)


@settings(max_examples=15, **SETTINGS)
@given(m=free_dim(), n=free_dim(), k=free_dim())
def test_gemm_misaligned_contiguous_dims(m, n, k) -> None:
    """Any K and N: the wide kernel where K % 8 == N % 2 == 0, else the narrow variant for them."""
    kernel = gemm_kernel(64, 64, (2, 2), 32, 2, 4)
    run_gemm(kernel, m, n, k, seed=m * 7919 + n * 31 + k)


@pytest.mark.parametrize(
    "config",
    [(32, 32, (2, 2), 16), (16, 16, (1, 2), 16), (64, 16, (2, 1), 16), (128, 32, (4, 2), 16), (16, 128, (1, 4), 32)],
    ids=str,
)
@pytest.mark.parametrize("stages", [1, 2])
def test_gemm_more_threads_than_tile_runs(config, stages) -> None:
    """Regression (fixed in c5a252f): more threads than 16-byte runs in an operand tile made duplicate copies
    that raced in shared memory (SharedMemoryRaceError on the emulator)."""
    assert config in SMALL_TILE_CONFIGS
    for m, n, k in [(33, 34, 48), (1, 130, 40)]:
        run_gemm(gemm_kernel(*config, stages, 1), m, n, k, seed=m)


# ----------------------------------------------------------------------------------------- elementwise

EW_DTYPES = {"f32": (wc.f32, torch.float32), "f16": (wc.f16, torch.float16)}
_EW_KERNELS: dict[tuple, object] = {}


def ew_kernel(dtype: str, bm: int, bn: int):
    key = (dtype, bm, bn)
    k = _EW_KERNELS.get(key)
    if k is None:
        k = _EW_KERNELS[key] = wc.compile(
            make_scale_shift(EW_DTYPES[dtype][0]), {EW_BLOCK_M: bm, EW_BLOCK_N: bn}, backend="emulator"
        )
    return k


@st.composite
def ew_case(draw):
    dtype = draw(st.sampled_from(sorted(EW_DTYPES)))
    run = 16 // EW_DTYPES[dtype][1].itemsize  # elements per 16-byte run along N
    wave_n = 32 * run  # one wave covers 32 runs of a row
    bm = draw(st.sampled_from([1, 2, 4, 8]))  # one wave per row of the tile
    bn = wave_n * draw(st.sampled_from([1, 2, 4]))
    shapes = draw(st.lists(st.tuples(free_dim(), run_dim(run, 100 if run == 4 else 50)), min_size=2, max_size=4))
    return dtype, bm, bn, shapes


@settings(max_examples=25, **SETTINGS)
@given(case=ew_case(), seed=st.integers(0, 2**16))
def test_scale_shift_random_shapes_and_tiles(case, seed) -> None:
    dtype, bm, bn, shapes = case
    tdt = EW_DTYPES[dtype][1]
    kernel = ew_kernel(dtype, bm, bn)
    for i, (m, n) in enumerate(shapes):
        g = torch.Generator().manual_seed(seed + i)
        a, b = (torch.randn(m, n, generator=g).to(tdt) for _ in range(2))
        bias = torch.randn(n, generator=g).to(tdt)
        inputs = [t.clone() for t in (a, b, bias)]
        out, buf = poisoned((m, n), tdt)
        kernel(a, b, bias, out)
        check_written(out, buf)
        assert all(torch.equal(x, y) for x, y in zip((a, b, bias), inputs)), "an input was modified"
        ref = a * b + bias[None, :]  # torch rounds after each op in tdt, like the kernel
        tol = dict(rtol=2e-3, atol=2e-3) if tdt == torch.float16 else dict(rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(out, ref, **tol, msg=lambda s, m=m, n=n: f"scale_shift {dtype} {m}x{n}: {s}")


@settings(max_examples=10, **SETTINGS)
@given(dtype=st.sampled_from(sorted(EW_DTYPES)), m=free_dim(), n=free_dim())
def test_scale_shift_misaligned_n(dtype, m, n) -> None:
    """Any N, the narrow variant where N is not a multiple of the 16-byte run."""
    tdt = EW_DTYPES[dtype][1]
    run = 16 // tdt.itemsize
    kernel = ew_kernel(dtype, 4, 32 * run)
    g = torch.Generator().manual_seed(m * 7919 + n)
    a, b = (torch.randn(m, n, generator=g).to(tdt) for _ in range(2))
    bias = torch.randn(n, generator=g).to(tdt)
    out, buf = poisoned((m, n), tdt)
    kernel(a, b, bias, out)
    check_written(out, buf)
    tol = dict(rtol=2e-3, atol=2e-3) if tdt == torch.float16 else dict(rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out, a * b + bias[None, :], **tol)
