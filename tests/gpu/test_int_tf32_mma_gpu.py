"""GPU tier, issue #20 item 6: int8 x int8 -> int32 and tf32 matrix products on a CUDA device.

int8: exact equality with ``torch._int_mm`` (where it takes the shape) and with ``a.long() @ b.long().T``,
aligned and odd sizes, mma.sync (sm_80 PTX) and wgmma (sm_90a), C prefilled with a sentinel so an
unwritten element fails.  The mma.sync s8 form is ``.satfinite``: a kernel whose accumulator starts next
to the int32 limits checks on the hardware that the sum clamps (the emulator's model).  tf32: relative
error against float64 within 2e-3 (mma.sync, operands rounded by ``cvt.rna``) and 3e-3 (wgmma, operands
read from shared memory); on mma.sync the result must also match the product of the tf32-rounded inputs
to f32 accumulation accuracy, which truncated operands would not.
"""

import pytest
import torch

import wavec as wc
from wavec import Memory, Register
from wavec.kernels import gemm as gm

pytestmark = pytest.mark.gpu
SENTINEL = -(2**31) + 12345
SIZES = [(128, 128, 256), (33, 47, 29), (1, 5, 16), (7, 9, 13), (256, 512, 4096), (600, 520, 1001), (64, 4099, 96)]


def _needs_wgmma(mma: str) -> None:
    if mma == "wgmma" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("wgmma needs sm_90a")


def _int8(*shape: int) -> torch.Tensor:
    return torch.randint(-128, 128, shape, device="cuda", dtype=torch.int8)


def _exact(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert c.dtype == torch.int32
    ref = (a.double() @ b.double().T).long()  # exact: |sums| < K * 2**14 < 2**53 (no int64 matmul on CUDA)
    bad = (c.long() != ref).nonzero()
    assert not len(bad), f"{what}: {len(bad)} of {c.numel()} wrong, first at {bad[0].tolist()}"


def _round_tf32(x: torch.Tensor) -> torch.Tensor:
    bits = x.contiguous().view(torch.int32).long() & 0xFFFFFFFF
    bits = (bits + 0x1000) & 0xFFFFE000
    return torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)


def _rel(c: torch.Tensor, ref: torch.Tensor, what: str) -> float:
    assert not c.isnan().any(), f"{what}: outputs never written"
    return ((c.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("mma", ["mma_sync", "wgmma"])
def test_matmul_int8_exact(mma: str) -> None:
    _needs_wgmma(mma)
    for m, n, k in SIZES:
        a, b = _int8(m, k), _int8(n, k)
        c = gm.matmul(a, b, mma=mma)
        torch.cuda.synchronize()
        _exact(c, a, b, f"matmul int8 {mma} {m}x{n}x{k}")
        if m > 16 and k % 8 == 0 and n % 8 == 0:  # torch._int_mm's own shape rules
            assert torch.equal(c, torch._int_mm(a, b.T.contiguous())), f"{mma} {m}x{n}x{k} vs torch._int_mm"


@pytest.mark.parametrize("stages", [1, 3])
def test_int8_gemm_kernel_every_element_written(stages: int) -> None:
    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 64, gm.NUM_STAGES: stages, gm.GROUP_M: 4}
    kernel = wc.compile(gm.make_gemm(wc.i8, 32, wc.MMAType.NV_I32_16x8x32_I8, (2, 2)), subs, backend="cuda")
    for m, n, k in SIZES:
        a, b = _int8(m, k), _int8(n, k)
        c = torch.full((m, n), SENTINEL, device="cuda", dtype=torch.int32)
        kernel(a, b, c)
        torch.cuda.synchronize()
        _exact(c, a, b, f"int8 gemm stages{stages} {m}x{n}x{k}")


def _saturating_kernel(init: int):
    """C = A B^T + init for one 16 x 8 x 32 mma.sync tile."""
    M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
    cons = [
        wc.WorkgroupConstraint(M, 16, 0),
        wc.WorkgroupConstraint(N, 8, 1),
        wc.WorkgroupConstraint(K, 32, None),
        wc.WaveConstraint(M, 16),
        wc.WaveConstraint(N, 8),
        wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_I32_16x8x32_I8),
        wc.SchedulingConstraint(promote_operands=False),
    ]

    @wc.wave(cons)
    def sat(a: Memory[M, K, wc.i8], b: Memory[N, K, wc.i8], c: Memory[M, N, wc.i32]):
        wc.write(wc.mma(wc.read(a), wc.read(b), Register[M, N, wc.i32](init)), c)

    return wc.compile(sat, {M: 16, N: 8, K: 32}, backend="cuda")


def test_mma_sync_int8_saturates_on_the_hardware() -> None:
    """The emulator models mma.sync's s8 form as ``.satfinite`` (what nvgpu emits): check the hardware."""
    for init, sign in ((2**31 - 101, 1), (-(2**31) + 100, -1)):
        a = torch.full((16, 32), 127, device="cuda", dtype=torch.int8)
        b = torch.full((8, 32), 127 * sign, device="cuda", dtype=torch.int8)
        c = torch.zeros(16, 8, device="cuda", dtype=torch.int32)
        _saturating_kernel(init)(a, b, c)
        torch.cuda.synchronize()
        assert torch.equal(c, torch.full_like(c, 2**31 - 1 if sign > 0 else -(2**31))), c


@pytest.mark.parametrize("mma", ["mma_sync", "wgmma"])
def test_matmul_tf32(mma: str) -> None:
    _needs_wgmma(mma)
    for m, n, k in SIZES:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(n, k, device="cuda")
        c = gm.matmul(a, b, mma=mma, allow_tf32=True)
        torch.cuda.synchronize()
        what = f"matmul tf32 {mma} {m}x{n}x{k}"
        assert c.dtype == torch.float32
        err = _rel(c, a.double() @ b.double().T, what)
        assert err < (2e-3 if mma == "mma_sync" else 3e-3), f"{what}: relative error {err:.2e}"
        if mma == "mma_sync":  # rounded operands, f32 accumulation
            ref = _round_tf32(a).double() @ _round_tf32(b).double().T
            err = _rel(c, ref, what)
            assert err < 1e-5, f"{what}: {err:.2e} from the product of the tf32-rounded inputs"


def test_matmul_tf32_needs_opt_in() -> None:
    a = torch.randn(32, 32, device="cuda")
    with pytest.raises(wc.WavecError, match="allow_tf32=True"):
        gm.matmul(a, a)
