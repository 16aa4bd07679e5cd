"""Binary tier for ``wc.arrive`` and decode in one launch: the arrival kernel and the one-launch decode /
paged kernels compile for sm_80 and sm_90a (PTX, then a cubin where ptxas exists) and gfx942 (HSACO).
The PTX holds the ordering ``codegen/arrive.py`` promises: a GPU-scope ``fence.acq_rel.gpu`` and a
barrier before the one ``atom.acq_rel.gpu.global.inc.u32``, a barrier and the fence after it, and the
loads after that fence are plain ``ld.global`` (not ``ld.global.nc``, which may be served from a stale
non-coherent cache); gfx942 gets agent-scope LLVM fences around an ``atomic_rmw`` and its reset."""

from __future__ import annotations

import re

import pytest

import wavec as wc
from tests import arrive_kernels as ak
from wavec.codegen import ptxas as ptxas_mod
from wavec.kernels import decode as da
from wavec.kernels.paged_attention import make_paged_attention, paged_subs

pytest.importorskip("iree.compiler")
MFMA = {"threads_per_wave": 64, "mma_type": wc.MMAType.F32_16x16x16_F16}


def _ptx(kernel, subs: dict, target: str) -> str:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        return wc.compile(kernel, subs, target=target, backend="cuda", cache=False).artifact.binary.decode()


def _check_ordering(ptx: str) -> None:
    atom = [m.start() for m in re.finditer(r"atom\.acq_rel\.gpu\.global\.inc\.u32 ", ptx)]
    fences = [m.start() for m in re.finditer(r"fence\.acq_rel\.gpu;", ptx)]
    assert len(atom) == 1 and len(fences) == 2, (atom, fences)
    before, after = ptx[fences[0] : atom[0]], ptx[atom[0] : fences[1]]
    assert "bar.sync" in before and "bar.sync" in after  # release: every thread's fence, then the barrier
    loads = re.findall(r"ld\.global[\w.]*", ptx[fences[1] :])
    assert loads and not any(".nc" in x for x in loads), loads


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_arrive_ptx_orders_the_atomic(target: str) -> None:
    _check_ordering(_ptx(ak.make_last_sums(), {ak.T: ak.MAX_SPLITS}, target))
    k = wc.compile(ak.make_last_sums(), {ak.T: ak.MAX_SPLITS}, target=target, backend="cuda", cache=False)
    assert k.artifact.binary and set(k.metadata.constants) == {"G", "S"}, k.metadata.constants


def test_arrive_gfx942_has_agent_fences() -> None:
    k = wc.compile(ak.make_last_sums(64), {ak.T: ak.MAX_SPLITS}, target="gfx942", backend="rocm", cache=False)
    assert k.artifact.format == "hsaco" and k.artifact.binary[:4] == b"\x7fELF"
    text = k.mlir
    release, acquire = (
        text.index('llvm.fence syncscope("agent") release'),
        text.index('fence syncscope("agent") acquire'),
    )
    add, reset = text.index("memref.atomic_rmw addi"), text.index("memref.atomic_rmw assign")
    assert release < add < reset < acquire


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("rows, head_dim", [(32, 128), (64, 64)])
def test_one_launch_decode_compiles(target: str, rows: int, head_dim: int) -> None:
    block_n, waves = da.CONFIGS[(rows, head_dim)]
    subs = da.split_kernel_subs(da.decode_subs(head_dim, 4, block_n, waves), True)
    kernel = da.make_decode_split(wc.bf16, 4, one_launch=True, waves=waves)
    _check_ordering(_ptx(kernel, subs, target))
    k = wc.compile(kernel, subs, target=target, backend="cuda", cache=False)
    assert k.metadata.block == (32 * waves, 1, 1)
    assert set(k.metadata.constants) == {"B", "QL", "H", "N", "KVH", "SP", "C", "scale"}, k.metadata.constants
    print(f"{target} rows {rows} d{head_dim}: {k.metadata.registers} registers, {k.metadata.spills} bytes spilled")


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_one_launch_paged_compiles(target: str) -> None:
    block_n, waves = da.CONFIGS[(32, 128)]
    subs = da.split_kernel_subs(paged_subs(128, 4, 16, block_n, waves), True)
    kernel = make_paged_attention(wc.bf16, 4, 16, one_launch=True, waves=waves)
    _check_ordering(_ptx(kernel, subs, target))


def test_one_launch_gfx942_compiles_with_mfma() -> None:
    subs = da.split_kernel_subs(da.decode_subs(64, 4, 64, 1), True)
    k = wc.compile(da.make_decode_split(wc.f16, 4, one_launch=True, waves=1, **MFMA), subs, target="gfx942",
                   backend="rocm", cache=False)  # fmt: skip
    assert k.artifact.format == "hsaco" and "amdgpu.mfma 16x16x16" in k.mlir
    assert k.mlir.count('llvm.fence syncscope("agent")') == 2 and "memref.atomic_rmw assign" in k.mlir
