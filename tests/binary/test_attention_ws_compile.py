"""Binary tier for warp-specialized flash attention (``make_attention(..., warp_specialize=True)``, sm_90a):
the PTX has the producer / consumer split (``setmaxnreg`` 24 / 240, 384 threads), the consumers' full-mbarrier
waits (V's after the softmax) and their releases after the wgmma waits (K's after S's, V's after P·V's), the
producer's empty-mbarrier waits and TMA boxes for both key loops, one workgroup barrier (after the mbarrier
init); ptxas assembles every offered tile with no spills and no wgmma serialization (C7514-style warnings say
"serialized").  With ``pingpong=True`` the named barriers sit around each wgmma chain."""

from __future__ import annotations

import re
import subprocess

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels.attention import WS_CONFIG, WS_PRODUCER_REGS, attention_config, make_attention

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None


def _ptx(dtype, causal, config=WS_CONFIG, head_dim: int = 128, layout: str = "bhsd", pingpong=False) -> str:
    subs, groups = attention_config(head_dim, config=config, mma="wgmma", warp_specialize=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = wc.compile(
            make_attention(
                dtype, layout, causal, groups, mma="wgmma", split_epilogue=True, warp_specialize=True, pingpong=pingpong
            ),
            subs,
            target="sm_90a",
            backend="cuda",
            cache=False,
        )
    assert k.metadata.block == (groups * 128 + 128, 1, 1)
    return k.artifact.binary.decode()


def _instructions(ptx: str) -> list[str]:
    return [ln.strip() for ln in ptx.splitlines() if re.match(r"\s*@?[a-z%]", ln)]  # (wgmmas: unindented asm)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_ws_ptx_protocol(causal: bool, layout: str) -> None:
    ptx = _ptx(wc.f16, causal, layout=layout)
    assert ".maxntid 384, 1, 1" in ptx
    assert ptx.count(f"setmaxnreg.dec.sync.aligned.u32 \t{WS_PRODUCER_REGS};") == 1, "producer"
    assert ptx.count("setmaxnreg.inc.sync.aligned.u32 \t240;") == 1, "consumers"
    assert ptx.count("bar.sync") == 1  # after the mbarrier init: no barrier between or inside the loops
    assert "cp.async.cg" not in ptx and "fence.proxy.async" not in ptx
    inst = _instructions(ptx)
    split = next(i for i, x in enumerate(inst) if x.startswith("setmaxnreg.dec"))
    assert not any(x.startswith(("ld.global", "wgmma")) for x in inst[:split]), "Q is loaded after the split"
    # the consumers, per loop: K's full wait before the Q Kᵀ wgmmas, its release after their wait; V's full
    # wait after the softmax (ex2), before the P·V wgmmas, its release after their wait
    releases = [i for i, x in enumerate(inst) if re.match(r"(@%p\d+ )?mbarrier\.arrive\.shared\.b64", x)]
    assert len(releases) == 4, releases  # K and V, in each key loop (full tiles, masked edge)
    for r in releases:
        last = next(x for x in reversed(inst[:r]) if x.startswith("wgmma"))
        assert last == "wgmma.wait_group.sync.aligned \t0;", last  # every wgmma reading the stage retired
    for k_release, v_release in (releases[:2], releases[2:]):
        between = inst[k_release:v_release]
        ex2 = next(i for i, x in enumerate(between) if x.startswith("ex2.approx"))
        pv = next(i for i, x in enumerate(between) if x.startswith("wgmma.mma_async"))
        assert any(x.startswith("mbarrier.try_wait.parity") for x in between[ex2:pv]), "V waited after the softmax"
    assert ptx.count("wgmma.wait_group.sync.aligned \t0;") == 4  # S and P·V, in each loop
    # the producer: both loops' fills (each K and V tile two 64-element boxes), waits for the releases
    assert ptx.count("cp.async.bulk.tensor.4d.shared::cluster.global") >= 8
    assert ptx.count("mbarrier.arrive.expect_tx") >= 2
    assert ptx.count("mbarrier.try_wait.parity") >= 8  # 4 consumer full waits, >= 4 producer empty waits


def _ptxas(ptx: str, tmp_path) -> str:
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    proc = subprocess.run(
        [find_ptxas(), "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout + proc.stderr


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize(
    "dtype,causal,config,head_dim",
    [
        (wc.f16, False, (128, 128, 2), 128),
        (wc.bf16, True, (128, 128, 2), 128),
        (wc.f16, False, (128, 176, 2), 128),
        (wc.bf16, True, (128, 112, 2), 128),
        (wc.f16, True, (128, 128, 2), 64),
    ],
    ids=["d128-128x128-full", "d128-128x128-causal-bf16", "d128-128x176-full", "d128-128x112-causal-bf16", "d64"],
)
def test_ws_tiles_have_no_spills_and_no_serialization(dtype, causal, config, head_dim, tmp_path) -> None:
    report = _ptxas(_ptx(dtype, causal, config, head_dim), tmp_path)
    assert "serialized" not in report and "0 bytes spill stores" in report, report
    assert "Used 168 registers" in report, report  # 65536 / 384 threads: the pool setmaxnreg redistributes


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
def test_the_check_sees_spills(tmp_path) -> None:
    """The test above can fail: the same kernel with the consumers held to 128 registers spills."""
    inc = "setmaxnreg.inc.sync.aligned.u32 \t{};"
    ptx = _ptx(wc.f16, False).replace(inc.format(240), inc.format(128))
    report = _ptxas(ptx, tmp_path)
    assert "0 bytes spill stores" not in report, report


def _events(ptx: str) -> list[str]:
    keys = ("mbarrier.try_wait", "mbarrier.arrive.shared", "wgmma.fence", "wgmma.commit", "wgmma.wait", "ex2.approx")
    keys += ("bar.sync", "bar.arrive", "st.global")
    out = []
    for x in _instructions(ptx):
        key = next((k for k in keys if re.match(r"(@%p\d+ )?" + re.escape(k), x)), None)
        if key and (not out or out[-1] != key):
            out.append(key)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_pingpong_ptx(causal: bool) -> None:
    """Each consumer's chains (fence .. commit) are taken in turn: ``bar.sync`` on its own barrier before the
    fence (after the stage's full wait), ``bar.arrive`` on the other's right after the commit, before the
    wgmma wait; one ``bar.arrive`` before the loops (warpgroup 1 lets 0 start), one ``bar.sync`` after them."""
    ptx = _ptx(wc.f16, causal, pingpong=True)
    named = [x for x in _instructions(ptx) if re.match(r"(@%p\d+ )?bar\.(sync|arrive)\s+%r\d+, 256;", x)]
    assert len(named) == 10, named  # 2 loops x 2 chains x (sync + arrive) + the first arrive + the last sync
    ev = _events(ptx)
    fences = [i for i, e in enumerate(ev) if e == "wgmma.fence"]
    assert len(fences) == 4
    for f in fences:
        assert ev[f - 2 : f] == ["mbarrier.try_wait", "bar.sync"], ev[f - 2 : f + 4]
        assert ev[f + 1 : f + 4] == ["wgmma.commit", "bar.arrive", "wgmma.wait"], ev[f - 2 : f + 4]
    assert ev.index("bar.arrive") < ev.index("wgmma.fence") and "bar.sync" in ev[fences[-1] + 4 : ev.index("st.global")]


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize("causal", [False, True])
def test_pingpong_has_no_spills_and_no_serialization(causal: bool, tmp_path) -> None:
    report = _ptxas(_ptx(wc.bf16, causal, pingpong=True), tmp_path)
    assert "serialized" not in report and "0 bytes spill stores" in report, report
