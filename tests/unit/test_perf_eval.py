"""``benchmarks/perf_eval.py`` on a synthetic feature table with a known efficiency: the MLP beats the roofline
on held-out rows on both GPUs and across them, the table and the plot points are written, and a library
row measured far below its ceiling is listed as underperforming."""

import csv
import pathlib
import sys

import numpy as np

from wavec.perf import gpu
from wavec.perf import train as T
from wavec.perf.estimator import CYCLES

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))

import perf_eval  # noqa: E402


def _rows(n: int) -> list[dict[str, str]]:
    rng = np.random.default_rng(11)
    rows = []
    for i in range(n):
        roof_cycles, share = float(rng.uniform(1e3, 1e6)), float(rng.uniform(0.1, 1.0))
        values = {f"{c}_cycles": 0.0 for c in CYCLES}
        values.update({"global.sm_cycles": roof_cycles, "shared.sm_cycles": share * roof_cycles})
        values.update({"tasks": 528.0, "waves": 1.0, "blocks_per_sm": 4.0, "sm_tasks": 4.0, "threads": 128.0})
        values.update({"global.gpu_bytes": 1e6, "tensor.gpu_ops": 0.0, "l2.gpu_bytes": 1e6})
        values.update({"align.read_bytes": 128.0, "align.write_bytes": 128.0})
        values.update({"wave.dram_bytes": 1e6, "wave.reuse": 1.0, "tile.steps": 1.0, "tile.fill": 1.0})
        values["tile.stages"] = 1.0
        for key in ("h100", "h200"):
            eff = (0.5 if key == "h100" else 0.45) + 0.4 * share
            if i == 3:
                eff *= 0.5  # one launch far below what its features allow
            roof_us = roof_cycles / gpu(key).clock_hz * 1e6
            row = {"gpu": key, "family": "rows", "kernel": "rms_norm", "dtype": "f16"}
            row.update({"config": "bn=512;loop=0;vec=8;wpr=1", "shape": f"{i + 1}x512"})
            row.update(
                {"split": "test" if i % 4 == 0 else "train", "us": str(roof_us / eff), "roofline_us": str(roof_us)}
            )
            rows.append({**row, **{f"f:{k}": str(v) for k, v in values.items()}})
    return rows


def test_eval_table_plots_and_underperforming_points(tmp_path) -> None:
    rows = _rows(120)
    features = tmp_path / "features.csv"
    with open(features, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    T.train_all(rows, tmp_path / "weights", steps=800, members=2)
    out = tmp_path / "eval"
    assert perf_eval.main([str(features), "--out", str(out), "--weights", str(tmp_path / "weights")]) == 0
    summary, _points = perf_eval.evaluate(rows, tmp_path / "weights")
    pairs = {(a, b) for a in ("h100", "h200", "all") for b in ("h100", "h200")}
    assert {(s["trained_on"], s["tested_on"]) for s in summary} == pairs
    for s in summary:
        assert s["rows"] == 30 and s["mlp"] < s["roofline"] / 3, s
        assert 0 < s["ridge"] < s["roofline"], s  # the ridge baseline is fitted and scored too
    text = (out / "perf_eval.md").read_text()
    assert "| rows | h100 | h200 | 30 |" in text
    with open(out / "pred_vs_measured.csv") as f:
        assert len(list(csv.DictReader(f))) == 30 * len(summary)
    with open(out / "underperforming.csv") as f:
        under = list(csv.DictReader(f))
    assert {(u["gpu"], u["shape"]) for u in under} >= {("h100", "4x512"), ("h200", "4x512")}
    assert all(float(u["ceiling"]) - float(u["efficiency"]) > perf_eval.GAP for u in under)
