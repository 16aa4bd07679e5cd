"""Binary tier for the opt-in decode split kernels (``decode_variants``): each compiles for sm_90a (and sm_80
where it applies: not wgmma), without spills where ptxas exists unless it is a launch bound that must
spill; the register counts are printed (``pytest -s``) for docs/attention.md "Decode variants"."""

from __future__ import annotations

import pytest

import wavec as wc
from wavec.codegen import ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels import decode_variants as dv
from wavec.kernels.decode import decode_subs, make_decode_split, split_kernel_subs

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None
REGISTER_FILE = 65536

CASES = [  # (BLOCK_N, waves, stages), Variant, targets
    ((64, 1, 4), dv.Variant("wgmma"), ("sm_90a",)),  # WGMMA_CONFIG
    ((64, 1, 3), dv.Variant("wgmma"), ("sm_90a",)),
    ((32, 1, 4), dv.Variant("wgmma"), ("sm_90a",)),
    ((32, 1, 6), dv.Variant("wgmma"), ("sm_90a",)),
    ((128, 1, 3), dv.Variant("wgmma"), ("sm_90a",)),
    ((64, 1, 2), dv.Variant("wgmma", "cp.async"), ("sm_90a",)),
    ((64, 1, 3), dv.Variant("wgmma", intra_wg_overlap=True), ("sm_90a",)),
    ((64, 1, 4), dv.Variant("wgmma", intra_wg_overlap=True), ("sm_90a",)),
    ((32, 2, 2), dv.Variant(l2_prefetch=128), ("sm_80", "sm_90a")),
    ((16, 2, 4), dv.DEFAULT, ("sm_80", "sm_90a")),
    ((32, 2, 3), dv.DEFAULT, ("sm_80", "sm_90a")),
    ((16, 2, 2), dv.Variant(launch_bound=5), ("sm_80", "sm_90a")),
    ((16, 2, 4), dv.Variant(launch_bound=6), ("sm_80", "sm_90a")),
]


def _name(v: dv.Variant) -> str:
    return f"{v.mma}-{v.async_copy}-lb{v.launch_bound}-ov{int(v.intra_wg_overlap)}-l2p{v.l2_prefetch}"


def _compile(
    cfg: tuple, variant: dv.Variant, target: str, head_dim: int = 128, group: int = 4, direct=False, dtype=wc.bf16
):
    block_n, waves, stages = cfg
    subs = split_kernel_subs(decode_subs(head_dim, group, block_n, waves, stages, variant.wave_rows), False, direct)
    kernel = make_decode_split(dtype, group, direct=direct, waves=waves, **variant.constraint_options())
    return wc.compile(kernel, subs, target=target, backend="cuda", cache=False)


@pytest.mark.parametrize("direct", [False, True], ids=["split", "direct"])
@pytest.mark.parametrize(
    "cfg, variant, target",
    [(c, v, t) for c, v, ts in CASES for t in ts],
    ids=[f"{'x'.join(map(str, c))}-{_name(v)}-{t}" for c, v, ts in CASES for t in ts],
)
def test_variant_compiles(cfg: tuple, variant: dv.Variant, target: str, direct: bool) -> None:
    k = _compile(cfg, variant, target, direct=direct)
    m = k.metadata
    wgmma = variant.mma == "wgmma"
    threads = (128 if wgmma else 32) * cfg[1]
    assert m.block == (threads, 1, 1)
    expect = {"B", "QL", "H", "N", "KVH", "scale"} | (set() if direct else {"SP"})
    assert set(m.constants) == expect, m.constants
    tma = "nvvm.cp.async.bulk.tensor.shared.cluster.global" in k.mlir
    assert tma == (wgmma and variant.async_copy != "cp.async")
    assert ("wgmma.mma_async.sync.aligned" in k.mlir) == wgmma
    if variant.l2_prefetch is not None:  # the qualifier is written into the PTX, which the MLIR does not show
        assert "nvgpu.device_async_copy" in k.mlir
    if not HAS_PTXAS:
        return
    print(f"\n{target} {cfg} {variant} direct={direct}: {m.registers} registers, {m.spills} bytes spilled")
    assert k.artifact.format == "cubin"
    if variant.launch_bound is None:
        assert m.spills == 0, (m.registers, m.spills)
    else:  # the bound holds (unbounded, these tiles take 210-216 registers): its workgroups' registers fit
        assert m.registers * threads * variant.launch_bound <= REGISTER_FILE, m.registers


@pytest.mark.skipif(not HAS_PTXAS, reason="register counts need ptxas")
def test_wgmma_tile_holds_fewer_registers_than_the_default() -> None:
    """What the variant is for: the 64-key warpgroup tile, ``WGMMA_CONFIG``'s stages deep, in < 200 registers
    at 128 threads (the default mma.sync tile: 255 at 64), d128 and d64, GQA 4 and MHA, bf16 and f16."""
    for head_dim, group, dtype in ((128, 4, wc.bf16), (128, 1, wc.bf16), (64, 4, wc.bf16), (128, 4, wc.f16)):
        m = _compile(dv.WGMMA_CONFIG, dv.Variant("wgmma"), "sm_90a", head_dim, group, dtype=dtype).metadata
        print(f"\nwgmma {dv.WGMMA_CONFIG} d{head_dim} G{group} {dtype.name}: {m.registers} registers")
        assert m.registers < 200 and m.spills == 0, (head_dim, group, m.registers, m.spills)
        stages = dv.WGMMA_CONFIG[2]
        assert m.shared_bytes >= stages * 64 * head_dim * 2 * 2  # the stages of K and V


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_ptx_carries_the_launch_bound_and_the_l2_prefetch(target: str, monkeypatch) -> None:
    monkeypatch.setattr(ptxas_mod, "find_ptxas", lambda: None)  # keep the PTX text
    bound = _compile((16, 2, 2), dv.Variant(launch_bound=5), target).artifact
    assert bound.format == "ptx" and "\n.minnctapersm 5" in bound.binary.decode()
    ptx = _compile((32, 2, 2), dv.Variant(l2_prefetch=128), target).artifact.binary.decode()
    copies = [line for line in ptx.splitlines() if "cp.async.cg" in line or "cp.async.ca" in line]
    assert copies and all(".L2::128B" in line for line in copies), copies[:2]
