"""Binary tier for flash attention: the default configurations assemble for sm_90 with no spills, the
inner loop uses ldmatrix (plain for K, .trans for V), mma.sync and ex2.approx, and converts P to the A
operand in registers (no shared-memory round trip)."""

from __future__ import annotations

import collections
import re

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels.attention import CONFIGS, WGMMA_CONFIGS, attention_config, make_attention

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize(
    "head_dim,seq_q,causal",
    [(64, None, False), (64, None, True), (128, None, False), (128, None, True), (64, 64, False), (128, 32, True)],
)
def test_heuristic_configs_have_no_spills(head_dim: int, seq_q, causal: bool) -> None:
    subs, waves = attention_config(head_dim, seq_q)
    k = wc.compile(make_attention(wc.f16, "bhsd", causal, waves), subs, target="sm_90", backend="cuda", cache=False)
    m = k.metadata
    assert m.spills == 0 and m.registers <= 255, (m.registers, m.spills)
    assert m.block == (32 * waves, 1, 1)


def test_ptx_inner_loop(monkeypatch) -> None:
    monkeypatch.setattr(ptxas_mod, "find_ptxas", lambda: None)
    subs, waves = attention_config(128)
    k = wc.compile(make_attention(wc.bf16, "bshd", False, waves), subs, target="sm_90", backend="cuda", cache=False)
    ptx = k.artifact.binary.decode()
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "ex2.approx.ftz.f32" in ptx
    assert "cp.async.cg.shared.global" in ptx
    assert "cvt.rn.bf16x2.f32" in ptx and "setp.nan" not in ptx  # P and O: packed hardware conversions
    assert k.mlir.count("memref.alloc") == 2  # K and V tiles (shared by both loops): P stays in registers


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize("head_dim,config", [(d, c) for d, cs in CONFIGS.items() for c in cs[1:]])
def test_sweep_candidates_have_no_spills(head_dim: int, config: tuple) -> None:
    """Every tile ``benchmarks/attention.py --wavec-configs sweep`` tries assembles without spills."""
    subs, waves = attention_config(head_dim, config=config)
    k = wc.compile(make_attention(wc.bf16, "bshd", False, waves), subs, target="sm_90", backend="cuda", cache=False)
    assert k.metadata.spills == 0, (config, k.metadata.registers, k.metadata.spills)


# ----- Hopper wgmma (mma="wgmma", sm_90a) ------------------------------------------------------------------


def _wgmma_ptx(dtype, causal: bool, config: tuple, head_dim: int = 128, async_copy: str = "auto") -> str:
    subs, groups = attention_config(head_dim, config=config, mma="wgmma")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = wc.compile(
            make_attention(dtype, "bhsd", causal, groups, mma="wgmma", async_copy=async_copy),
            subs,
            target="sm_90a",
            backend="cuda",
            cache=False,
        )
    return k.artifact.binary.decode()


def test_wgmma_ptx_inner_loop() -> None:
    """d128, 128x128, 2 warpgroups: per loop 8 m64n128k16 wgmmas for QKᵀ (Q in registers) and 8 for P·V
    (P in registers, V MN-major: imm-trans-b = 1), no mma.sync, no ldmatrix, no shared round trip for P."""
    ptx = _wgmma_ptx(wc.f16, False, (128, 128, 2), async_copy="cp.async")
    inst = "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"
    assert ptx.count(inst) == 32  # 2 loops x (8 + 8)
    assert ptx.count(", p, 1, 1, 0;") == 16 and ptx.count(", p, 1, 1, 1;") == 16  # K K-major, V MN-major
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx and "st.shared" not in ptx
    for s in (
        "wgmma.fence.sync.aligned;",
        "wgmma.commit_group.sync.aligned;",
        "fence.proxy.async.shared::cta;",
        "ex2.approx.ftz.f32",
        "cp.async.cg.shared.global",
    ):
        assert s in ptx, s


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize("copy", ["cp.async", "auto"])
@pytest.mark.parametrize("head_dim,config", [(d, c) for d in (64, 128) for c in WGMMA_CONFIGS[d]])
def test_wgmma_configs_have_no_spills_and_no_serialization(head_dim: int, config: tuple, copy: str, tmp_path) -> None:
    """Every wgmma candidate assembles for sm_90a without spills, with K/V by cp.async and by TMA (what
    "auto" takes on sm_90a), and ptxas does not serialize the wgmmas (it would if it saw the accumulator or
    A registers touched between issue and wait)."""
    import subprocess

    src = tmp_path / "k.ptx"
    src.write_text(_wgmma_ptx(wc.bf16, True, config, head_dim, copy))
    proc = subprocess.run(
        [find_ptxas(), "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
        check=True,
    )
    report = proc.stdout + proc.stderr
    assert "serialized" not in report and "0 bytes spill stores" in report, report


def _opcodes(ptx: str) -> collections.Counter:
    """Instructions by opcode (with its type suffixes; bf16 spelled f16), predicates dropped."""
    return collections.Counter(
        re.match(r"\s*(?:@!?%\w+\s+)?([\w.:]+)", ln).group(1).replace("bf16", "f16")
        for ln in ptx.splitlines()
        if re.match(r"\s+@?[a-z%]", ln)
    )


def _loop_sizes(ptx: str) -> list[int]:
    """Instructions per loop body (from a label to the branch back to it), in program order."""
    lines, labels, sizes = ptx.splitlines(), {}, []
    for i, ln in enumerate(lines):
        if m := re.match(r"(\$\w+):", ln):
            labels[m.group(1)] = i
        if (m := re.search(r"\bbra(?:\.uni)?\s+(\$\w+);", ln)) and labels.get(m.group(1), i) < i:
            sizes.append(sum(bool(re.match(r"\s+@?[a-z%]", x)) for x in lines[labels[m.group(1)] : i + 1]))
    return sizes


@pytest.mark.parametrize("head_dim", [64, 128])
def test_wgmma_bf16_code_is_the_f16_code(head_dim: int) -> None:
    """bf16 P (and O) conversions are one ``cvt.rn.bf16x2.f32`` per pair, as f16's ``cvt.rn.f16x2.f32``: the
    instruction mix of the whole kernel and of each loop iteration is the f16 one.  ``arith.truncf`` to bf16
    used to be expanded by IREE into integer rounding (shr, and, 2 add, setp.nan, selp.b16 per element, a
    prmt per pair): 889 instead of 441 instructions per iteration at d64, 982 instead of 534 at d128."""
    config = WGMMA_CONFIGS[head_dim][0]
    f16, bf16 = _wgmma_ptx(wc.f16, False, config, head_dim), _wgmma_ptx(wc.bf16, False, config, head_dim)
    assert bf16.count("cvt.rn.bf16x2.f32") == f16.count("cvt.rn.f16x2.f32") > 0
    for seq in ("setp.nan", "selp.b16", "prmt.b32"):
        assert seq not in bf16, seq
    assert _opcodes(bf16) == _opcodes(f16)
    loops = _loop_sizes(bf16)
    # the two loops (full tiles, masked edge), each with its TMA full-barrier spin loop on sm_90a
    assert len(loops) == 4 and loops == _loop_sizes(f16), (loops, _loop_sizes(f16))


# ----- TMA for K and V (async_copy="tma") --------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_wgmma_tma_ptx(layout: str) -> None:
    """d128 128x128x2: K and V come as 4-D bulk tensor copies (rank-4 maps, batch coordinates), two
    64-element boxes per tile, in both loops' prologues and bodies (2 x 2 x 2 x 2 = 16); no cp.async and no
    proxy fence (TMA writes through the async proxy), mbarrier waits in the loops."""
    subs, groups = attention_config(128, config=(128, 128, 2), mma="wgmma")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = wc.compile(
            make_attention(wc.f16, layout, False, groups, mma="wgmma", async_copy="tma"),
            subs,
            target="sm_90a",
            backend="cuda",
            cache=False,
        )
    ptx = k.artifact.binary.decode()
    assert ptx.count("cp.async.bulk.tensor.4d.shared::cluster.global") == 16
    assert "cp.async.cg" not in ptx and "fence.proxy.async" not in ptx  # (one empty cp.async drain remains)
    assert "mbarrier.try_wait.parity" in ptx and "mbarrier.arrive.expect_tx" in ptx


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
def test_wgmma_tma_no_spills() -> None:
    """ptxas sm_90a, f16 d128 128x128x2 causal: no spills (registers: docs/attention.md, 253 vs 250 with
    cp.async causal; 230 vs 252 non-causal)."""
    subs, groups = attention_config(128, config=(128, 128, 2), mma="wgmma")
    k = wc.compile(
        make_attention(wc.f16, "bhsd", True, groups, mma="wgmma", async_copy="tma"),
        subs,
        target="sm_90a",
        backend="cuda",
        cache=False,
    )
    assert k.metadata.spills == 0 and k.metadata.registers <= 255, (k.metadata.registers, k.metadata.spills)
