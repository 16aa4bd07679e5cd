"""Hand-written kernels (tests/emulator/data/*.mlir) run on the emulator against numpy / torch."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch
from iree.compiler import ir

from wavec.emulator import EmulatedKernel, run_kernel
from wavec.emulator.types import bf16_bits_to_f32, f32_to_bf16_bits
from wavec.errors import EmulatorError, OutOfBoundsError, SharedMemoryRaceError

DATA = pathlib.Path(__file__).parent / "data"


def text(name: str) -> str:
    return (DATA / f"{name}.mlir").read_text()


def rng() -> np.random.Generator:
    return np.random.default_rng()


@pytest.mark.parametrize("path", sorted(DATA.glob("*.mlir")), ids=lambda p: p.stem)
def test_modules_parse_and_verify(path: pathlib.Path) -> None:
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = False
    ctx.load_all_available_dialects()
    assert ir.Module.parse(path.read_text(), ctx).operation.verify()


def test_copy_several_workgroups() -> None:
    n = 64 * 8 * 3
    a = rng().standard_normal(n).astype(np.float16)
    b = np.full(n, np.nan, np.float16)
    run_kernel(text("copy"), "copy", bindings=[a, b], constants=[n], grid=(3, 1, 1), block=(64, 1, 1))
    np.testing.assert_array_equal(a, b)


def test_copy_out_of_bounds_raises() -> None:
    n = 64 * 8
    a, b = np.zeros(n, np.float16), np.zeros(n, np.float16)
    with pytest.raises(OutOfBoundsError, match=r"vector\.load \(line \d+\): out-of-bounds access to binding 0"):
        run_kernel(text("copy"), "copy", bindings=[a, b], constants=[n], grid=(2, 1, 1), block=(64, 1, 1))


def test_elementwise_f16_bf16() -> None:
    g = rng()
    a = g.standard_normal(256).astype(np.float16)
    b = f32_to_bf16_bits(g.standard_normal(256).astype(np.float32))
    o, p = np.full(256, np.nan, np.float32), np.full(256, 0xFFFF, np.uint16)
    scale = np.float32(1.7)
    run_kernel(
        text("elementwise"),
        "elementwise",
        bindings=[a, b, o, p],
        constants=[int(np.array(scale).view(np.int32))],
        grid=(1, 1, 1),
        block=(64, 1, 1),
    )
    aa = torch.from_numpy(a) * torch.from_numpy(a)  # f16 multiply, rounded to f16
    tb = torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)
    ref = aa.double() * float(scale) + torch.exp2(tb.double())
    np.testing.assert_allclose(o, ref.numpy(), rtol=1e-6, atol=1e-6)
    pref = (torch.from_numpy(o).to(torch.bfloat16) + tb).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(p, pref)  # bf16 round-to-nearest-even, bit for bit


def _gemm_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (torch.from_numpy(a).double() @ torch.from_numpy(b).double()).numpy()


def test_mma_sync_gemm() -> None:
    g = rng()
    a, bt = (g.standard_normal((16, 16)).astype(np.float16) for _ in range(2))
    c = np.full((16, 16), np.nan, np.float32)
    run_kernel(text("mma_gemm"), "mma_gemm", bindings=[a.ravel(), bt.ravel(), c.ravel()], constants=[],
               grid=(1, 1, 1), block=(32, 1, 1))  # fmt: skip
    np.testing.assert_allclose(c, _gemm_ref(a, bt.T), rtol=1e-5, atol=1e-5)


def test_ldmatrix_gemm() -> None:
    g = rng()
    a, b = (g.standard_normal((16, 16)).astype(np.float16) for _ in range(2))
    c = np.full((16, 16), np.nan, np.float32)
    run_kernel(text("ldmatrix_gemm"), "ldmatrix_gemm", bindings=[a.ravel(), b.ravel(), c.ravel()],
               constants=[], grid=(1, 1, 1), block=(32, 1, 1))  # fmt: skip
    np.testing.assert_allclose(c, _gemm_ref(a, b), rtol=1e-5, atol=1e-5)


def test_async_copy_visible_at_wait() -> None:
    x = rng().standard_normal(1024).astype(np.float16)
    out, mid, stale = (np.zeros(512, np.float16) for _ in range(3))
    run_kernel(text("async_copy"), "async_copy", bindings=[x, out, mid, stale], constants=[],
               grid=(1, 1, 1), block=(64, 1, 1))  # fmt: skip
    np.testing.assert_array_equal(mid, x[:512])  # group 1 retired by wait(numGroups = 1)
    assert np.isnan(stale).all()  # group 2 still in flight: shared memory still uninitialised
    np.testing.assert_array_equal(out, x[512:].reshape(64, 8)[::-1].ravel())


def test_async_copy_without_barrier_races() -> None:
    x = np.zeros(1024, np.float16)
    bufs = [np.zeros(512, np.float16) for _ in range(3)]
    src = text("async_copy").replace("gpu.barrier", "")
    with pytest.raises(SharedMemoryRaceError, match="device_async_copy.*vector.load"):
        run_kernel(src, "async_copy", bindings=[x, *bufs], constants=[], grid=(1, 1, 1), block=(64, 1, 1))


@pytest.mark.parametrize("name,entry,m,k", [("mfma_16x16x16", "mfma16", 16, 32), ("mfma_32x32x8", "mfma32", 32, 16)])
def test_mfma_gemm(name: str, entry: str, m: int, k: int) -> None:
    g = rng()
    a, bt = (g.standard_normal((m, k)).astype(np.float16) for _ in range(2))
    c = np.full((m, m), np.nan, np.float32)
    kern = EmulatedKernel(text(name), entry)
    assert kern.wave_size == 64
    kern(bindings=[a.ravel(), bt.ravel(), c.ravel()], constants=[], grid=(1, 1, 1), block=(64, 1, 1))
    np.testing.assert_allclose(c, _gemm_ref(a, bt.T), rtol=1e-5, atol=1e-5)


def test_divergent_if_and_loop() -> None:
    n = 40
    a = rng().standard_normal(n).astype(np.float32)
    o1, o2, o3 = (np.full(64, np.nan, np.float32) for _ in range(3))
    run_kernel(text("divergent"), "divergent", bindings=[a, o1, o2, o3], constants=[n], grid=(1, 1, 1),
               block=(64, 1, 1))  # fmt: skip
    tid = np.arange(64)
    sel = (tid < n) & (tid % 3 == 0)
    np.testing.assert_array_equal(o1[sel], 2 * a[tid[sel]])
    assert np.isnan(o1[~sel]).all()
    np.testing.assert_array_equal(o2[:n], np.where(tid[:n] % 3 == 0, 2 * a, a + 1))
    assert np.isnan(o2[n:]).all()
    np.testing.assert_array_equal(o3, [sum(range(t % 5)) for t in tid])


def test_missing_barrier_is_a_race() -> None:
    o = np.zeros(64, np.float32)
    with pytest.raises(SharedMemoryRaceError) as info:
        run_kernel(text("race"), "race", bindings=[o], constants=[], grid=(1, 1, 1), block=(64, 1, 1))
    msg = str(info.value)
    assert "memref.store (line 25)" in msg and "memref.load (line 28)" in msg
    run_kernel(text("race"), "race", bindings=[o], constants=[], grid=(1, 1, 1), block=(64, 1, 1),
               check_races=False)  # fmt: skip
    o[:] = np.nan
    fixed = text("race").replace("// BARRIER", "gpu.barrier")
    run_kernel(fixed, "race", bindings=[o], constants=[], grid=(1, 1, 1), block=(64, 1, 1))
    np.testing.assert_array_equal(o, np.arange(64)[::-1])


def test_unknown_op_is_named() -> None:
    src = text("elementwise").replace("math.exp2 %tb", "math.atan %tb")
    with pytest.raises(EmulatorError, match=r"math\.atan \(line \d+\)"):
        EmulatedKernel(src, "elementwise")


def test_tiled_gemm_128x128x64_is_fast() -> None:
    import time

    g, k = rng(), 64
    a = g.standard_normal((128, k)).astype(np.float16)
    b = g.standard_normal((k, 128)).astype(np.float16)
    c = np.full((128, 128), np.nan, np.float32)
    kern = EmulatedKernel(text("tiled_gemm"), "tiled_gemm")
    t0 = time.perf_counter()
    kern(bindings=[a.ravel(), b.ravel(), c.ravel()], constants=[k], grid=(2, 2, 1), block=(128, 1, 1))
    assert time.perf_counter() - t0 < 5.0
    np.testing.assert_allclose(c, _gemm_ref(a, b), rtol=1e-5, atol=1e-4)


def test_block_must_match_workgroup_size() -> None:
    a = np.zeros(512, np.float16)
    with pytest.raises(EmulatorError, match="workgroup_size"):
        run_kernel(text("copy"), "copy", bindings=[a, a.copy()], constants=[512], grid=(1, 1, 1), block=(32, 1, 1))


def test_bf16_conversion_round_to_nearest_even() -> None:
    x = rng().standard_normal(4096).astype(np.float32) * 100
    ref = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(f32_to_bf16_bits(x), ref)
    np.testing.assert_array_equal(bf16_bits_to_f32(ref), torch.from_numpy(x).to(torch.bfloat16).float().numpy())


def test_lane_ops() -> None:
    x = rng().standard_normal(32).astype(np.float32)
    o, oi = np.full((32, 8), np.nan, np.float32), np.zeros((32, 4), np.int32)
    run_kernel(text("lane_ops"), "lane_ops", bindings=[x, o.ravel(), oi.ravel()], constants=[],
               grid=(1, 1, 1), block=(32, 1, 1))  # fmt: skip
    t = np.arange(32)
    np.testing.assert_array_equal(o[:, 0], x[t ^ 1])
    down_valid = (t % 16) + 4 < 16
    np.testing.assert_array_equal(o[:, 1], np.where(down_valid, x[np.minimum(t + 4, 31)], x))
    np.testing.assert_array_equal(o[:, 2], np.where(t >= 4, x[t - 4], x))
    np.testing.assert_array_equal(o[:, 3], np.full(32, x[5]))
    win = np.array([[x[i + j] if i + j < 32 else -1.0 for j in range(4)] for i in t], np.float32)
    ref_sum = ((win[:, 0] + win[:, 1]) + win[:, 2]) + win[:, 3]  # ordered f32 reduction
    np.testing.assert_array_equal(o[:, 4], ref_sum)
    np.testing.assert_allclose(o[:, 5], np.full(32, x.astype(np.float64).sum()), rtol=1e-5, atol=1e-5)
    assert len(set(o[:, 5].tolist())) == 1  # butterfly: the same bits in every lane
    np.testing.assert_array_equal(o[:, 6], win.max(axis=1))
    np.testing.assert_array_equal(o[:, 7], np.where(down_valid, win.max(axis=1), x))
    a = t - 16
    np.testing.assert_array_equal(oi[:, 0], np.trunc(a / 3).astype(np.int32))
    np.testing.assert_array_equal(oi[:, 1], np.fmod(a, 3))
    np.testing.assert_array_equal(oi[:, 2], (a.astype(np.uint32) >> 28).astype(np.int32))
    np.testing.assert_array_equal(oi[:, 3], a // 3)
