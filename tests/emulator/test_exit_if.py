"""``wc.exit_if``: a workgroup-uniform early return.  A pipelined GEMM after it keeps its shared-memory
staging and ``cp.async`` copies (what ``wc.conditional`` around the loop loses), exited workgroups store
nothing (sentinel-filled output), the others match torch; misuse is a ``ShapeError`` at trace time."""

from __future__ import annotations

import re

import pytest
import torch

import wavec as wc
from wavec import Memory, Register, f32
from wavec.errors import ShapeError
from wavec.kernels.gemm import BLOCK_K, BLOCK_M, BLOCK_N, NUM_STAGES, K, M, N, gemm_constraints

J = wc.sym.J
SUBS = {BLOCK_M: 32, BLOCK_N: 32, BLOCK_K: 32, NUM_STAGES: 3}


def make_skipping_gemm():
    """``c = a @ b.T`` for the row blocks whose ``flags[block]`` is 0; the others exit first."""

    @wc.wave(
        gemm_constraints(32, wc.MMAType.NV_F32_16x8x16_F16, (2, 2), wc.SchedulingConstraint(num_stages=NUM_STAGES))
    )
    def skipping_gemm(a: Memory[M, K, wc.f16], b: Memory[N, K, wc.f16], flags: Memory[J, wc.i32], c: Memory[M, N, f32]):
        wc.exit_if(wc.read(flags, mapping={J: wc.tile_start(M) // BLOCK_M}) != 0)

        @wc.iterate(K, init_args=[Register[M, N, f32](0.0)])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body, c)

    return skipping_gemm


def test_exited_workgroups_store_nothing_and_the_rest_is_a_pipelined_gemm() -> None:
    kernel = wc.compile(make_skipping_gemm(), SUBS, backend="emulator", cache=False)
    a, b = torch.randn(128, 96, dtype=torch.float16), torch.randn(64, 96, dtype=torch.float16)
    flags = torch.tensor([0, 1, 0, 1], dtype=torch.int32)
    c = torch.full((128, 64), float("nan"))
    kernel(a, b, flags, c)
    want = a.double() @ b.double().T
    for blk, skip in enumerate(flags.tolist()):
        rows = slice(32 * blk, 32 * (blk + 1))
        if skip:
            assert c[rows].isnan().all(), blk
        else:
            torch.testing.assert_close(c[rows].double(), want[rows], rtol=2e-3, atol=2e-3)
    # one branch before the pipeline's first copy; the loop inside it still stages through shared memory
    first_if = kernel.mlir.index("scf.if")
    copies = [m.start() for m in re.finditer(r"nvgpu.device_async_copy", kernel.mlir)]
    assert copies and first_if < copies[0]
    assert kernel.mlir.count("gpu.barrier") >= 1


def test_exit_if_misuse_is_a_shape_error() -> None:
    cons = [
        wc.WorkgroupConstraint(N, 64, 0),
        wc.WaveConstraint(N, 64),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={N: 64}),
    ]

    def trace(body):
        @wc.wave(cons)
        def k(x: Memory[N, f32], y: Memory[N, f32]):
            body(x, y)

        return wc.compile(k, {}, backend="emulator", cache=False)

    with pytest.raises(ShapeError, match="rank-0 comparison"):
        trace(lambda x, y: wc.exit_if(wc.read(x) > 0.0))

    def twice(x, y):
        first = wc.read(x, mapping={N: wc.tile_start(N)}) > 0.0
        wc.exit_if(first)
        wc.exit_if(first)

    with pytest.raises(ShapeError, match="one exit_if"):
        trace(twice)

    def in_region(x, y):
        v = wc.read(x)

        @wc.conditional(v > 0.0)
        def _() -> None:
            wc.exit_if(wc.read(x, mapping={N: wc.tile_start(N)}) > 0.0)

    with pytest.raises(ShapeError, match="top level"):
        trace(in_region)
