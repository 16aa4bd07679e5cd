"""GPU tier: random shapes (1, primes, powers of two and their neighbours, up to ~4096) on a CUDA device.

The GEMM goes through ``wavec.kernels.gemm.matmul`` (its ``gemm_config`` heuristic picks the tile per
shape, so the decode, mid-size and large tiles all run); the elementwise kernel runs with random legal
tiles.  Only the contiguous dimension is constrained (``K % 8``, ``N % 2`` for the GEMM; ``N % 4`` / ``N % 8``
for f32 / f16 elementwise); outputs are poisoned with NaN inside a larger NaN buffer, so unwritten
elements and writes past the end are both caught.  Compiled kernels are reused across examples.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.kernels.elementwise import make_scale_shift
from wavec.kernels.gemm import matmul
from wavec.tuning.plan import gemm_config

pytestmark = pytest.mark.gpu

SETTINGS = dict(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SPECIAL = [1, 2, 3, 5, 7, 13, 31, 64, 97, 100, 127, 128, 131, 257, 1000, 1021, 1024, 2048, 3001, 4093, 4096]


def free_dim(hi: int = 4096) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([x for x in SPECIAL if x <= hi]), st.integers(1, hi))


def run_dim(run: int, hi: int = 4096) -> st.SearchStrategy[int]:
    """A multiple of ``run`` up to ``hi``: ``run`` times 1, a prime, or any count."""
    top = hi // run
    return st.one_of(st.sampled_from([x for x in SPECIAL if x <= top]), st.integers(1, top)).map(lambda x: x * run)


def poisoned(shape, dtype, guard: int = 256):
    n = 1
    for s in shape:
        n *= s
    buf = torch.full((n + guard,), float("nan"), dtype=dtype, device="cuda")
    return buf[:n].view(shape), buf


def check_written(out, buf) -> None:
    torch.cuda.synchronize()
    assert not out.isnan().any(), f"{int(out.isnan().sum())} of {out.numel()} output elements never written"
    assert buf[out.numel() :].isnan().all(), "the kernel wrote past the end of its output"


def _rel_err(out, ref) -> float:
    denom = ref.double().norm().item()
    return ((out.double() - ref.double()).norm().item() / denom) if denom else out.double().norm().item()


@settings(max_examples=60, **SETTINGS)
@given(m=free_dim(), n=run_dim(2), k=run_dim(8), dtype=st.sampled_from(["f16", "bf16"]), seed=st.integers(0, 2**16))
def test_matmul_random_shapes(m, n, k, dtype, seed) -> None:
    tdt = torch.float16 if dtype == "f16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(tdt)
    b = torch.randn(n, k, device="cuda", generator=g).to(tdt)
    c = matmul(a, b, out_dtype=torch.float32)  # a fresh torch.empty output: the error bound catches unwritten ones
    torch.cuda.synchronize()
    assert not c.isnan().any()
    assert _rel_err(c, a.double() @ b.double().T) < 1e-5, (m, n, k, dtype)


_GEMM: dict = {}


@settings(max_examples=20, **SETTINGS)
@given(m=free_dim(), n=run_dim(2), k=run_dim(8), seed=st.integers(0, 2**16))
def test_matmul_kernel_writes_only_its_output(m, n, k, seed) -> None:
    """The kernel matmul would choose (gemm_config), called with a poisoned output inside a larger buffer."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).half()
    b = torch.randn(n, k, device="cuda", generator=g).half()
    subs, waves = gemm_config(m, n, k)
    key = (tuple(sorted((str(s), v) for s, v in subs.items())), waves)
    if key not in _GEMM:
        _GEMM[key] = wc.compile(gm.make_gemm(wc.f16, waves=waves), subs, backend="cuda")
    kernel = _GEMM[key]
    c, buf = poisoned((m, n), torch.float32)
    kernel(a, b, c)
    check_written(c, buf)
    assert _rel_err(c, a.double() @ b.double().T) < 1e-5


_EW: dict = {}


@settings(max_examples=40, **SETTINGS)
@given(
    dtype=st.sampled_from(["f32", "f16"]),
    bm=st.sampled_from([1, 2, 4, 8]),
    bn_waves=st.sampled_from([1, 2, 4]),
    m=free_dim(),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_scale_shift_random_shapes(dtype, bm, bn_waves, m, seed, data) -> None:
    wdt, tdt = {"f32": (wc.f32, torch.float32), "f16": (wc.f16, torch.float16)}[dtype]
    run = 16 // tdt.itemsize
    n = data.draw(run_dim(run), label="n")
    key = (dtype, bm, bn_waves)
    if key not in _EW:
        _EW[key] = wc.compile(
            make_scale_shift(wdt), {wc.sym.BLOCK_M: bm, wc.sym.BLOCK_N: 32 * run * bn_waves}, backend="cuda"
        )
    g = torch.Generator(device="cuda").manual_seed(seed)
    a, b = (torch.randn(m, n, device="cuda", generator=g).to(tdt) for _ in range(2))
    bias = torch.randn(n, device="cuda", generator=g).to(tdt)
    out, buf = poisoned((m, n), tdt)
    _EW[key](a, b, bias, out)
    check_written(out, buf)
    ref = (a.double() * b.double()).to(tdt).double() + bias.double()[None, :]
    assert _rel_err(out, ref) < (2e-3 if dtype == "f16" else 1e-6)
