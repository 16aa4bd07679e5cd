"""Binary tier for intra-warpgroup overlap (``intra_wg_overlap=True``, sm_90a): in every key loop the next
tile's Q Kᵀ wgmmas are issued and committed before this tile's softmax (its ``ex2``) with no
``wgmma.wait_group`` between them, one ``wait_group 0`` per iteration after P·V (and, where nvdisasm is
found, no ``WARPGROUP.DEPBAR`` between them in the SASS); the tiles assemble with no spills and no wgmma
serialization."""

from __future__ import annotations

import re
import subprocess

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels.attention import BLOCK_N, attention_config, make_attention

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None
K_MAJOR, MN_MAJOR = ", p, 1, 1, 0;", ", p, 1, 1, 1;"  # imm-trans-b: K (Q Kᵀ) or V (P V)


def _ptx(causal, config: tuple, head_dim: int, overlap: bool, dtype=wc.bf16) -> str:
    subs, groups = attention_config(head_dim, config=config, mma="wgmma", intra_wg_overlap=overlap)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        kernel = make_attention(  # as attention() builds it: heavy-first when causal, the split epilogue
            dtype, "bhsd", causal, groups, "wgmma", split_epilogue=True, intra_wg_overlap=overlap
        )
        k = wc.compile(kernel, subs, target="sm_90a", backend="cuda", cache=False)
    return k.artifact.binary.decode()


def _event(line: str) -> str | None:
    if "wgmma.mma_async" in line or K_MAJOR in line or MN_MAJOR in line:
        return None  # the instruction spans lines: its immediates end it
    for pattern, name in ((r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", "wait{}"), (r"ex2\.approx", "ex2")):
        if m := re.search(pattern, line):
            return name.format(*m.groups())
    return "commit" if "wgmma.commit_group" in line else None


def _loops(ptx: str) -> list[list[str]]:
    """Per key loop (a label to the last branch back to it) holding wgmmas: its events in program order: "S" /
    "PV" (a wgmma reading K / V), "commit", "wait<N>", "ex2"."""
    lines, labels, spans = ptx.splitlines(), {}, {}
    for i, ln in enumerate(lines):
        if m := re.match(r"(\$\w+):", ln):
            labels[m.group(1)] = i
        if (m := re.search(r"\bbra(?:\.uni)?\s+(\$\w+);", ln)) and labels.get(m.group(1), i) < i:
            spans[labels[m.group(1)]] = i  # a loop may have several back edges (a skipped fill's branch)
    loops = []
    for start, end in sorted(spans.items()):
        events: list[str] = []
        for x in lines[start : end + 1]:
            kind = "S" if K_MAJOR in x else "PV" if MN_MAJOR in x else _event(x)
            if kind is not None and not (events and kind == events[-1] and kind != "commit"):
                events.append(kind)
        if "S" in events:
            loops.append(events)
    return loops


def _from_scores(events: list[str]) -> list[str]:
    """The loop's events rotated to start at its Q Kᵀ wgmmas (LLVM may lay the body out from any block)."""
    at = events.index("S")
    return events[at:] + events[:at]


@pytest.mark.parametrize("head_dim,config", [(128, (64, 64, 1)), (64, (128, 64, 2))])
@pytest.mark.parametrize("causal", [False, True])
def test_next_scores_issued_before_this_softmax(head_dim: int, config: tuple, causal: bool) -> None:
    loops = [_from_scores(e) for e in _loops(_ptx(causal, config, head_dim, overlap=True))]
    assert len(loops) == 2, loops  # full tiles, then the ragged or diagonal ones
    for events in loops:
        assert events == ["S", "commit", "ex2", "PV", "commit", "wait0"], events
    # the unrotated kernel waits for the scores before their softmax: the property above can fail
    for events in (_from_scores(e) for e in _loops(_ptx(causal, config, head_dim, overlap=False))):
        assert events[:4] == ["S", "commit", "wait0", "ex2"], events


def test_the_prologue_computes_the_first_scores() -> None:
    """Outside the loops: per loop one Q Kᵀ chain (its 4 wgmmas at d64, BLOCK_N 64) and its wait."""
    ptx = _ptx(False, (128, 64, 2), 64, overlap=True)
    loop_s = sum(e.count("S") for e in _loops(ptx))
    assert ptx.count(K_MAJOR) == 2 * 4 + 2 * 4 and loop_s == 2
    assert len(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+0;", ptx)) == 4  # two per loop: before, inside


# d128 with BLOCK_N 128 is left out: two 64x128 score tiles, the accumulator and Q need 255 registers and spill
# 48-96 bytes with the split epilogue; attention_config does not pick it with the overlap (OVERLAP_SCORES)
OVERLAP_TILES = [
    (128, (64, 64, 1)),
    (128, (64, 32, 1)),
    (128, (128, 64, 2)),
    (64, (128, 64, 2)),
    (64, (128, 128, 2)),
    (64, (64, 128, 1)),
]


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize("head_dim,config", OVERLAP_TILES)
def test_overlap_tiles_have_no_spills_and_no_serialization(head_dim: int, config: tuple, tmp_path) -> None:
    """Causal (both loops, the masked one with its index math) at 3 stages: two score tiles live at once."""
    for seq_q in (64, 16384):  # the short-query and long-causal d128 tiles have BLOCK_N 128: not with overlap
        assert attention_config(128, seq_q, None, "wgmma", True, intra_wg_overlap=True)[0][BLOCK_N] == 64
    src = tmp_path / "k.ptx"
    src.write_text(_ptx(True, config, head_dim, overlap=True))
    cmd = [find_ptxas(), "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")]
    report = subprocess.run(cmd, capture_output=True, text=True, check=True)
    text = report.stdout + report.stderr
    assert "serialized" not in text and "0 bytes spill stores" in text, text


def _nvdisasm() -> str | None:
    """nvdisasm on PATH or beside ptxas (a CUDA toolkit has it; the nvcc wheel does not)."""
    import shutil
    from pathlib import Path

    ptxas = find_ptxas()
    beside = Path(ptxas).with_name("nvdisasm") if ptxas else None
    return shutil.which("nvdisasm") or (str(beside) if beside is not None and beside.exists() else None)


@pytest.mark.skipif(not HAS_PTXAS or _nvdisasm() is None, reason="needs ptxas and nvdisasm")
def test_sass_keeps_the_next_scores_in_flight_during_the_softmax(tmp_path) -> None:
    """d128 64x64x1 (Q Kᵀ is HGMMA.64x64x16, P V HGMMA.64x128x16): in each loop of the rotated kernel the
    eight Q Kᵀ HGMMAs run into the MUFU.EX2 of the softmax with no WARPGROUP.DEPBAR between (ptxas kept
    the overlap); the unrotated kernel waits between them everywhere."""

    def overlapped(overlap: bool) -> int:
        src = tmp_path / f"k{overlap}.ptx"
        src.write_text(_ptx(True, (64, 64, 1), 128, overlap))
        cubin = tmp_path / f"k{overlap}.cubin"
        subprocess.run([find_ptxas(), "-arch=sm_90a", str(src), "-o", str(cubin)], check=True, capture_output=True)
        sass = subprocess.run([_nvdisasm(), "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
        events = re.findall(r"HGMMA\.64x64x16|HGMMA\.64x128x16|MUFU\.EX2|WARPGROUP\.DEPBAR", sass)
        runs = [e for i, e in enumerate(events) if i == 0 or e != events[i - 1]]
        return sum(a == "HGMMA.64x64x16" and b == "MUFU.EX2" for a, b in zip(runs, runs[1:]))

    assert overlapped(True) == 2  # the full loop and the diagonal one
    assert overlapped(False) == 0
