"""The autotune driver with a fake timer: legality, process-pool compile, interleaved rounds, cache and
dispatch from it."""

import json

import pytest

import wavec as wc
from wavec.errors import TuningError
from wavec.kernels.gemm import make_gemm
from wavec.tuning import autotune, lookup
from wavec.tuning.cache import TuningCache, bucket, entry_key
from wavec.tuning.gemm import fit_cost_model, tuned_config
from wavec.tuning.search import Candidate, TuneOptions, enumerate_space

SPACE = {
    "BLOCK_M": [32, 64],
    "BLOCK_N": [32, 64],
    "BLOCK_K": [24, 32],
    "NUM_STAGES": [2],
    "GROUP_M": [1],
    "waves": [(2, 2)],
}
FIXED = {"dtype": wc.f16}
KW = dict(
    fixed=FIXED,
    target="sm_90",
    backend="cuda",
    dtypes=["float16", "float16", "float32"],
    gpu="Test GPU",
    dims=("M", "N", "K"),
    progress=False,
)


class FakeTimer:
    """Seconds = a known function of the configuration: larger tiles are faster, 64x32 fastest."""

    def __init__(self):
        self.calls = []

    def __call__(self, cand, fn):
        self.calls.append(cand)
        s = cand.subs_dict
        return 1e-3 / (s["BLOCK_M"] * s["BLOCK_N"]) + (0 if (s["BLOCK_M"], s["BLOCK_N"]) == (64, 32) else 1e-6)


def test_bucket_and_key():
    assert bucket((4096, 3000, 1)) == (4096, 4096, 1)
    assert bucket((7, 100, 17)) == (7, 128, 32)  # M stays exact below 16
    assert bucket((17, 16, 16)) == (32, 16, 16)
    k = entry_key((7, 100, 17), ["float16"], "NVIDIA H200", "wavec 0.1.0", ("M", "N", "K"))
    assert k == "M=7,N=128,K=32 | float16 | NVIDIA H200 | wavec 0.1.0"


def test_enumerate_space_splits_symbols_and_factory_args():
    cands = enumerate_space(SPACE, {"dtype", "waves", "threads_per_wave", "mma_type"})
    assert len(cands) == 8
    c = cands[0]
    assert c.kwargs_dict == {"waves": (2, 2)} and set(c.subs_dict) == {
        "BLOCK_M",
        "BLOCK_N",
        "BLOCK_K",
        "NUM_STAGES",
        "GROUP_M",
    }
    assert Candidate.from_json(json.loads(json.dumps(c.to_json()))) == c


def test_autotune_fake_timer_pool_cache_dispatch():
    timer = FakeTimer()
    shapes = [(1000, 1000, 512), (4096, 256, 256)]
    opts = TuneOptions(timer=timer, workers=2, warmup=2, rounds=5, **KW)
    res = autotune("wavec.kernels.gemm:make_gemm", SPACE, shapes, opts)
    # legality: the 4 configurations with BLOCK_K = 24 are rejected before compiling
    assert len(res.rejected) == 4 and all("loop tile 24" in r for r in res.rejected.values())
    assert len(res.metadata) == 4 and all("error" not in m for m in res.metadata.values())
    assert all(m["shared_bytes"] > 0 for m in res.metadata.values())
    for shape in shapes:
        assert res.best[shape].subs_dict["BLOCK_M"] == 64 and res.best[shape].subs_dict["BLOCK_N"] == 32
        assert not res.from_cache[shape]
    kwargs, subs = res.config(shapes[0])
    assert kwargs == {"waves": (2, 2)} and subs[wc.sym.BLOCK_K] == 32
    # warm-up, then rounds in which every candidate is timed exactly once, in shuffled orders
    n = 4
    assert len(timer.calls) == len(shapes) * n * (2 + 5)
    first = timer.calls[: n * 7]
    rounds = [first[n * 2 + r * n : n * 2 + (r + 1) * n] for r in range(5)]
    assert all(len(set(r)) == n for r in rounds)
    assert len({tuple(c.label for c in r) for r in rounds}) > 1

    # the cache file is readable JSON with one entry per shape bucket
    cache = TuningCache("wavec.kernels.gemm:make_gemm(dtype=f16)@sm_90")
    data = json.loads(cache.path.read_text())
    assert len(data["entries"]) == 2
    entry = next(iter(data["entries"].values()))
    assert entry["best"]["subs"]["BLOCK_M"] == 64 and entry["best"]["kwargs"]["waves"] == [2, 2]
    assert "Test GPU" in next(iter(data["entries"]))

    # a later call dispatches from the cache: no compiling, no timing
    def no_timer(cand, fn):
        raise AssertionError("timed a cached shape")

    again = autotune(
        "wavec.kernels.gemm:make_gemm", SPACE, [(1000, 1000, 512), (1024, 1000, 300)], TuneOptions(timer=no_timer, **KW)
    )
    assert all(again.from_cache.values()) and not again.metadata
    assert again.best[(1000, 1000, 512)] == res.best[(1000, 1000, 512)]
    got = lookup(
        "wavec.kernels.gemm:make_gemm",
        (1000, 1000, 512),
        fixed=FIXED,
        target="sm_90",
        dtypes=KW["dtypes"],
        gpu="Test GPU",
        dims=("M", "N", "K"),
    )
    assert got == (kwargs, subs)
    assert (
        lookup(
            "wavec.kernels.gemm:make_gemm",
            (64, 64, 64),
            fixed=FIXED,
            target="sm_90",
            dtypes=KW["dtypes"],
            gpu="Test GPU",
            dims=("M", "N", "K"),
        )
        is None
    )

    # the cost model fits from the result's times (2 shapes per configuration) and ranks the winner first
    model = fit_cost_model(res)
    assert model.choose((1000, 1000, 512)).name == res.best[(1000, 1000, 512)].label


def test_autotune_factory_callable_in_process_and_pruning():
    from wavec.tuning.cost_model import ConfigModel, CostModel

    timer = FakeTimer()
    space = {"BLOCK_M": [32, 64], "BLOCK_N": [32, 64], "BLOCK_K": [32], "NUM_STAGES": [2], "GROUP_M": [1]}
    cands = enumerate_space(space, set())
    # a model that ranks 32x32 and 32x64 best: only those two are timed
    model = CostModel(
        [
            ConfigModel(
                c.label,
                (c.subs_dict["BLOCK_M"], c.subs_dict["BLOCK_N"]),
                32,
                132,
                (float(c.subs_dict["BLOCK_M"]), 0.0, 0.0, 0.0),
            )
            for c in cands
        ]
    )
    opts = TuneOptions(timer=timer, workers=0, warmup=0, rounds=3, model=model, prune_to=2, use_cache=False, **KW)
    res = autotune(make_gemm, space, [(512, 512, 512)], opts)
    assert {c.subs_dict["BLOCK_M"] for c in timer.calls} == {32}
    assert res.best[(512, 512, 512)].subs_dict == {
        "BLOCK_M": 32,
        "BLOCK_N": 64,
        "BLOCK_K": 32,
        "NUM_STAGES": 2,
        "GROUP_M": 1,
    }


def test_errors():
    with pytest.raises(TuningError, match="module-level"):
        autotune(lambda: None, SPACE, [(1, 1, 1)], TuneOptions(timer=FakeTimer(), **KW))
    bad = {"BLOCK_M": [48], "BLOCK_N": [64], "BLOCK_K": [32], "NUM_STAGES": [2], "GROUP_M": [1]}
    with pytest.raises(TuningError, match="no configuration"):
        autotune(make_gemm, bad, [(64, 64, 64)], TuneOptions(timer=FakeTimer(), **KW))


def test_tuned_config_falls_back_to_heuristic():
    from wavec.tuning.plan import gemm_config

    assert tuned_config(4096, 4096, 4096) == gemm_config(4096, 4096, 4096)


def test_cli_without_gpu(capsys):
    from wavec.__main__ import main
    from wavec.compiler import gpu_visible

    if gpu_visible():
        pytest.skip("a GPU is visible")
    assert main(["tune", "gemm", "--shapes", "4096,4096,4096"]) == 2
    assert "CUDA GPU" in capsys.readouterr().err


def test_tune_options_checked():
    with pytest.raises(TuningError, match="rounds=0"):
        TuneOptions(rounds=0)
