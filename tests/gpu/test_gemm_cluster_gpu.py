"""GPU tier for 2-workgroup thread-block clusters of the Hopper TMA GEMM (``SchedulingConstraint(cluster=)``,
sm_90a): each workgroup of a cluster loads half of the shared operand's tile (B's along M, A's along N)
and multicasts it into both; stages are released by the consumers of both.  Numerics against torch in
float64 on fresh random inputs with NaN-prefilled outputs (every output written, the padding workgroup of
an odd tile count included), f16 and bf16, masked M/N/K edges, with and without warp specialization;
bit-for-bit equal to the kernel of the same tile without clusters (the same wgmmas on the same bytes);
``matmul(cluster=)`` against ``torch.matmul``.  Needs a CUDA device of compute capability 9.0; skipped
elsewhere."""

import pytest
import torch
from hopper_gemm import check_matches_torch_and, inputs, subs
from hopper_gemm import needs_sm90 as needs_sm90_for

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, schedule

pytestmark = pytest.mark.gpu

needs_sm90 = needs_sm90_for("the TMA multicast GEMM")

CONFIGS = [  # (id, subs, waves, warp specialized)
    ("128x256x64-s4", subs(128, 256, 64, 4), (2, 1), False),
    ("128x256x64-s4-ws", subs(128, 256, 64, 4), (2, 1), True),
    ("128x128x64-s4-ws", subs(128, 128, 64, 4), (2, 1), True),
    ("128x128x128-s3", subs(128, 128, 128, 3), (2, 1), False),  # two boxes per tile along K
    ("64x128x64-s3", subs(64, 128, 64, 3), (1, 1), False),
]


def _compile(dt: str, cfg, cluster: tuple[int, int]):
    _name, tile, waves, ws = cfg
    if cluster == (1, 2):
        tile = {**tile, gm.GROUP_M: 1}  # clusters along N: the grouped order is off
    sched = schedule(async_copy="tma-mbarrier", warp_specialize=ws, split_epilogue=True, cluster=cluster)
    kernel = gm.make_gemm(getattr(wc, dt), 32, WGMMA_FOR_DTYPE[dt], waves, sched=sched)
    return wc.compile(kernel, tile, backend="cuda", target="sm_90a")


@needs_sm90
@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)], ids=["along-M", "along-N"])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_cluster_matches_torch_and_plain(cfg, dt: str, cluster: tuple[int, int]) -> None:
    k = _compile(dt, cfg, cluster)
    assert k.artifact.metadata.cluster == (*cluster, 1)
    check_matches_torch_and(k, _compile(dt, cfg, (1, 1)), dt, f"cluster={cluster} differs from no cluster")


@needs_sm90
@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("shape", [(4096, 6144, 4096), (2048, 5120, 2880), (512, 28672, 4096), (1000, 1500, 776)])
def test_matmul_cluster(shape, dt: str, cluster: tuple[int, int]) -> None:
    """``matmul(mma="wgmma", cluster=)`` on benchmark shapes and one of odd tile counts: every output
    written, within bf16/f16 rounding of torch's f32-accumulated product."""
    m, n, k = shape
    a, b = inputs(m, n, k, dt)
    c = gm.matmul(a, b, mma="wgmma", cluster=cluster, out_dtype=torch.float32)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    ref = a.float() @ b.float().T
    err = ((c - ref).norm() / ref.norm()).item()
    assert err < 1e-5, f"{shape} {dt} cluster={cluster}: relative error {err:.2e}"
    half = gm.matmul(a, b, mma="wgmma", cluster=cluster)  # C in the input dtype
    assert half.dtype == a.dtype and torch.allclose(half.float(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())


@needs_sm90
def test_cluster_fast_path_repeats() -> None:
    """The prepared launch (FastLaunch through cuLaunchKernelEx) gives the same C call after call."""
    a, b = inputs(2048, 2048, 1024, "bf16")
    first = gm.matmul(a, b, mma="wgmma", cluster=(2, 1))
    for _ in range(20):
        assert torch.equal(gm.matmul(a, b, mma="wgmma", cluster=(2, 1)), first)
