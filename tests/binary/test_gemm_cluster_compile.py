"""Binary tier of the 2-workgroup cluster GEMM (``SchedulingConstraint(cluster=)``, sm_90a TMA multicast):
the PTX multicasts the shared operand's half tiles (a ctaMask of both), each full mbarrier expects the
whole stage, consumers release stages on their own and the peer's empty mbarrier (``mapa`` + a
cluster-scope arrive), cluster barriers after the mbarrier init and before exit; the tensor map of the
shared operand has half its rows; the grid is padded to whole clusters and the metadata asks for a
cluster launch; ptxas accepts it with no spills.  Refusals: the emulator, persistent grids, cp.async, a
cluster value not in ``CLUSTERS``.  The numerics run on a GPU only (``tests/gpu/test_gemm_cluster_gpu.py``)."""

import ctypes
import functools
import re

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.errors import ConstraintError, WavecError
from wavec.kernels import gemm as gm
from wavec.runtime.artifact import KernelMetadata
from wavec.tuning.plan import WGMMA_FOR_DTYPE, GemmRequest, plan_matmul, schedule

pytest.importorskip("iree.compiler")
NEEDS_PTXAS = pytest.mark.skipif(find_ptxas() is None, reason="no ptxas available")

MCAST = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
PLAIN = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes ["


def _kernel(dtype: str, cluster, ws: bool = False, **flags):
    sched = schedule(async_copy="tma-mbarrier", warp_specialize=ws, split_epilogue=True, cluster=cluster, **flags)
    return gm.make_gemm(getattr(wc, dtype), 32, WGMMA_FOR_DTYPE[dtype], (2, 1), sched=sched)


def _subs(bn: int, group: int, stages: int = 4) -> dict:
    return {gm.BLOCK_M: 128, gm.BLOCK_N: bn, gm.BLOCK_K: 64, gm.NUM_STAGES: stages, gm.GROUP_M: group}


def _compile(dtype: str, cluster, ws: bool, bn: int, ptx: bool):
    kernel, subs = _kernel(dtype, cluster, ws), _subs(bn, 8 if cluster == (2, 1) else 1)
    if not ptx:
        return wc.compile(kernel, subs, target="sm_90a", backend="cuda", cache=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        return wc.compile(kernel, subs, target="sm_90a", backend="cuda", cache=False)


@functools.cache
def _ptx(dtype: str, cluster, ws: bool, bn: int) -> tuple[str, KernelMetadata]:
    k = _compile(dtype, cluster, ws, bn, ptx=True)
    return re.sub(r"[ \t]+", " ", k.artifact.binary.decode()), k.artifact.metadata


CASES = [
    ("bf16", (2, 1), False, 256),
    ("f16", (2, 1), True, 128),
    ("bf16", (1, 2), True, 256),
    ("f16", (1, 2), False, 128),
]


@pytest.mark.parametrize(("dtype", "cluster", "ws", "bn"), CASES)
def test_ptx_multicasts_and_synchronises_the_cluster(dtype: str, cluster, ws: bool, bn: int) -> None:
    ptx, meta = _ptx(dtype, cluster, ws, bn)
    # one shared (multicast) box and one own box per fill, wherever LLVM placed the fills
    assert ptx.count(MCAST) >= 1 and ptx.count(MCAST) == ptx.count(PLAIN)
    assert all(line.rstrip().endswith(";") for line in ptx.splitlines() if MCAST in line)
    assert "mov.b16 %rs" in ptx and re.search(r"mov\.b16 %rs\d+, 3;", ptx)  # ctaMask 0b11
    assert "%cluster_ctarank" in ptx
    assert ptx.count("barrier.cluster.arrive;") == 2 and ptx.count("barrier.cluster.wait;") == 2
    assert ptx.index("fence.mbarrier_init.release.cluster;") < ptx.index("barrier.cluster.arrive;")
    assert "mapa.shared::cluster" in ptx and "mbarrier.arrive.release.cluster.shared::cluster.b64" in ptx
    stage_bytes = (128 + bn) * 64 * 2  # both operands' whole tiles: the peer's half lands here too
    assert re.search(rf"mov\.b32 %r\d+, {stage_bytes};", ptx)
    assert ptx.rindex("barrier.cluster.wait;") > ptx.rindex("wgmma.mma_async")  # the exit barrier, last
    assert meta.cluster == (*cluster, 1)
    shared = 1 if cluster == (2, 1) else 0  # B's tile shared along M, A's along N
    rows = {0: 128, 1: bn}
    boxes = {m.arg: m.box for m in meta.tensor_maps}
    assert boxes[shared] == (64, rows[shared] // 2) and boxes[1 - shared] == (64, rows[1 - shared])


@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
def test_grid_is_whole_clusters(cluster) -> None:
    _ptx_text, meta = _ptx("bf16", cluster, False, 256)
    grid = [eval(g, {"min": min}, {"M": 384, "N": 768}) for g in meta.grid]  # 3 x 3 tiles
    assert grid == ([4 * 3, 1, 1] if cluster == (2, 1) else [3, 4, 1])
    assert KernelMetadata.from_json(meta.to_json()).cluster == meta.cluster


@NEEDS_PTXAS
@pytest.mark.parametrize(("dtype", "cluster", "ws", "bn"), CASES)
def test_assembles_without_spills(dtype: str, cluster, ws: bool, bn: int) -> None:
    meta = _compile(dtype, cluster, ws, bn, ptx=False).artifact.metadata
    assert meta.spills == 0 and meta.registers is not None and 0 < meta.registers <= 255


@NEEDS_PTXAS
@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
@pytest.mark.parametrize("shape", [(4096, 6144, 4096), (8192, 8192, 8192), (2048, 5120, 2880), (512, 28672, 4096)])
def test_matmul_plans_compile(shape, cluster) -> None:
    """``matmul(cluster=)``'s plan for the benchmark shapes: no persistent grid, ptxas with no spills."""
    plan = plan_matmul(*shape, GemmRequest(mma="wgmma", cluster=cluster), "H100")
    assert plan.schedule.cluster == cluster and not plan.schedule.persistent
    k = wc.compile(gm.build_gemm(plan, wc.bf16, wc.bf16, "sm_90a"), plan.subs, target="sm_90a", backend="cuda")
    assert k.artifact.metadata.spills == 0 and k.artifact.metadata.cluster == (*cluster, 1)


def test_default_is_off() -> None:
    assert wc.SchedulingConstraint().cluster == (1, 1)
    _ptx_text, meta = _ptx("bf16", (1, 1), False, 256)
    assert meta.cluster == (1, 1, 1) and "multicast" not in _ptx_text and "barrier.cluster" not in _ptx_text


@pytest.mark.parametrize("bad", [(2, 2), (4, 1), (1, 1, 1), [2, 1], 2])
def test_bad_cluster_values(bad) -> None:
    with pytest.raises(ConstraintError, match="cluster"):
        wc.SchedulingConstraint(cluster=bad)


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ({"backend": "emulator"}, "emulator"),
        ({"persistent": True}, "persistent"),
        ({"async_copy": "cp.async"}, "empty mbarriers"),
        ({"group": 8}, "group_size"),  # clusters along N with the grouped order
    ],
)
def test_refusals(flags: dict, why: str) -> None:
    backend, group = flags.pop("backend", "cuda"), flags.pop("group", 1)
    copy = flags.pop("async_copy", "tma-mbarrier")
    sched = schedule(async_copy=copy, cluster=(1, 2), **flags)
    kernel = gm.make_gemm(wc.bf16, 32, WGMMA_FOR_DTYPE["bf16"], (2, 1), sched=sched)
    with pytest.raises(ConstraintError, match=why):
        wc.compile(kernel, _subs(256, group), target="sm_90a", backend=backend, cache=False)


def test_odd_group_refused() -> None:
    """Clusters along M in the grouped order: workgroups 2i, 2i + 1 share a column only for even groups."""
    with pytest.raises(ConstraintError, match="even group_size"):
        wc.compile(_kernel("bf16", (2, 1)), _subs(256, 3), target="sm_90a", backend="cuda", cache=False)


def test_static_odd_tiles_refused() -> None:
    """A bound M of an odd tile count would need a padding workgroup whose stores are proved in bounds."""
    kernel = _kernel("bf16", (2, 1))
    with pytest.raises(ConstraintError, match="whole clusters"):
        wc.compile(kernel, {**_subs(256, 8), gm.M: 384}, target="sm_90a", backend="cuda", cache=False)


def test_matmul_request_needs_wgmma() -> None:
    with pytest.raises(WavecError, match="wgmma"):
        GemmRequest(mma="mma_sync", cluster=(2, 1))


def test_cluster_launch_structs_follow_cuda_h() -> None:
    from wavec.runtime.cluster_launch import _Attribute, _Config

    assert ctypes.sizeof(_Attribute) == 72 and _Attribute.value.offset == 8
    assert ctypes.sizeof(_Config) == 56 and _Config.hStream.offset == 32 and _Config.attrs.offset == 40
    assert _Config.numAttrs.offset == 48


def test_cluster_launcher_packs_the_config(monkeypatch) -> None:
    """``cluster_launcher`` hands libcuda one CUlaunchConfig with the grid, block, shared bytes, stream and
    one cluster-dimension attribute, and the kernel's parameter array (a fake libcuda reads them back)."""
    from wavec.runtime import cluster_launch as cl

    seen = {}
    proto = ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.POINTER(cl._Config), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
    )

    def fake(config, fn, params, extra) -> int:
        c = config.contents
        attr = c.attrs[0]
        seen.update(
            grid=(c.gridDimX, c.gridDimY, c.gridDimZ), block=(c.blockDimX, c.blockDimY, c.blockDimZ),
            shared=c.sharedMemBytes, stream=c.hStream, n=c.numAttrs, id=attr.id,
            dims=(attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z),
            fn=fn, params=params, extra=extra,
        )  # fmt: skip
        return 0

    callback = proto(fake)

    class FakeLib:
        cuLaunchKernelEx = ctypes.cast(callback, ctypes.CFUNCTYPE(ctypes.c_int))

    monkeypatch.setattr(cl.ctypes, "CDLL", lambda name: FakeLib())
    launch = cl.cluster_launcher((2, 1, 1), "k")
    err = launch(
        ctypes.c_void_p(0x1234), 8, 3, 1, 384, 1, 1, 200_000, ctypes.c_void_p(0x77), ctypes.c_void_p(0x99), None
    )
    assert err == 0
    assert seen == {
        "grid": (8, 3, 1), "block": (384, 1, 1), "shared": 200_000, "stream": 0x77, "n": 1,
        "id": cl.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, "dims": (2, 1, 1), "fn": 0x1234, "params": 0x99, "extra": None,
    }  # fmt: skip
