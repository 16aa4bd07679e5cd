"""``python -m wavec.perf.dataset build``: raw timing rows get the features of their own GPU, computed once per
launch for every GPU asked for and cached on disk; the features are the ones ``decompose -> schedule ->
features`` gives for that launch; an unknown GPU is an error naming it."""

import csv

import pytest

from wavec.errors import PerfError
from wavec.perf import dataset as D
from wavec.perf import features, gpu, roofline, schedule
from wavec.perf.cases import decompose_case

RAW = [
    (
        "h100",
        "gemm_mma_sync",
        "gemm",
        "f16",
        "bm=64;bn=64;bk=32;st=3;gm=8;w=2x2;ws=0;pe=0;se=0;pf=1;c=f32",
        "96x320x256",
    ),
    (
        "h200",
        "gemm_mma_sync",
        "gemm",
        "f16",
        "bm=64;bn=64;bk=32;st=3;gm=8;w=2x2;ws=0;pe=0;se=0;pf=1;c=f32",
        "96x320x256",
    ),
    ("h100", "rows", "softmax", "bf16", "bn=1024;loop=0;vec=8;wpr=1", "37x1000"),
]


def _rows() -> list[dict[str, str]]:
    keys = ("gpu", "family", "kernel", "dtype", "config", "shape")
    return [{**dict(zip(keys, r)), "split": "train", "us": "10.0", "source": "test"} for r in RAW]


def test_build_gives_each_row_its_gpus_features_and_caches_them(tmp_path, monkeypatch) -> None:
    cache = D.FeatureCache(tmp_path / "cache")
    out = D.build(_rows(), ["h200"], cache)
    assert [r["gpu"] for r in out] == ["h100", "h200", "h100"] and out[0]["source"] == "test"
    for r in out:
        spec = gpu(r["gpu"])
        d = decompose_case(D.row_case(r), spec)
        feats = features(d, schedule(d, spec))
        assert r["roofline_us"] == pytest.approx(roofline(feats) * 1e6)
        assert r["f:tensor.gpu_ops"] == feats.values["tensor.gpu_ops"] and r["f:registers"] == float(d.registers or 0)
    assert out[1]["f:global.gpu_cycles"] < out[0]["f:global.gpu_cycles"]  # the H200's faster HBM
    assert out[0]["f:tensor.gpu_ops"] == 2 * 128 * 320 * 256  # M padded to the 64-row tile

    def fail(*_a, **_k):
        raise AssertionError("decomposed again")

    monkeypatch.setattr(D, "case_features", fail)
    again = D.build(_rows(), [], D.FeatureCache(tmp_path / "cache"))  # read back from disk
    assert again == out


def test_build_cli_writes_a_csv(tmp_path) -> None:
    raw = tmp_path / "raw.csv"
    with open(raw, "w", newline="") as f:
        w = csv.DictWriter(f, list(_rows()[0]))
        w.writeheader()
        w.writerows(_rows()[2:])
    argv = ["build", str(raw), "--out", str(tmp_path / "f.csv"), "--cache", str(tmp_path / "c")]
    assert D.main(argv) == 0
    with open(tmp_path / "f.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["kernel"] == "softmax" and float(row["f:global.gpu_bytes"]) == 2 * 37 * 1000 * 2


def test_unknown_gpu_is_an_error(tmp_path) -> None:
    rows = _rows()[:1]
    rows[0]["gpu"] = "v100"
    with pytest.raises(PerfError, match="unknown gpu 'v100'"):
        D.build(rows, [], D.FeatureCache(tmp_path))


def test_a_changed_gpu_constant_misses_the_feature_cache(tmp_path, monkeypatch) -> None:
    from dataclasses import replace

    from wavec.perf.gpus import GPUS

    rows = _rows()[:2]
    D.build(rows, [], D.FeatureCache(tmp_path / "cache"))
    keys = [D.case_key(D.row_case(r)) for r in rows]
    monkeypatch.setitem(GPUS, "h100", replace(GPUS["h100"], l2_bytes_s=GPUS["h100"].l2_bytes_s * 2))
    cache = D.FeatureCache(tmp_path / "cache")
    assert cache.get("h100", keys[0]) is None and cache.get("h200", keys[1]) is not None


def test_refresh_recomputes_the_tiling_columns_as_build_does(tmp_path) -> None:
    from wavec.perf.tiling import TILING_FEATURES

    built = D.build(_rows(), [], D.FeatureCache(tmp_path / "cache"))
    stale = [{**r, **{f"f:{k}": -1.0 for k in TILING_FEATURES}} for r in built]
    fresh = D.refresh(stale)
    assert fresh == built  # only the tiling columns change, to what the decomposition's features gave
    gemm, softmax = fresh[0], fresh[2]
    # 96 x 320 in 64 x 64 tiles: one wave holds all 10 tiles, each panel read once (plus C, f32)
    assert gemm["f:wave.dram_bytes"] == (96 + 320) * 256 * 2 + 96 * 320 * 4 and gemm["f:wave.reuse"] < 0.5
    assert (gemm["f:tile.steps"], gemm["f:tile.fill"], gemm["f:tile.stages"]) == (8.0, 1.0, 3.0)  # K 256 / 32
    assert (softmax["f:tile.steps"], softmax["f:tile.fill"]) == (1.0, 1000 / 1024)  # a 1000-wide row, 1024 block
