"""GPU tier: ``benchmarks/perf_dataset.py`` times every planned row of a few groups of each family (no
failed launch) and each time is one the roofline of the same launch
allows (the features the CPU derives for the row: a measured time may not beat the roofline by more
than the published rates' error)."""

import csv
import json
import pathlib
import sys

import pytest
import torch

from wavec.perf import features, roofline, schedule
from wavec.perf.cases import FAMILIES, Case, decompose_case
from wavec.perf.gpus import GPUS, from_torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))

import perf_dataset  # noqa: E402

pytestmark = pytest.mark.gpu


def _key() -> str:
    name = torch.cuda.get_device_name().upper()
    for key, spec in GPUS.items():
        if any(k in name for k in spec.keys):
            return key
    pytest.skip(f"no performance-model constants for {name}")


@pytest.mark.parametrize("family", FAMILIES)
def test_dataset_rows_are_timed_and_respect_the_roofline(family, tmp_path) -> None:
    key = _key()
    if family in ("gemm_wgmma", "moe") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma and the sm_90a MoE kernels need a Hopper GPU")
    argv = ["--gpu-name", key, "--out", str(tmp_path), "--budget-s", "300", "--families", family, "--limit", "3"]
    assert perf_dataset.main([*argv, "--workers", "8"]) == 0
    meta = json.loads((tmp_path / f"meta_{key}.json").read_text())
    assert meta["failed"] == 0 and meta["skipped_groups"] == 0, meta
    with open(tmp_path / f"raw_{key}.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and len(rows) == meta["timed"], meta
    spec = from_torch()
    for r in rows:
        case = Case(r["family"], r["kernel"], r["dtype"], r["config"], r["shape"])
        assert float(r["us_min"]) > 0 and float(r["us"]) >= float(r["us_min"]), r
        d = decompose_case(case, spec)
        bound = roofline(features(d, schedule(d, spec))) * 1e6
        assert float(r["us"]) > 0.8 * bound, (case, r["us"], bound)
