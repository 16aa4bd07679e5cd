"""The performance-model dataset's rows (``wavec.perf.sampling``, ``wavec.perf.cases``) and the collection
script's CPU dry run: the same rows for the same seed, a held-out split by shape, every family's case
compiled for the H100's targets and decomposed on its launch (MoE from its seeded routing)."""

import csv
import json
import pathlib
import sys

import numpy as np
import pytest

from wavec.errors import OptionError
from wavec.perf import features, gpu, roofline, schedule
from wavec.perf.cases import FAMILIES, Case, bindings, decompose_case, kernel_key, moe_routing, target_of
from wavec.perf.sampling import TEST_FRACTION, plan_rows

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))

H100 = gpu("h100")


def test_rows_are_seeded_interleaved_and_split_by_shape() -> None:
    a, b = plan_rows(H100, seed=3, scale=0.2), plan_rows(H100, seed=3, scale=0.2)
    assert a == b
    assert a != plan_rows(H100, seed=4, scale=0.2)
    assert [g.family for g in a[: len(FAMILIES)]] == list(FAMILIES)  # round-robin: a cut run has every family
    for family in FAMILIES:
        groups = [g for g in a if g.family == family]
        test = [g for g in groups if g.split == "test"]
        assert len(test) == max(1, round(TEST_FRACTION * len(groups)))
        train_shapes = {c.shape for g in groups if g.split == "train" for c in g.cases}
        assert all(c.family == family for g in groups for c in g.cases)
        if family != "moe":  # MoE's groups differ by routing too; its split is by group
            assert not train_shapes & {c.shape for g in test for c in g.cases}


def test_gemm_groups_hold_the_heuristic_plan_and_space_configs() -> None:
    from wavec.perf.cases import gemm_config
    from wavec.tuning.plan import GemmRequest, plan_matmul

    for g in [g for g in plan_rows(H100, scale=0.2) if g.family.startswith("gemm")]:
        m, n, k = g.cases[0].sizes()
        heur = plan_matmul(m, n, k, GemmRequest(mma=g.family.removeprefix("gemm_"), split=1), H100.name)
        assert g.cases[0].config == gemm_config(heur)
        assert len({c.config for c in g.cases}) == len(g.cases) >= 2


def test_moe_routing_is_seeded_distinct_and_skewed() -> None:
    ids = moe_routing(4096, 64, 8, "zipf1.5", 7)
    assert ids.shape == (4096, 8) and np.array_equal(ids, moe_routing(4096, 64, 8, "zipf1.5", 7))
    assert all(len(set(row)) == 8 for row in ids.tolist())
    counts = np.bincount(ids.ravel(), minlength=64)
    flat = np.bincount(moe_routing(4096, 64, 8, "uniform", 7).ravel(), minlength=64)
    assert counts.max() > 3 * flat.max()
    with pytest.raises(OptionError, match="dist"):
        moe_routing(4, 8, 2, "normal", 0)


def test_kernel_key_ignores_the_routing() -> None:
    a = Case("moe", "moe_up", "bf16", "bm=16;bn=32;bnd=64;bk=64;st=3;k=8;dist=uniform;seed=1", "4x2048x768x128")
    b = Case("moe", "moe_up", "bf16", "bm=16;bn=32;bnd=64;bk=64;st=3;k=8;dist=zipf1.0;seed=2", "4x2048x768x128")
    assert kernel_key(a) == kernel_key(b)
    assert target_of(a, H100) == "sm_90a" and target_of(a, gpu("a100")) == "sm_80"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_decomposes_its_first_case(family) -> None:
    groups = [g for g in plan_rows(H100, scale=0.2) if g.family == family]
    case = min((c for g in groups for c in g.cases), key=lambda c: np.prod(c.sizes()))
    binds, scalars = bindings(case)
    d = decompose_case(case, H100)
    assert not d.notes, d.notes
    written = sum(np.prod(b.shape) for b in binds if b.output)
    assert d.total("global_write") > 0 and written > 0
    assert roofline(features(d, schedule(d, H100))) > 0
    if family in ("rows", "elementwise", "attention"):  # each output element written once
        elem = 2  # f16/bf16
        assert d.total("global_write") == written * elem, (case, d.total("global_write"), written)
    assert all(isinstance(s, float) for s in scalars)


def test_dry_run_lists_the_rows_it_would_time(tmp_path) -> None:
    import perf_dataset

    argv = ["--gpu-name", "h200", "--out", str(tmp_path), "--dry-run", "--families", "rows,elementwise"]
    assert perf_dataset.main([*argv, "--limit", "4", "--workers", "1"]) == 0
    with open(tmp_path / "raw_h200.csv") as f:
        rows = list(csv.DictReader(f))
    meta = json.loads((tmp_path / "meta_h200.json").read_text())
    assert len(rows) == meta["listed"] == meta["rows_planned"] == 4
    assert {r["family"] for r in rows} == {"rows", "elementwise"} and {r["gpu"] for r in rows} == {"h200"}
    assert all(r["us"] == "" and r["split"] in ("train", "test") for r in rows)
