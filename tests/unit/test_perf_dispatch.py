"""``benchmarks/perf_dispatch.py``'s pieces: the regret of a pick and of a top N, and a race candidate's
configuration string naming exactly the kernel the tuner raced (same MLIR)."""

import pathlib
import sys

import pytest

import wavec as wc
from wavec.perf.cases import Case, compile_case
from wavec.tuning.gemm import FACTORY, _fixed
from wavec.tuning.search import Candidate, _source

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))

import perf_dispatch  # noqa: E402


def test_regrets_of_the_pick_and_the_top_n():
    times = {"a": 1.0, "b": 1.2, "c": 1.5, "d": 2.0, "e": 3.0, "f": 4.0}
    predicted = {"c": 1.0, "b": 2.0, "d": 3.0, "e": 4.0, "f": 5.0, "a": 6.0}  # the best ranked last
    r = perf_dispatch._regrets(times, predicted)
    assert r["top1"] == pytest.approx(0.5)  # c: 1.5 / 1.0 - 1
    assert r["top3"] == pytest.approx(0.2)  # best of c, b, d: b
    assert r["top5"] == pytest.approx(0.2)
    assert r["top10"] == pytest.approx(0.0)  # all six


def test_case_config_is_the_raced_kernel():
    cand = Candidate(
        (("waves", (2, 2)),), (("BLOCK_K", 32), ("BLOCK_M", 64), ("BLOCK_N", 128), ("GROUP_M", 8), ("NUM_STAGES", 3))
    )
    key = perf_dispatch.case_config(cand, "mma_sync")
    assert key == "gemm_mma_sync|bm=64;bn=128;bk=32;st=3;gm=8;w=2x2;ws=0;pe=0;se=0;pf=1;c=f32"
    family, config = key.split("|")
    ours = compile_case(Case(family, "gemm", "f16", config, "1x1x8"), "sm_90")
    src = _source(FACTORY, _fixed(wc.f16))
    raced = wc.compile(src.build(cand.kwargs), cand.symbol_subs(), target="sm_90", backend="emulator")
    assert ours.artifact.mlir == raced.artifact.mlir
