"""Binary tier: shared buffers, barriers, branches, scans, shared-memory atomics and the routing kernel
compile for sm_80, sm_90a (PTX/cubin) and gfx942 (HSACO); the atomics on a wc.allocate buffer are
workgroup-memory atomics (PTX ``atom.shared``), the branch an ``scf.if``."""

from __future__ import annotations

import re

import pytest

import wavec as wc
from tests import control_kernels as ck
from wavec.codegen import ptxas as ptxas_mod
from wavec.kernels import moe_align as ma

pytest.importorskip("iree.compiler")
TARGETS = ["sm_80", "sm_90a", "gfx942"]


def _compile(kernel, subs: dict, target: str):
    backend = "rocm" if target.startswith("gfx") else "cuda"
    return wc.compile(kernel, subs, target=target, backend=backend, cache=False)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype, kind", [(wc.i32, "add"), (wc.f32, "add"), (wc.i32, "max"), (wc.f32, "min")])
def test_shared_atomics_compile(target: str, dtype, kind: str) -> None:
    tpw = 64 if target.startswith("gfx") else 32
    k = _compile(ck.make_histogram(dtype, kind, tpw), {ck.E: 64}, target)
    assert k.artifact.binary
    assert "#gpu.address_space<workgroup>" in k.mlir
    cas = dtype.is_float and kind != "add"  # no f32 min/max: a compare-and-swap loop
    # NVIDIA: relaxed CTA-scope inline PTX (memref.atomic_rmw is atom.acq_rel.sys: a fence per element)
    assert ("memref.atomic_rmw" in k.mlir) == (cas or target.startswith("gfx"))
    if not target.startswith("gfx"):  # the PTX (no ptxas): workgroup-memory atomics
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
            ptx = _compile(ck.make_histogram(dtype, kind), {ck.E: 64}, target).artifact.binary.decode()
        want = r"atom\.[\w.]*shared\.cas" if cas else rf"atom\.relaxed\.cta\.shared\.{kind}\.[usf]32 "
        assert re.search(want, ptx), ptx[:2000]
        assert cas or ".sys" not in ptx


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype, kind", [(wc.f16, "add"), (wc.bf16, "add"), (wc.f16, "min"), (wc.bf16, "max")])
def test_shared_half_atomics_compile(target: str, dtype, kind: str) -> None:
    """Unused f16 adds on shared memory are packed ``red...shared.add.noftz.f16x2`` (bf16x2 from sm_90);
    min/max and the rest compare-and-swap loops on the 32-bit word."""
    gfx = target.startswith("gfx")
    subs = {wc.sym.R: 3, ck.X: 512 if gfx else 256}
    k = _compile(ck.make_shared_index_add(dtype, kind, 8, tpw=64 if gfx else 32), subs, target)
    assert k.artifact.binary and "#gpu.address_space<workgroup>" in k.mlir
    packed = kind == "add" and not gfx and (dtype == wc.f16 or target == "sm_90a")
    assert ("memref.atomic_rmw" in k.mlir) == (not packed)
    if not gfx:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
            ptx = _compile(ck.make_shared_index_add(dtype, kind, 8), subs, target).artifact.binary.decode()
        pair = f"{dtype.name}x2"
        want = rf"red\.relaxed\.cta\.shared\.add\.noftz\.{pair}" if packed else r"atom\.[\w.]*shared[\w.]*\.cas"
        assert re.search(want, ptx), ptx[:2000]


@pytest.mark.parametrize("target", TARGETS)
def test_scan_branch_exchange_compile(target: str) -> None:
    if target.startswith("gfx"):
        pytest.skip("these kernels use 32-lane waves")
    for kernel in (ck.make_scan(4), ck.make_masked_store(True), ck.make_exchange(True), ck.make_loop_accumulate()):
        k = _compile(kernel, {}, target)
        assert k.artifact.binary


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("experts, block", [(8, 16), (64, 16), (512, 16), (33, 7)])
def test_moe_align_kernels_compile(target: str, experts: int, block: int) -> None:
    e_mem = (experts + 3) // 4 * 4
    padded = ma.padded_experts(e_mem)
    subs = {ma.E: e_mem, ma.P: block - 1, ma.ONE: 1}
    tokens, tile = ma.small_config(2048, e_mem, block)
    small = _compile(ma.make_align_small(tokens, padded, block, tile), subs, target)
    assert small.artifact.binary and small.mlir.count("gpu.barrier") >= 4
    no_total = {ma.E: e_mem, ma.P: block - 1}  # the histogram and scatter kernels have no [ONE] output
    assert _compile(ma.make_align_histogram(padded), no_total, target).artifact.binary
    assert _compile(ma.make_align_scan(padded, block), subs, target).artifact.binary
    assert _compile(ma.make_align_scatter(padded), no_total, target).artifact.binary
