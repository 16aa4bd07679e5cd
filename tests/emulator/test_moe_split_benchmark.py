"""``benchmarks/moe_split.py`` end to end on the emulator (CPU tensors, a tiny shape, a stand-in timer):
every configuration runs through ``fused_experts`` and is checked against the reference in the row, and
the table names each base configuration with its best split."""

from __future__ import annotations

import torch

from benchmarks import moe_split as bench
from wavec.tuning import moe as tm
from wavec.tuning import moe_profile as mp


def test_benchmark_point_and_table_on_the_emulator() -> None:
    shape = tm.MoeShape(4, 2, 32, 136, name="tiny")  # I = 136: 3 K steps of 64, the last 8 wide
    w = mp.weights(shape, device="cpu")
    calls: list = []

    def timer(fn, flush, warmup, reps) -> float:
        fn()
        calls.append(fn)
        return 1e-5 * len(calls)  # later configurations "slower": the table's best split is the first

    row = bench.point(shape, 3, w, torch.empty(1), timer, splits=(2, 3))
    cfgs = bench.configs(shape, (2, 3))
    assert len(cfgs) == 3 * len(bench.BASES) and len(calls) == 2 + len(cfgs)  # copy, default, each config
    for c in cfgs:
        us, tbps, err = row[c.label()]
        assert us > 0 and tbps > 0 and err < 5e-2, (c.label(), err)
    assert row["default"][2] < 5e-2 and row["default_cfg"] == "m16n32d64k64s3"
    text = bench.table([row], {"tiny": shape}, (2, 3))
    lines = text.splitlines()
    assert len(lines) == 1 + len(bench.BASES) and all(" 2 " in ln for ln in lines[1:])
