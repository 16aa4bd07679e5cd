"""Binary tier: the any-length row kernels (``kernels/rows.py``) compile for sm_80, sm_90a (PTX/cubin)
and gfx942 (HSACO), with N dynamic (a launch value) and 16-byte runs along it; the odd-length row kernels
(``kernels/rows_odd.py``) too, their rows' interiors in 16-byte loads and stores, without spills."""

from __future__ import annotations

import re
import subprocess

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels import rows, rows_odd, rows_odd_rules

pytest.importorskip("iree.compiler")


def _ptxas_report(ptx: str, target: str, tmp_path) -> str | None:
    """``ptxas -v``'s report (registers, spills) of ``ptx`` for ``target``; None without a ptxas."""
    ptxas = find_ptxas()
    if ptxas is None:
        return None
    (tmp_path / "k.ptx").write_text(ptx)
    cmd = [ptxas, f"-arch={target}", "-v", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("kind", rows.KINDS)
@pytest.mark.parametrize(
    "dtype, loop, waves", [(wc.f16, True, 1), (wc.bf16, False, 1), (wc.bf16, False, 4), (wc.f32, True, 1)]
)
def test_row_kernels_compile(target: str, kind: str, dtype, loop: bool, waves: int) -> None:
    gfx = target.startswith("gfx")
    tpw = 64 if gfx else 32
    block = 2 * waves * tpw * (16 // dtype.bytes)
    extra = {"block_n": block} if kind == "layer_norm" else {}
    kernel = rows.MAKERS[kind](dtype, loop=loop, tpw=tpw, waves_per_row=waves, **extra)
    k = wc.compile(kernel, {rows.BLOCK_N: block}, target=target, backend="rocm" if gfx else "cuda", cache=False)
    assert k.artifact.binary
    assert dict(k.artifact.metadata.divisibility).get("N") == 16 // dtype.bytes  # wide runs; a miss: narrow variant


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_silu_and_mul_compiles(target: str) -> None:
    from wavec.kernels import elementwise as ew

    gfx = target.startswith("gfx")
    tpw = 64 if gfx else 32
    subs = {ew.BLOCK_M: 4, ew.BLOCK_N: tpw * 8, ew.TWO: 2}
    k = wc.compile(
        ew.make_silu_and_mul(wc.bf16, tpw), subs, target=target, backend="rocm" if gfx else "cuda", cache=False
    )
    assert k.artifact.binary and dict(k.artifact.metadata.divisibility).get("N") == 8  # 16-byte runs of each half


def _odd(kind: str, dtype, n: int, target: str, tables: bool = False) -> wc.CompiledKernel:
    gfx = target.startswith("gfx")
    tpw = 64 if gfx else 32
    config = rows_odd.odd_config(dtype, n, kind, n)
    assert config is not None
    block_j, waves, per_wg = config
    # the library's layout: the norms over the whole tile (``odd_full``) under ``odd_bound``'s launch bound
    # (PTX only); a 64-lane wave takes the chunks of two 32-lane ones: the same chunks a lane, half the waves
    full = rows_odd.odd_full(kind)
    subs = {rows_odd.V: 16 // dtype.bytes, rows_odd.E: tpw, **({rows_odd.J: block_j} if full else {})}
    extra: dict = {"tables": True} if tables else {}
    extra.update({"full": True} if full else {})
    bound = None if gfx or kind == "softmax" else rows_odd.odd_bound(dtype, n, kind, n, tables)
    extra.update({"bound": bound} if bound else {})
    extra.update({"reread": True} if kind != "softmax" and rows_odd.odd_reread(dtype, n, kind, n, tables) else {})
    kernel = rows_odd.MAKERS[kind](dtype, block_j, max(1, waves * 32 // tpw), per_wg, tpw=tpw, **extra)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)  # the PTX text, checked below
        return wc.compile(kernel, subs, target=target, backend="rocm" if gfx else "cuda", cache=False)


# chunks a lane of the norms' layouts (``NORM_RUNS``, ``one_row_runs``, LayerNorm's ``ln_long_runs``) -> the
# registers they may take without spilling (ptxas -v, sm_80 / sm_90a: 64 keeps 32 warps an SM at two rows a
# workgroup)
LIB = rows_odd_rules.RULES
NORM_CHUNKS = {rows_odd_rules.NORM_RUNS: 64, LIB.one_row_runs: 128, LIB.ln_long_runs: 192}
# ... (192: LayerNorm 16383 gathering its vectors, inputs below ``TABLE_MIN_BYTES``, one 256-thread
# workgroup an SM as the 4-chunk layout's 100 at 512 threads).  Spills ptxas takes on the library's layout:
# f16 RMSNorm 2049 over the whole tile stores 8 bytes at 56 registers on sm_90a (its speed: docs/performance.md,
# session 14's f16 sweep)
SPILL_OK = {("f16", 2049, "rms_norm", "sm_90a"): 8}
# ... and bf16 softmax 4097 since bf16 -> f32 takes one shift or mask an element (``nv_extf_bf16``): ptxas
# keeps it at 64 registers with 4 bytes spilled (read at 0.91 of copy against 0.92 before: session 17's run4)
SPILL_OK |= {("bf16", 4097, "softmax", target): 8 for target in ("sm_80", "sm_90a")}
# 16383: one row a workgroup; f32 8191 and bf16 16383: softmax too, at 8 chunks a lane (``softmax_one_row``)
ODD = [(wc.bf16, 4097), (wc.f16, 2049), (wc.f32, 1025), (wc.bf16, 8191), (wc.bf16, 16383), (wc.f32, 8191)]


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("kind", rows.KINDS)
@pytest.mark.parametrize("dtype, n", ODD)
def test_odd_row_kernels_use_16_byte_accesses(target: str, kind: str, dtype, n: int, tmp_path) -> None:
    """Per lane: 4 chunks (the norms: 2, ``NORM_RUNS``, or over one row a workgroup ``one_row_runs``) of x
    read and of the output written as 16-byte vectors (the row's interior), one edge element read and
    written alone, for LayerNorm the row's first element (its shift), and for the norms each weight (and
    bias) element gathered, in the library's layout (``odd_full``, ``odd_bound``); the NVIDIA binaries
    assemble without spilling (``SPILL_OK`` aside) within ``NORM_CHUNKS``' registers for their chunks a lane."""
    k = _odd(kind, dtype, n, target)
    assert k.artifact.binary
    if target.startswith("gfx"):
        return
    ptx = k.artifact.binary.decode()
    elem = {2: "b16", 4: "b32"}[dtype.bytes]
    block_j, waves, _ = rows_odd.odd_config(dtype, n, kind, n) or (0, 1, 0)
    chunks = block_j // (waves * 32)
    softmax_chunks = 8 if (dtype, n) in ((wc.f32, 8191), (wc.bf16, 16383)) else rows_odd_rules.RUNS_PER_WAVE
    assert chunks == softmax_chunks if kind == "softmax" else chunks in NORM_CHUNKS
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.(b|u)32", ptx)) == chunks
    assert len(re.findall(r"st\.global\.v4\.(b|u)32", ptx)) == chunks
    vectors = {"softmax": 0, "rms_norm": 1, "layer_norm": 2}[kind]
    per_lane = chunks * 16 // dtype.bytes + 1  # the interior columns' and the edge element's
    starts = 1 if elem == "b32" else 0  # the row's start (i32)
    shift = 1 if kind == "layer_norm" else 0  # (``row_stats``: every dtype's statistics are shifted)
    assert len(re.findall(rf"ld\.global(\.nc)?\.{elem}\b", ptx)) == starts + 1 + shift + vectors * per_lane
    assert len(re.findall(rf"st\.global\.{elem}\b", ptx)) == 1
    report = _ptxas_report(ptx, target, tmp_path)
    if report is None:
        return
    spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
    assert spilled <= SPILL_OK.get((dtype.name, n, kind, target), 0), report
    if kind != "softmax":
        assert int(re.search(r"Used (\d+) registers", report).group(1)) <= NORM_CHUNKS[chunks], report


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("kind", ["softmax", "rms_norm"])
@pytest.mark.parametrize("block, waves", [(8192, 8), (16384, 16)])
def test_long_rows_candidates_compile_without_spills(target: str, kind: str, block: int, waves: int, tmp_path) -> None:
    """``make_softmax_long`` / ``make_rms_norm_long`` (bf16, one row per workgroup, 4 runs a lane: the
    sweep's candidates): 16-byte accesses of x (and w) and the output, no spills."""
    gfx = target.startswith("gfx")
    make = rows.make_softmax_long if kind == "softmax" else rows.make_rms_norm_long
    kernel = make(wc.bf16, waves // 2 if gfx else waves, tpw=64 if gfx else 32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = wc.compile(kernel, {rows.BLOCK_N: block}, target=target, backend="rocm" if gfx else "cuda", cache=False)
    assert k.artifact.binary
    if gfx:
        return
    ptx = k.artifact.binary.decode()
    reads = rows.RUNS_PER_WAVE * (1 if kind == "softmax" else 2)
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.(b|u)32", ptx)) == reads
    assert len(re.findall(r"st\.global\.v4\.(b|u)32", ptx)) == rows.RUNS_PER_WAVE
    report = _ptxas_report(ptx, target, tmp_path)
    if report is None:
        return
    assert "0 bytes spill stores" in report


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("dtype", [wc.bf16, wc.f32])
def test_long_layer_norm_compiles_without_spills(target: str, dtype, tmp_path) -> None:
    """LayerNorm of 16384 bf16 over 8 waves of 8 runs a lane, x read again after the statistics (8192 f32:
    16 waves of 4 runs, x read once), one row per workgroup: 16-byte accesses, no spills
    (``rows.LN_LONG_UNITS``, ``rows.LN_REREAD_RUNS``)."""
    gfx = target.startswith("gfx")
    block = 16384 if dtype == wc.bf16 else 8192
    block_n, loop, vec, waves = rows.config_for(dtype, block, "layer_norm")
    runs, reread = (rows.LN_REREAD_RUNS, True) if dtype == wc.bf16 else (rows.RUNS_PER_WAVE, False)
    assert (block_n, loop, waves) == (block, False, 64 // runs)
    # (a 64-lane wave takes two 32-lane waves' runs: the same threads either way)
    tpw = 64 if gfx else 32
    kernel = rows.make_layer_norm_long(dtype, waves // 2 if gfx else waves, tpw=tpw, vec=vec, reread=reread)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = wc.compile(kernel, {rows.BLOCK_N: block}, target=target, backend="rocm" if gfx else "cuda", cache=False)
    assert k.artifact.binary and dict(k.artifact.metadata.divisibility).get("N") == vec
    if gfx:
        return
    ptx = k.artifact.binary.decode()
    # x (twice where re-read), w, b: a 16-byte load a run a lane each
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.(b|u)32", ptx)) == runs * (4 if reread else 3)
    report = _ptxas_report(ptx, target, tmp_path)
    if report is None:
        return
    assert "0 bytes spill stores" in report and int(re.search(r"Used (\d+) registers", report).group(1)) <= 128


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype, n", [(wc.bf16, 4097), (wc.f32, 2049), (wc.bf16, 16383)])
def test_odd_norm_tables_read_16_byte_vectors(target: str, kind: str, dtype, n: int, tmp_path) -> None:
    """The norms' ``tables`` variant: the weight's (and bias's) interior columns as 16-byte loads from the
    ``shifted_table``s (one per chunk a lane and vector, where the gathers took 8 element loads), only the
    edge element gathered; no spills, 64 registers or fewer at ``NORM_RUNS`` chunks a lane, 128 at
    ``one_row_runs``."""
    k = _odd(kind, dtype, n, target, tables=True)
    assert k.artifact.binary
    if target.startswith("gfx"):
        return
    ptx = k.artifact.binary.decode()
    vectors = {"rms_norm": 1, "layer_norm": 2}[kind]
    block_j, waves, _ = rows_odd.odd_config(dtype, n, kind, n) or (0, 1, 0)
    chunks = block_j // (waves * 32)
    assert chunks in NORM_CHUNKS
    again = int(rows_odd.odd_reread(dtype, n, kind, n))  # LayerNorm's second read of its chunks
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.(b|u)32", ptx)) == chunks * (1 + again + vectors)
    elem = {2: "b16", 4: "b32"}[dtype.bytes]
    starts = 1 if elem == "b32" else 0
    shift = 1 if kind == "layer_norm" else 0  # (``row_stats``: every dtype's statistics are shifted)
    assert len(re.findall(rf"ld\.global(\.nc)?\.{elem}\b", ptx)) == starts + 1 + shift + vectors
    report = _ptxas_report(ptx, target, tmp_path)
    if report is None:
        return
    limit = NORM_CHUNKS[chunks]
    assert "0 bytes spill stores" in report and int(re.search(r"Used (\d+) registers", report).group(1)) <= limit


# ptxas -v, sm_90a: the whole-tile norms' registers at ``one_row_runs`` (measured 2026-12-02; the masked
# layout took RMSNorm 77-92 and LayerNorm 101-128); LayerNorm at ``ln_long_runs``: ``NORM_CHUNKS``'
FULL_LIMITS = {"rms_norm": 64, "layer_norm": 100}


@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("n", [1025, 2049, 4097, 8191, 16383])
def test_odd_norms_over_the_whole_tile(kind: str, n: int, tables: bool, tmp_path) -> None:
    """``RULES.full_tile``'s layout (bf16, sm_90a): ``J`` bound to the tile, so no chunk load or store
    is masked (no branch joins a chunk as f32 values): the same 16-byte accesses, no spills, and at most
    ``FULL_LIMITS`` registers (64 at ``NORM_RUNS``)."""
    block_j, waves, per_wg = rows_odd.odd_config(wc.bf16, n, kind, n) or (0, 1, 0)
    bound = rows_odd.odd_bound(wc.bf16, n, kind, n, tables)
    again = kind == "layer_norm" and rows_odd.odd_reread(wc.bf16, n, kind, n, tables)
    extra = {"reread": True} if again else {}
    kernel = rows_odd.MAKERS[kind](wc.bf16, block_j, waves, per_wg, tables=tables, full=True, bound=bound, **extra)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        subs = {rows_odd.V: 8, rows_odd.E: 32, rows_odd.J: block_j}
        k = wc.compile(kernel, subs, target="sm_90a", backend="cuda", cache=False)
    ptx = k.artifact.binary.decode()
    chunks = block_j // (waves * 32)
    vectors = {"rms_norm": 1, "layer_norm": 2}[kind]
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.(b|u)32", ptx)) == chunks * (1 + again + vectors if tables else 1)
    assert len(re.findall(r"st\.global\.v4\.(b|u)32", ptx)) == chunks
    report = _ptxas_report(ptx, "sm_90a", tmp_path)
    if report is None:
        return
    # (the one-wave rows of 1025 gathering their vectors, small inputs, hold them per chunk: RMSNorm 80,
    # LayerNorm 125; through tables 58-72)
    gathered_rows = per_wg > 1 and not tables
    limit = FULL_LIMITS[kind] if chunks == LIB.one_row_runs and not gathered_rows else NORM_CHUNKS[chunks]
    assert "0 bytes spill stores" in report and int(re.search(r"Used (\d+) registers", report).group(1)) <= limit


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kind", rows.KINDS)
def test_f32_one_tile_past_8192_compiles_without_spills(target: str, kind: str, tmp_path) -> None:
    """The aligned f32 rows of 8193-16384 as one tile (``rows.MAX_TILE_ELEMENTS``: 16 waves, 8 runs a lane;
    RMSNorm one row a workgroup): 16-byte accesses of x and the output, no spills."""
    kernel, subs = rows.kernel_for(kind, wc.f32, 16384)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = wc.compile(kernel, subs, target=target, backend="cuda", cache=False)
    ptx = k.artifact.binary.decode()
    runs = 16384 // (16 * 32 * 4)
    assert len(re.findall(r"st\.global\.v4\.(b|u)32", ptx)) == runs
    assert len(re.findall(r"ld\.global(\.nc)?\.v4\.(b|u)32", ptx)) >= runs
    report = _ptxas_report(ptx, target, tmp_path)
    if report is None:
        return
    assert "0 bytes spill stores" in report, report
