"""The emulator is a real test oracle: deliberately broken compilers produce kernels it rejects.

* A corrupted index (two lanes' rows swapped in an MMA operand layout, the anchor every thread's index
  sequence is inferred from) makes the GEMM's numeric check against torch fail, while the same kernel
  compiled without the corruption passes.
* A dropped barrier makes the emulator's race checker (which tracks which wave wrote and read each
  shared-memory address since the last barrier) raise :class:`~wavec.errors.SharedMemoryRaceError` naming
  both accesses, for the synchronous path (``vector.store``/``vector.load``/``ldmatrix``) and the
  ``cp.async`` path.
* An op the emulator does not implement is an :class:`~wavec.errors.EmulatorError` naming the op and its
  line: covered by ``tests/emulator/test_kernels.py::test_unknown_op_is_named`` (hand-written module).

Every compile here passes ``cache=False``: the corruption is not part of the cache key, so a cached
artifact would hide it.
"""

from __future__ import annotations

import re

import pytest
import sympy
import torch
from kernel_fixtures import gemm_kernel

import wavec as wc
from wavec.errors import OutOfBoundsError, SharedMemoryRaceError
from wavec.indexing import mma as mma_mod
from wavec.indexing.symbols import LANE
from wavec.kernels import gemm as gm
from wavec.passes import insert_barriers as ib_mod
from wavec.passes import pipeline as pipeline_mod

NV = ("sm_90", 32, wc.MMAType.NV_F32_16x8x16_F16)
AMD = ("gfx942", 64, wc.MMAType.F32_16x16x16_F16)
SUBS = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: 1, gm.GROUP_M: 1}


def make_gemm(threads: int, mma, promote: bool = True) -> wc.WaveKernel:
    """``make_gemm``'s kernel, optionally reading the MMA operands straight from global memory."""
    cons = gm.gemm_constraints(threads, mma)
    cons = [c for c in cons if not isinstance(c, wc.SchedulingConstraint)]
    cons.append(wc.SchedulingConstraint(num_stages=gm.NUM_STAGES, group_size=gm.GROUP_M, promote_operands=promote))
    return gemm_kernel(cons)


def compile_gemm(target: str, threads: int, mma, promote: bool = True, subs=SUBS):
    return wc.compile(make_gemm(threads, mma, promote), subs, backend="emulator", target=target, cache=False)


def gemm_error(kernel, m: int = 128, n: int = 128, k: int = 96) -> float:
    """Relative Frobenius error against torch (float64) on fresh inputs; 2 x 2 workgroups, 3 K steps."""
    a, b = torch.randn(m, k, dtype=torch.float16), torch.randn(n, k, dtype=torch.float16)
    c = torch.full((m, n), float("nan"))
    kernel(a, b, c)
    assert not torch.isnan(c).any()
    ref = a.double() @ b.double().T
    return ((c.double() - ref).norm() / ref.norm()).item()


# ---------------------------------------------------------------------------------- corrupted indices


def _is_lane(i: int, width: int) -> sympy.Expr:
    """1 where LANE == i, else 0, for 0 <= LANE < width (floor/Mod only: what index lowering handles)."""
    return 1 - sympy.floor((sympy.Mod(LANE + width - i, width) + width - 1) / width)


def swap_lanes(monkeypatch, mma, roles: tuple[str, ...], i: int, j: int) -> None:
    """Make lanes ``i`` and ``j`` trade places in the layouts of operands ``roles`` of ``mma``."""
    width = mma.spec.threads
    perm = LANE + (j - i) * _is_lane(i, width) + (i - j) * _is_lane(j, width)
    assert [int(perm.subs(LANE, x)) for x in range(width)] == [
        j if x == i else i if x == j else x for x in range(width)
    ]
    original = mma_mod._LAYOUTS[mma]

    def corrupted(role, d0, d1):
        layout = original(role, d0, d1)
        return layout.subs({LANE: perm}) if role in roles else layout

    monkeypatch.setitem(mma_mod._LAYOUTS, mma, corrupted)


@pytest.mark.parametrize(
    "arch,roles,i,j,promote",
    [
        pytest.param(NV, ("a",), 0, 4, False, id="nv-A-rows-global-reads"),
        pytest.param(NV, ("c",), 0, 4, True, id="nv-C-rows-shared-ldmatrix"),
        pytest.param(AMD, ("a",), 0, 1, True, id="amd-A-rows-shared"),
        pytest.param(AMD, ("b",), 0, 16, True, id="amd-B-k-shared"),
    ],
)
def test_swapped_lanes_fail_the_numeric_check(monkeypatch, arch, roles, i, j, promote) -> None:
    target, threads, mma = arch
    good = compile_gemm(target, threads, mma, promote)
    assert gemm_error(good) < 1e-5
    swap_lanes(monkeypatch, mma, roles, i, j)
    bad = compile_gemm(target, threads, mma, promote)
    assert bad.mlir != good.mlir
    assert gemm_error(bad) > 0.05  # a few elements per instruction tile are wrong: O(0.1-0.3)


def test_swapped_A_lanes_with_ldmatrix_read_out_of_bounds(monkeypatch) -> None:
    """With ldmatrix (addressed from lane 0's start), the swap shifts the fragment by one row: the last
    wave then reads one row past the shared tile, which the emulator reports instead of reading garbage."""
    target, threads, mma = NV
    swap_lanes(monkeypatch, mma, ("a",), 0, 4)
    bad = compile_gemm(target, threads, mma, promote=True)
    with pytest.raises(
        OutOfBoundsError, match=r"nvgpu\.ldmatrix \([^()]+:\d+\): out-of-bounds access to memref\.alloc"
    ):
        gemm_error(bad)


# ----------------------------------------------------------------------------------- dropped barriers

ACCESS = r"([a-z_]+\.[a-z_.]+) \([^():]+:(\d+)\)"  # the op and its kernel line


def assert_names_two_accesses(err: SharedMemoryRaceError, first: str, second: str) -> None:
    text = str(err)
    found = re.findall(ACCESS, text.split(":", 2)[-1])
    ops = [op for op, _line in found]
    assert len(found) == 2 and re.fullmatch(first, ops[0]) and re.fullmatch(second, ops[1]), text
    assert "no barrier between" in text and "shared-memory race at byte" in text, text


def drop_insert_barriers(monkeypatch) -> None:
    patched = [
        (name, (lambda trace, ctx: None) if name == "insert_barriers" else fn) for name, fn in pipeline_mod.PIPELINE
    ]
    monkeypatch.setattr(pipeline_mod, "PIPELINE", patched)


@pytest.mark.parametrize(
    "arch,stages,writer,reader",
    [
        pytest.param(NV, 1, r"vector\.store", r"nvgpu\.ldmatrix", id="nv-sync"),
        pytest.param(NV, 2, r"nvgpu\.device_async_copy", r"nvgpu\.ldmatrix", id="nv-cp.async-2-stages"),
        pytest.param(NV, 3, r"nvgpu\.device_async_copy", r"nvgpu\.ldmatrix", id="nv-cp.async-3-stages"),
        pytest.param(AMD, 1, r"vector\.store", r"vector\.load", id="amd-sync"),
    ],
)
def test_dropped_barriers_are_a_race(monkeypatch, arch, stages, writer, reader) -> None:
    target, threads, mma = arch
    subs = {**SUBS, gm.NUM_STAGES: stages}
    good = compile_gemm(target, threads, mma, subs=subs)
    assert "gpu.barrier" in good.mlir and gemm_error(good) < 1e-5
    drop_insert_barriers(monkeypatch)
    bad = compile_gemm(target, threads, mma, subs=subs)
    assert "gpu.barrier" not in bad.mlir
    if stages > 1:
        assert "nvgpu.device_async_copy" in bad.mlir
    with pytest.raises(SharedMemoryRaceError) as info:
        gemm_error(bad)
    assert_names_two_accesses(info.value, writer, reader)  # RAW: the tile write, then its read


@pytest.mark.parametrize(
    "arch,reader,writer",
    [
        pytest.param(NV, r"nvgpu\.ldmatrix", r"vector\.store", id="nv"),
        pytest.param(AMD, r"vector\.load", r"vector\.store", id="amd"),
    ],
)
def test_dropped_loop_top_barrier_is_a_war_race(monkeypatch, arch, reader, writer) -> None:
    """Only the barrier at the top of the synchronous K loop is dropped (the RAW barriers stay): with one
    K step there is no hazard and no report; with three, iteration 2 overwrites the tile iteration 1 still
    reads (write-after-read across waves), and the checker names the read, then the write."""
    target, threads, mma = arch
    original = ib_mod._barrier

    def all_but_loop_top(g, before):
        first = next(n for n in g.nodes if n.op != "placeholder")
        return None if before is first else original(g, before)

    monkeypatch.setattr(ib_mod, "_barrier", all_but_loop_top)
    bad = compile_gemm(target, threads, mma)
    assert bad.mlir.count("gpu.barrier") == 1
    assert gemm_error(bad, k=32) < 1e-5  # one iteration: no false positive
    with pytest.raises(SharedMemoryRaceError) as info:
        gemm_error(bad, k=96)
    assert_names_two_accesses(info.value, reader, writer)
