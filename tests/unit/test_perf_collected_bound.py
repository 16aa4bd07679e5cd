"""Every collected timing (benchmarks/data/perf/collected/features_{h100,h200}.csv) respects the roofline
today's code gives its launch: measured > 0.8 x roofline (issue #22).  The stored per-launch operation and
byte counts are the decomposition's; the memory levels' cycles are recomputed from them with today's GPU
constants (so a changed HBM or L2 rate is checked against every row without recompiling), and the roofline
is :func:`wavec.perf.roofline` of those features."""

import csv
from pathlib import Path

import pytest

from wavec.perf import gpu, roofline
from wavec.perf.cases import bindings
from wavec.perf.dataset import row_case
from wavec.perf.features import Features, row_alignment
from wavec.perf.tiling import TILING_FEATURES, tiling_features

COLLECTED = Path(__file__).parents[2] / "benchmarks/data/perf/collected"
SLACK = 0.8


def _features(row: dict[str, str]) -> Features:
    spec = gpu(row["gpu"])
    values = {k[2:]: float(v) for k, v in row.items() if k.startswith("f:")}
    hbm_per_clk, l2_per_clk = spec.hbm_bytes_s / spec.clock_hz, spec.l2_bytes_s / spec.clock_hz
    values["global.gpu_cycles"] = values["global.gpu_bytes"] / hbm_per_clk
    values["l2.gpu_cycles"] = values["l2.gpu_bytes"] / l2_per_clk
    values["global.sm_cycles"] = values["global.sm_bytes"] / (hbm_per_clk / spec.sms)
    values["l2.sm_cycles"] = values["l2.sm_bytes"] / (l2_per_clk / spec.sms)
    return Features(values, spec.vector(), spec.clock_hz)


@pytest.mark.parametrize("gpu_key", ["h100", "h200"])
def test_every_collected_row_respects_todays_roofline(gpu_key: str) -> None:
    with open(COLLECTED / f"features_{gpu_key}.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["us"] and float(r["us"]) > 0]
    assert len(rows) > 1000 and {r["gpu"] for r in rows} == {gpu_key}
    spec = gpu(gpu_key)
    below = []
    for r in rows:
        feats = _features(r)
        assert float(r["f:global.gpu_cycles"]) == pytest.approx(feats.values["global.gpu_cycles"], rel=1e-4)
        bound_us = roofline(feats) * 1e6
        if float(r["us"]) <= SLACK * bound_us:
            below.append(f"{r['kernel']} {r['config']} {r['shape']}: {r['us']} us vs roofline {bound_us:.1f} us")
    assert not below, f"{len(below)} rows beat {SLACK} x the roofline on {spec.name}:\n" + "\n".join(below)


@pytest.mark.parametrize("gpu_key", ["h100", "h200"])
def test_collected_row_alignment_is_the_launch_tensors(gpu_key: str) -> None:
    """The stored ``f:align.*`` columns are :func:`row_alignment` of each row's launch tensors (the ones
    ``decompose`` records for it), and the misaligned rows the models rely on are there."""
    with open(COLLECTED / f"features_{gpu_key}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    seen: dict[tuple[str, ...], tuple[float, float]] = {}
    for r in rows:
        key = (r["family"], r["kernel"], r["dtype"], r["config"], r["shape"])
        if key not in seen:
            seen[key] = row_alignment((b.shape, b.dtype, b.output) for b in bindings(row_case(r))[0])
        assert (float(r["f:align.read_bytes"]), float(r["f:align.write_bytes"])) == seen[key], key
    reads = {float(r["f:align.read_bytes"]) for r in rows}
    assert {16.0, 128.0} <= reads and min(reads) < 16.0  # 16-byte pitches (GEMM K) and odd ones (rows)


def _config_symbols(r: dict[str, str]) -> dict[str, int]:
    """A GEMM's or row kernel's static tile symbols as its configuration string names them, and its sizes."""
    case = row_case(r)
    p, sizes = case.params(), case.sizes()
    if case.family.startswith("gemm"):
        m, n, k = sizes
        tiles = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K", "NUM_STAGES", "GROUP_M"), (p[c] for c in TILE_KEYS)))
        return {"M": m, "N": n, "K": k, **{s: int(v) for s, v in tiles.items()}}
    return {"M": sizes[0], "N": sizes[-1], "BLOCK_N": int(p["bn"])}


TILE_KEYS = ("bm", "bn", "bk", "st", "gm")


@pytest.mark.parametrize("gpu_key", ["h100", "h200"])
def test_collected_tiling_is_the_launch_tiling(gpu_key: str) -> None:
    """The stored tiling columns (``dataset refresh``: the compiled kernels' symbols) are, for every GEMM and
    row-kernel row, ``tiling_features`` of the tile sizes its configuration names; every row's are in range."""
    spec = gpu(gpu_key)
    with open(COLLECTED / f"features_{gpu_key}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    checked = 0
    for r in rows:
        stored = {k: float(r[f"f:{k}"]) for k in TILING_FEATURES}
        assert 0 < stored["wave.reuse"] <= 1 and 0 < stored["tile.fill"] <= 1 and stored["tile.steps"] >= 1, r
        if not (r["family"].startswith("gemm") or r["family"] == "rows"):
            continue
        tensors = [(b.shape, b.dtype, b.output) for b in bindings(row_case(r))[0]]
        slots = spec.sms * int(float(r["f:blocks_per_sm"]))
        want = tiling_features(
            _config_symbols(r), tensors, int(float(r["f:tasks"])), slots, float(r["f:global.gpu_bytes"])
        )
        assert stored == pytest.approx(want, rel=1e-5), (r["config"], r["shape"])
        checked += 1
    assert checked > 800
    # the GEMMs' waves share panels (reuse well under 1) and some odd rows leave most of a step empty
    gemm = [float(r["f:wave.reuse"]) for r in rows if r["family"].startswith("gemm")]
    assert min(gemm) < 0.2 and max(float(r["f:tile.fill"]) for r in rows if r["family"] == "rows") == 1.0
