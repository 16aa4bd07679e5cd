"""The wgmma GEMM's tile choice (``wgmma_config``) and its tuning space (``WGMMA_SPACE`` through ``legal``)."""

import pytest

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.gemm import FACTORY, _fixed, heuristic_candidate, target_for
from wavec.tuning.legality import legal, shared_bytes
from wavec.tuning.plan import _WGMMA_TILES, WGMMA_FOR_DTYPE, WGMMA_SPACE, schedule, space_for, wgmma_config, wgmma_plan
from wavec.tuning.search import _source, enumerate_space


def _tile(m, n, k):
    subs, waves = wgmma_config(m, n, k)
    return subs[gm.BLOCK_M], subs[gm.BLOCK_N], subs[gm.NUM_STAGES], waves


@pytest.mark.parametrize(
    "shape,tile",
    [
        # 1024^3: 128x256 -> 32 workgroups (1 round, cost 32768), 128x128 -> 64 (16384 / 0.90 = 18204),
        # 64x128 -> 128 (8192 / 0.62 = 13213), 64x64 -> 256 = 2 rounds (2 x 4096 / 0.45 = 18204)
        ((1024, 1024, 1024), (64, 128, 8, (1, 1))),
        # 4096^3: 128x256 -> 512 workgroups = 4 rounds (131072); 128x128 -> 1024 = 8 rounds (145636)
        ((4096, 4096, 4096), (128, 256, 4, (2, 1))),
        # 512 x 4096: 128x256 -> 64 (32768), 128x128 -> 128 (18204), 64x128 -> 256 = 2 rounds (26426)
        ((512, 4096, 4096), (128, 128, 4, (2, 1))),
        # M <= 64: one warpgroup of 64 rows; 12288 / 128 = 96 workgroups (13213) against 192 of 64x64 (2 rounds)
        ((64, 12288, 4096), (64, 128, 8, (1, 1))),
        # N = 1280: 128x160 -> 16 x 8 = 128 workgroups, one round (20480 / 0.80 = 25600) against 80 of 128x256
        # (32768) and 160 of 128x128 (2 rounds, 36408)
        ((2048, 1280, 8192), (128, 160, 4, (2, 1))),
        # K of two 64-steps: 2 stages are enough
        ((40, 72, 128), (64, 64, 2, (1, 1))),
    ],
)
def test_wgmma_config_fills_the_gpu(shape, tile) -> None:
    assert _tile(*shape) == tile


@pytest.mark.parametrize(
    "m,n,k,ws",
    [
        (4096, 4096, 1024, True),
        (4096, 4096, 4096, True),
        (4096, 4096, 4097, False),
        (4096, 4096, 8192, False),
        # 8192 x 8192: 2048 workgroups of 128x256, 16 rounds over 132 SMs: only the K = 1024 side
        (8192, 8192, 1024, True),
        (8192, 8192, 3584, False),
        # 8 rounds: 1056 workgroups is the last grid with a producer at K = 4096 (33 x 32 tiles of 128x256)
        (33 * 128, 32 * 256, 4096, True),
        (34 * 128, 32 * 256, 4096, False),
    ],
)
def test_128x256_takes_a_producer_on_short_k(m, n, k, ws) -> None:
    """128x256 on the persistent grid: a TMA producer warpgroup (its next-tile loads overlap the consumers'
    epilogue) for K <= 1024, and for K <= 4096 on at most 8 rounds of workgroups (measured faster there,
    slower at K = 8192 and on larger grids); the split epilogue always."""
    plan = wgmma_plan(m, n, k)
    assert (plan.subs[gm.BLOCK_M], plan.subs[gm.BLOCK_N]) == (128, 256)
    assert plan.warp_specialize is ws and plan.persistent and plan.split_epilogue


@pytest.mark.parametrize(
    "subs,waves,ok,why",
    [
        ({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_STAGES": 4}, (2, 1), True, ""),
        # 64-row M wave tile per warpgroup is the instruction's M: 128 rows over 4 warpgroups is 32
        ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_STAGES": 4}, (4, 1), False, "wave tile 32 of M"),
        # (256 + 256) rows x 64 x 2 bytes x 4 stages = 262144 bytes, + 1024 of TMA mbarriers > 232448 (227 KiB)
        ({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_STAGES": 4}, (2, 1), False, "263168 bytes"),
        # (256 + 192) x 64 x 2 x 4 = 229376, + 1024 <= 232448
        ({"BLOCK_M": 256, "BLOCK_N": 192, "BLOCK_K": 64, "NUM_STAGES": 4}, (2, 1), True, ""),
    ],
)
def test_wgmma_space_legality(subs, waves, ok, why) -> None:
    kernel = gm.make_gemm(wc.f16, mma_type=WGMMA_FOR_DTYPE["f16"], waves=waves)
    got, reason = legal(kernel, {**subs, "GROUP_M": 8}, "sm_90a")
    assert got == ok and why in reason
    if ok:  # the stages, and one 1024-byte slot for the TMA copies' mbarriers (async_copy "auto" on sm_90a)
        rows = subs["BLOCK_M"] + subs["BLOCK_N"]
        assert shared_bytes(kernel, {**subs, "GROUP_M": 8}, "sm_90a") == subs["NUM_STAGES"] * rows * 64 * 2 + 1024


def test_wgmma_space_and_target() -> None:
    src = _source(FACTORY, _fixed(wc.bf16, "wgmma"))
    cands = enumerate_space(space_for("wgmma"), src.params())
    assert len(cands) == 108 == len(enumerate_space(WGMMA_SPACE, src.params()))
    assert target_for("wgmma") == "sm_90a" and target_for("mma_sync", "sm_80") == "sm_80"
    heur = heuristic_candidate(4096, 4096, 4096, "wgmma")
    assert (heur.subs_dict["BLOCK_M"], heur.subs_dict["BLOCK_N"], heur.kwargs_dict["waves"]) == (128, 256, (2, 1))
    assert heur in cands  # the heuristic's large-shape tile lies inside the space
    with pytest.raises(wc.WavecError, match="mma must be one of"):
        space_for("mfma")


def test_wgmma_tuning_cache_dispatch_from_a_folder(tmp_path, monkeypatch) -> None:
    """``benchmarks/gemm.py --tuned DIR``: the wgmma cache written by ``store_tuned(mma="wgmma")`` is read
    from DIR (not the user cache), measured buckets come from it, others from the heuristic, and the
    mma.sync cache of the same folder is a different file."""
    import shutil

    from wavec.tuning import gemm as tg
    from wavec.tuning.search import Candidate

    monkeypatch.setenv("WAVEC_CACHE_DIR", str(tmp_path / "user"))
    monkeypatch.setattr(tg, "gpu_name", lambda: "test-gpu")
    tg._DISPATCH.clear()

    def cand(bm, bn, waves):
        return Candidate(
            (("waves", waves),), (("BLOCK_K", 64), ("BLOCK_M", bm), ("BLOCK_N", bn), ("GROUP_M", 8), ("NUM_STAGES", 4))
        )

    fast, slow = cand(64, 192, (1, 1)), cand(128, 256, (2, 1))
    shape = (2048, 1280, 8192)
    tg.store_tuned(wc.f16, {shape: {fast: 1e-4, slow: 2e-4}}, gpu="test-gpu", mma="wgmma")
    folder = tmp_path / "copied"
    shutil.copytree(tmp_path / "user" / "tuning", folder)
    shutil.rmtree(tmp_path / "user")
    subs, waves, source = tg.dispatch(*shape, wc.f16, mma="wgmma", directory=folder)
    assert source == "cache" and waves == (1, 1) and {str(k): v for k, v in subs.items()}["BLOCK_N"] == 192
    other = (8192, 8192, 8192)
    subs, waves, source = tg.dispatch(*other, wc.f16, mma="wgmma", directory=folder)
    assert source == "heuristic" and (subs, waves) == wgmma_config(*other)
    assert tg.dispatch(*shape, wc.f16, mma="mma_sync", directory=folder)[2] == "heuristic"
    tg._DISPATCH.clear()


@pytest.mark.parametrize("tile", _WGMMA_TILES, ids=lambda t: f"{t.bm}x{t.bn}-s{t.stages}")
def test_every_plan_entry_passes_the_legality_filter(tile) -> None:
    """``wgmma_plan``'s table only holds schedules the tuner's legality filter accepts on sm_90a (shared
    memory of the stages under the cap, 64-row warpgroup tiles, copies that split among the threads),
    with a warp-specialized loop's 2 or more stages."""
    subs = {"BLOCK_M": tile.bm, "BLOCK_N": tile.bn, "BLOCK_K": 64, "NUM_STAGES": tile.stages, "GROUP_M": 8}
    for ws in {tile.warp_specialize, tile.ws_max_k > 0}:  # both schedules of an entry with a K threshold
        kernel = gm.make_gemm(
            wc.f16,
            32,
            WGMMA_FOR_DTYPE["f16"],
            tile.waves,
            sched=schedule(prefetch_fragments=True, warp_specialize=ws, persistent=tile.persistent),
        )
        ok, why = legal(kernel, subs, "sm_90a")
        assert ok, (ws, why)
    assert tile.stages >= 2 and 0 < tile.rate <= 1
