"""Binary tier for the Hopper GEMM: the ``gemm`` kernel with a warpgroup MMA type compiles for sm_90a to
PTX with ``wgmma.mma_async.sync.aligned.m64nNk16`` and its fences and groups, and ptxas assembles the
configurations the benchmark uses (128x128x64 and 128x256x64, 2 warpgroups, 3-4 stages) with no spills
and no wgmma serialization warning, with cp.async copies and with TMA (``cp.async.bulk.tensor`` on
mbarriers, tensor maps read through global memory after a tensormap-proxy fence; PTX ISA 8.3)."""

import functools
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptx_check import wgmma_descriptor_violations, wgmma_fence_violations
from wavec.codegen.ptxas import find_ptxas
from wavec.errors import CodegenError
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, WGMMA_WAVES, schedule

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None
NEEDS_PTXAS = pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available")

CONFIGS = [(128, 128, 3), (128, 128, 4), (128, 256, 3), (128, 256, 4)]


def _subs(bm: int, bn: int, stages: int) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: 64, gm.NUM_STAGES: stages, gm.GROUP_M: 8}


def _compile(dtype: str, bm: int, bn: int, stages: int, ptx: bool, swizzle: str = "auto", copy: str = "cp.async"):
    kernel = gm.make_gemm(
        getattr(wc, dtype),
        32,
        WGMMA_FOR_DTYPE[dtype],
        WGMMA_WAVES,
        sched=schedule(prefetch_fragments=True, operand_swizzle=swizzle, async_copy=copy),
    )
    if not ptx:
        return wc.compile(kernel, _subs(bm, bn, stages), target="sm_90a", backend="cuda", cache=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        return wc.compile(kernel, _subs(bm, bn, stages), target="sm_90a", backend="cuda", cache=False)


@functools.cache
def ptx_of(dtype: str, bm: int, bn: int, stages: int, swizzle: str = "auto", copy: str = "cp.async") -> str:
    k = _compile(dtype, bm, bn, stages, ptx=True, swizzle=swizzle, copy=copy)
    assert k.artifact.format == "ptx"
    return re.sub(r"[ \t]+", " ", k.artifact.binary.decode())  # one space between operands


@pytest.mark.parametrize("swizzle", ["auto", "none"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("bn", [128, 256])
def test_ptx_has_wgmma_and_its_synchronisation(dtype: str, bn: int, swizzle: str) -> None:
    ptx = ptx_of(dtype, 128, bn, 3, swizzle)
    assert ".target sm_90a" in ptx and ".visible .entry gemm(" in ptx
    inst = f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{dtype}.{dtype}"
    assert ptx.count(inst) == 4  # one per K step of 16 in BLOCK_K = 64 (per warpgroup, same code)
    for s in (
        "wgmma.fence.sync.aligned;",
        "wgmma.commit_group.sync.aligned;",
        "wgmma.wait_group.sync.aligned 0;",
        "fence.proxy.async.shared::cta;",
        "cp.async.cg.shared.global",
    ):
        assert s in ptx, s
    assert "mma.sync.aligned" not in ptx and "ldmatrix" not in ptx
    assert ("xor.b" in ptx) == (swizzle == "auto")  # BLOCK_K = 64: "auto" is the 128-byte swizzle
    # 3 stages: one group stays in flight (wait 1 in the loop), the epilogue waits for it (wait 0)
    assert ptx.index("wgmma.wait_group.sync.aligned 1;") < ptx.index("wgmma.wait_group.sync.aligned 0;")
    # order in the loop: proxy fence, barrier, ..., wgmma fence, the wgmmas, commit, wait
    pos = [
        ptx.index(s)
        for s in (
            "fence.proxy.async.shared::cta;",
            "bar.sync",
            "wgmma.fence.sync.aligned;",
            inst,
            "wgmma.commit_group.sync.aligned;",
            "wgmma.wait_group.sync.aligned 0;",
        )
    ]
    assert pos == sorted(pos)
    # the next tiles' copies are issued between the commit and the wait (in the loop, after the prologue's)
    between = ptx[pos[-2] : pos[-1]]
    assert between.count("cp.async.cg.shared.global") == (128 + bn) * 64 * 2 // 16 // 256
    assert "cp.async.commit_group;" in between


@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("bn", [128, 256])
def test_tma_ptx(bn: int, stages: int) -> None:
    """ "auto" on 128-byte-swizzled tiles: TMA boxes completing on mbarriers; no cp.async, no generic-proxy
    fence; the loop keeps its barrier at 4 stages and releases stages through empty mbarriers at 3."""
    ptx = ptx_of("f16", 128, bn, stages, "auto", "auto")
    assert ".version 8.3" in ptx and ".target sm_90a" in ptx
    tma = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    empty = stages == 3
    assert ptx.count(tma) == 2 * (stages - (1 if empty else 2)) + 2  # prologue fills + the loop's, A and B
    assert ptx.count("mbarrier.init.shared.b64") == stages * (2 if empty else 1)
    assert ptx.count("fence.proxy.tensormap::generic.acquire.sys") == 2 and "fence.mbarrier_init" in ptx
    assert ptx.count("mbarrier.try_wait.parity.shared.b64") == (2 if empty else 1)
    assert ptx.count("mbarrier.arrive.expect_tx.shared.b64") == stages - (1 if empty else 2) + 1
    assert ("mbarrier.arrive.shared.b64" in ptx) == empty
    assert ptx.count("bar.sync") == (1 if empty else 2)  # after the mbarrier init (+ the loop's at 4 stages)
    assert "cp.async.cg" not in ptx and "fence.proxy.async" not in ptx and "cp.async.wait" not in ptx
    inst = f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.f16.f16"
    assert ptx.index("mbarrier.try_wait.parity") < ptx.index(inst) < ptx.index("wgmma.commit_group.sync.aligned;")


@NEEDS_PTXAS
@pytest.mark.parametrize("copy", ["cp.async", "auto"])
@pytest.mark.parametrize("swizzle", ["auto", "none"])
@pytest.mark.parametrize("bm,bn,stages", CONFIGS)
def test_assembles_without_spills(bm: int, bn: int, stages: int, swizzle: str, copy: str) -> None:
    k = _compile("f16", bm, bn, stages, ptx=False, swizzle=swizzle, copy=copy)
    meta = k.artifact.metadata
    assert k.artifact.format == "cubin" and meta.spills == 0
    assert meta.registers is not None and 0 < meta.registers <= 255
    tma = swizzle == "auto" and copy == "auto"
    assert bool(meta.tensor_maps) == tma
    # TMA: the mbarriers take the first 1024-byte slot (the tiles after them stay 1024-byte aligned)
    assert meta.shared_bytes == stages * (bm + bn) * 64 * 2 + (1024 if tma else 0)


@NEEDS_PTXAS
@pytest.mark.parametrize("copy", ["cp.async", "tma-barrier", "tma-mbarrier"])
@pytest.mark.parametrize("bn", [128, 256])
def test_ptxas_does_not_serialize_wgmma(bn: int, copy: str) -> None:
    """ptxas says "wgmma.mma_async instructions are serialized" when it cannot prove the accumulator
    registers untouched between issue and wait; the kernel must not trigger that."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx_of("bf16", 128, bn, 4, "auto", copy))
        proc = subprocess.run(
            [find_ptxas(), "-arch=sm_90a", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True,
            text=True,
            check=True,
        )
    report = proc.stdout + proc.stderr
    assert "serialized" not in report and "0 bytes spill stores" in report, report


@NEEDS_PTXAS
@pytest.mark.parametrize("bk,mode", [(32, 2), (16, 3)], ids=["64B", "32B"])
def test_narrow_swizzles_assemble(bk: int, mode: int) -> None:
    """BLOCK_K = 32 / 16 ("auto": the 64- / 32-byte swizzle): descriptor mode 2 / 3 sets bit 63, part of
    the constant high word ORed in as a 64-bit constant (``split_descriptor``); no spills."""
    kernel = gm.make_gemm(wc.bf16, 32, WGMMA_FOR_DTYPE["bf16"], WGMMA_WAVES)
    subs = {gm.BLOCK_M: 128, gm.BLOCK_N: 256, gm.BLOCK_K: bk, gm.NUM_STAGES: 4, gm.GROUP_M: 8}
    k = wc.compile(kernel, subs, target="sm_90a", backend="cuda", cache=False)
    assert k.artifact.format == "cubin" and k.artifact.metadata.spills == 0
    highs = {int(c) % 2**64 for c in re.findall(r"arith.constant (-?\d+) : i64", k.artifact.mlir)}
    assert any(h % 2**32 == 0 and h >> 62 == mode for h in highs) and "arith.ori" in k.artifact.mlir


# ----- warp specialization ---------------------------------------------------------------------------------


@functools.cache
def ws_kernel(dtype: str, bm: int, bn: int, stages: int, ptx: bool):
    kernel = gm.make_gemm(
        getattr(wc, dtype),
        32,
        WGMMA_FOR_DTYPE[dtype],
        WGMMA_WAVES,
        sched=schedule(prefetch_fragments=True, warp_specialize=True),
    )
    if not ptx:
        return wc.compile(kernel, _subs(bm, bn, stages), target="sm_90a", backend="cuda", cache=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        return wc.compile(kernel, _subs(bm, bn, stages), target="sm_90a", backend="cuda", cache=False)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_ws_ptx(dtype: str) -> None:
    """The producer warpgroup: setmaxnreg down, then the fills (one elected thread); the consumers:
    setmaxnreg up, the full waits, wgmmas, releases; one bar.sync (after the mbarrier init, before the
    split); 2 x 128 + 128 threads."""
    ptx = re.sub(r"[ \t]+", " ", ws_kernel(dtype, 256, 128, 4, True).artifact.binary.decode())
    assert ".maxntid 384, 1, 1" in ptx
    dec, inc = ptx.index("setmaxnreg.dec.sync.aligned.u32 40;"), ptx.index("setmaxnreg.inc.sync.aligned.u32 232;")
    tma = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    inst = f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{dtype}.{dtype}"
    assert ptx.count(tma) == 2 and ptx.count("bar.sync") == 1 and ptx.index("bar.sync") < min(dec, inc)
    # the producer's fills and the consumers' wgmmas sit in different branches of the split
    fills, mmas = ptx.index(tma), ptx.index(inst)
    assert (dec < fills < inc < mmas) or (inc < mmas < dec < fills)
    assert ptx.count("mbarrier.arrive.expect_tx.shared.b64") == 1 and "mbarrier.arrive.shared.b64" in ptx
    assert ptx.count("fence.proxy.tensormap::generic.acquire.sys") == 2


@NEEDS_PTXAS
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_ws_assembles_without_spills(dtype: str) -> None:
    """ptxas gives the 384-thread kernel 168 registers per thread (the most its block allows); the
    consumers' 128x128 accumulators (256x128 tile) fit in the 232 setmaxnreg raises them to: no spills, no
    wgmma serialization."""
    k = ws_kernel(dtype, 256, 128, 4, False)
    meta = k.artifact.metadata
    assert k.artifact.format == "cubin" and meta.spills == 0 and meta.registers == 168
    assert meta.shared_bytes == 4 * (256 + 128) * 64 * 2 + 1024
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ws_kernel(dtype, 256, 128, 4, True).artifact.binary.decode())
        proc = subprocess.run(
            [find_ptxas(), "-arch=sm_90a", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
            capture_output=True,
            text=True,
            check=True,
        )
    report = proc.stdout + proc.stderr
    assert "serialized" not in report and "0 bytes spill stores" in report, report


@pytest.mark.parametrize("bm,bn,ws", [(128, 256, True), (128, 256, False), (128, 128, True)])
def test_accumulator_init_is_not_sunk_past_the_fence(bm: int, bn: int, ws: bool, monkeypatch) -> None:
    """The zero-initialised accumulator goes through ``fence_operands`` before the loop, so LLVM cannot
    move its 128 ``mov``s between ``wgmma.fence`` and the first wgmma of a peeled first iteration (it did
    for the warp-specialized 128x256 tile).  Checked on the PTX of the tile that showed it."""

    monkeypatch.setattr(ptxas_mod, "find_ptxas", lambda: None)
    kernel = gm.make_gemm(
        wc.f16, 32, WGMMA_FOR_DTYPE["f16"], WGMMA_WAVES, sched=schedule(prefetch_fragments=True, warp_specialize=ws)
    )
    ptx = wc.compile(kernel, _subs(bm, bn, 4), target="sm_90a", backend="cuda", cache=False).artifact.binary.decode()
    assert ptx.count("wavec: accumulator operands fenced") == 1
    assert "wgmma.fence.sync.aligned" in ptx and not wgmma_fence_violations(ptx)


def test_fence_check_refuses_a_sunk_accumulator_write(monkeypatch) -> None:
    """Without ``fence_operands`` (the lowering before the fix) LLVM sinks the 128 zeroing ``mov``s of the
    warp-specialized 128x256 accumulator past ``wgmma.fence``: the PTX check finds them and the compile
    is refused with a CodegenError, instead of a kernel that reads undefined registers.  LLVM peels the
    first iteration (where it sank them) only with the descriptors built as before ``split_descriptor``,
    so the old descriptor rule is restored too (the fence check runs first)."""
    import wavec.codegen.hopper.wgmma as lw
    from wavec.codegen import lowering
    from wavec.frontend.ops_hopper import MatrixDescriptor

    monkeypatch.setitem(lowering.LOWERINGS, MatrixDescriptor, _old_descriptor_rule)
    monkeypatch.setattr(ptxas_mod, "find_ptxas", lambda: None)
    monkeypatch.setattr(lw, "fence_operands", lambda s, count: s)
    kernel = gm.make_gemm(
        wc.f16, 32, WGMMA_FOR_DTYPE["f16"], WGMMA_WAVES, sched=schedule(prefetch_fragments=True, warp_specialize=True)
    )
    with pytest.raises(CodegenError, match="between wgmma.fence and the wgmma"):
        wc.compile(kernel, _subs(128, 256, 4), target="sm_90a", backend="cuda", cache=False)


def _old_descriptor_rule(fb, node) -> None:
    """``lower_descriptor`` before the fix: the whole descriptor as one 64-bit index sum (start address
    >> 4 + LBO, SBO and swizzle bits), so the PTX builds it with ``add.s64`` and a carry into the high word."""
    import sympy
    from iree.compiler import ir
    from iree.compiler.dialects import arith

    import wavec.codegen.hopper.wgmma as lw
    from wavec.frontend.tracing import capture_root

    alloc = capture_root(node.args[0])
    smem, dims, tile = alloc.kwargs["smem_layout"], tuple(alloc.kwargs["tile"]), tuple(alloc.kwargs["tile"].values())
    layout = node.meta["layout"]
    row, k = (sympy.expand(layout.seq(d).start - sympy.sympify(alloc.kwargs["base"][d])) for d in dims)
    address = (
        lw._tile_address_symbol(fb, alloc)
        + sympy.sympify(node.meta.get("stage", 0)) * tile[0] * tile[1] * smem.elem_bytes
        + smem.byte_offset(row, k, tile)
    )
    fb.values[node] = arith.index_cast(
        ir.IntegerType.get_signless(64), fb.index(sympy.floor(address / 16) + smem.descriptor_bits(tile))
    )


def _ws_wide_ptx(monkeypatch, bn: int = 256) -> str:

    monkeypatch.setattr(ptxas_mod, "find_ptxas", lambda: None)
    kernel = gm.make_gemm(
        wc.f16, 32, WGMMA_FOR_DTYPE["f16"], WGMMA_WAVES, sched=schedule(prefetch_fragments=True, warp_specialize=True)
    )
    return wc.compile(kernel, _subs(128, bn, 4), target="sm_90a", backend="cuda", cache=False).artifact.binary.decode()


@pytest.mark.parametrize("bn", [256, 192])
def test_descriptors_have_a_constant_high_word(bn: int, monkeypatch) -> None:
    """Every wgmma descriptor of the warp-specialized 128x256 / 128x192 tiles (two consumer warpgroups,
    the tiles that were wrong on an H100) is ``or.b64 %d, %lo, C`` with the high word C = SBO and swizzle
    mode << 32: ptxas cannot lose a carry chain it never sees."""
    ptx = _ws_wide_ptx(monkeypatch, bn)
    assert not wgmma_descriptor_violations(ptx)
    assert re.search(r"or\.b64\s+%rd\d+, %rd\d+, 4611686293305294848;", ptx)  # SBO 1024 B, 128-byte swizzle


def test_descriptor_check_finds_the_64bit_add_descriptors(monkeypatch) -> None:
    """With the descriptor lowering before the fix, the PTX of the warp-specialized 128x256 tile builds
    each descriptor with ``add.s64 ..., 4611686293305360384``; ptxas 12.9 dropped the high word of the
    peeled first iteration's A descriptors (SASS ``R2UR UR17, R11`` with R11 the M offset's high half):
    the check lists them all and the compile is refused with a CodegenError."""
    import wavec.codegen.hopper.wgmma  # noqa: F401  (registers its rules first, so the patch below stays)
    import wavec.compiler as compiler
    from wavec.codegen import lowering
    from wavec.frontend.ops_hopper import MatrixDescriptor

    monkeypatch.setitem(lowering.LOWERINGS, MatrixDescriptor, _old_descriptor_rule)
    with monkeypatch.context() as mp:
        mp.setattr(compiler, "_check_ptx", lambda ptx, trace: None)
        old = _ws_wide_ptx(mp)
    bad = wgmma_descriptor_violations(old)
    assert len(bad) == 16 and all(re.fullmatch(r"add.s64 %rd\d+, %rd\d+, 46116862933053603\d\d", b) for b in bad), bad
    with pytest.raises(CodegenError, match="wgmma matrix descriptors are not built"):
        _ws_wide_ptx(monkeypatch)
