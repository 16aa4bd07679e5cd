"""Binary tier: the odd-row kernels of drifting slices (``kernels/rows_odd_drift.py``: ``x[:, :n]`` whose offset
within 16 bytes moves from row to row against the contiguous output's) compile for sm_90a (and sm_80,
gfx942), their input interiors still read as 16-byte chunks; the ``shared`` variant also stores its output
interior 16 bytes at a time and adds one barrier to the drift-free kernel's, the ``scatter`` one stores
every element alone; no spills past the drift-free layout's register limit."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels import rows_odd, rows_odd_rules
from wavec.kernels.rows_odd_drift import Q

pytest.importorskip("iree.compiler")

# (dtype, n, pitch): the slice, a two-row f32 one, a one-wave f16 one
SLICES = [(wc.bf16, 4097, 4104), (wc.f32, 2049, 2052), (wc.f16, 1025, 1030)]


def _compile(kind: str, dtype, n: int, pitch: int, target: str, drift: str | None) -> str:
    """The library's layout for rows of ``n`` at ``pitch`` (``odd_plan``) with the output variant ``drift``
    (None: the same layout drift-free, as for a pitch a chunk longer), as PTX (or gfx942's binary)."""
    gfx = target.startswith("gfx")
    tpw = 64 if gfx else 32
    plan = rows_odd_rules.odd_plan(dtype, n, kind, pitch, tables=False)
    assert plan is not None and plan.drift == "shared"
    block_j, waves, per_wg = plan.config
    subs = {rows_odd.V: 16 // dtype.bytes, rows_odd.E: tpw, **({rows_odd.J: block_j} if plan.full else {})}
    if drift == "shared":
        subs[Q] = block_j + 3
    extra: dict = {"full": True} if plan.full else {}
    extra.update({"drift": drift} if drift else {})
    kernel = rows_odd.MAKERS[kind](dtype, block_j, max(1, waves * 32 // tpw), per_wg, tpw=tpw, **extra)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)  # the PTX text, checked below
        k = wc.compile(kernel, subs, target=target, backend="rocm" if gfx else "cuda", cache=False)
    assert k.artifact.binary
    return "" if gfx else k.artifact.binary.decode()


def _count(pattern: str, ptx: str) -> int:
    return len(re.findall(pattern, ptx))


def _ptxas_registers(ptx: str, tmp_path) -> tuple[int, int] | None:
    """(registers, spill-store bytes) of ``ptx`` on sm_90a by ``ptxas -v``; None without a ptxas."""
    ptxas = find_ptxas()
    if ptxas is None:
        return None
    (tmp_path / "k.ptx").write_text(ptx)
    cmd = [ptxas, "-arch=sm_90a", "-v", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")]
    report = subprocess.run(cmd, capture_output=True, text=True, check=True)
    text = report.stdout + report.stderr
    used = int(re.search(r"Used (\d+) registers", text).group(1))
    return used, int(re.search(r"(\d+) bytes spill stores", text).group(1))


@pytest.mark.parametrize("kind", ["softmax", "rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype, n, pitch", SLICES)
def test_shared_variant_keeps_16_byte_global_accesses(kind: str, dtype, n: int, pitch: int, tmp_path) -> None:
    """sm_90a: per lane and chunk one 16-byte load of x and one 16-byte store of the output (at the
    output's alignment), one 16-byte shared store and V element loads from shared memory; one edge element
    stored to global memory alone; one barrier more than the drift-free kernel's (the row buffer's writes
    commute, ``disjoint_writes``); no spills, registers within 64 (``NORM_RUNS``) or the drift-free
    kernel's count plus 16."""
    ptx = _compile(kind, dtype, n, pitch, "sm_90a", "shared")
    plain = _compile(kind, dtype, n, pitch, "sm_90a", None)
    block_j, waves, _ = rows_odd_rules.odd_plan(dtype, n, kind, pitch).config
    chunks, vec, elem = block_j // (waves * 32), 16 // dtype.bytes, {2: "b16", 4: "b32"}[dtype.bytes]
    assert _count(r"ld\.global(\.nc)?\.v4\.(b|u)32", ptx) == chunks
    assert _count(r"st\.global\.v4\.(b|u)32", ptx) == chunks
    assert _count(rf"st\.global\.{elem}\b", ptx) == 1
    assert _count(r"st\.shared\.v4\.(b|u)32", ptx) == chunks
    # (f16/bf16 reductions pass f32 through shared memory: b32, never b16)
    interior = _count(rf"ld\.shared\.{elem}\b", ptx) - _count(rf"ld\.shared\.{elem}\b", plain)
    assert interior == chunks * vec + 1  # and the output's edge element
    assert _count(r"bar\.sync", ptx) == _count(r"bar\.sync", plain) + 1
    got, base = _ptxas_registers(ptx, tmp_path), _ptxas_registers(plain, tmp_path)
    if got is None or base is None:
        return
    assert got[1] == 0 and got[0] <= max(64, base[0] + 16), (got, base)


@pytest.mark.parametrize("kind", ["softmax", "rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype, n, pitch", SLICES[:2])
def test_scatter_variant_stores_elements(kind: str, dtype, n: int, pitch: int) -> None:
    """sm_90a: the input interior in 16-byte loads, every output value stored alone (V a chunk and the
    edge element), no shared row buffer."""
    ptx = _compile(kind, dtype, n, pitch, "sm_90a", "scatter")
    block_j, waves, _ = rows_odd_rules.odd_plan(dtype, n, kind, pitch).config
    chunks, vec, elem = block_j // (waves * 32), 16 // dtype.bytes, {2: "b16", 4: "b32"}[dtype.bytes]
    assert _count(r"ld\.global(\.nc)?\.v4\.(b|u)32", ptx) == chunks
    assert _count(r"st\.global\.v4", ptx) == 0
    assert _count(rf"st\.global\.{elem}\b", ptx) == chunks * vec + 1
    assert _count(r"st\.shared\.v4", ptx) == 0


@pytest.mark.parametrize("target", ["sm_80", "gfx942"])
@pytest.mark.parametrize("drift", rows_odd_rules.DRIFTS)
def test_drift_kernels_compile_for_other_targets(target: str, drift: str) -> None:
    _compile("layer_norm", wc.bf16, 4097, 4104, target, drift)


def test_library_compiles_the_drift_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """``odd_kernel`` for the issue's slice: the rules' variant bound (``Q`` only for ``shared``), each
    variant its own binary."""
    monkeypatch.setattr(ptxas_mod, "find_ptxas", lambda: None)
    monkeypatch.setattr(rows_odd, "_COMPILED", {})
    for drift in rows_odd_rules.DRIFTS:
        monkeypatch.setattr(rows_odd_rules, "RULES", dataclasses.replace(rows_odd_rules.RULES, drift=drift))
        ptx = rows_odd.odd_kernel("rms_norm", wc.bf16, 4097, 4104, "cuda", target="sm_90a").artifact.binary.decode()
        assert (_count(r"st\.global\.v4", ptx) > 0) == (drift == "shared")
    assert sorted(key[-1] for key in rows_odd._COMPILED) == sorted(rows_odd_rules.DRIFTS)
