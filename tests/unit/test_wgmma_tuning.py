"""The wgmma GEMM's tile choice (``wgmma_config``) and its tuning space (``WGMMA_SPACE`` through ``legal``)."""

import pytest

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.gemm import FACTORY, WGMMA_SPACE, _fixed, heuristic_candidate, space_for, target_for
from wavec.tuning.legality import legal, shared_bytes
from wavec.tuning.search import _source, enumerate_space


def _tile(m, n, k):
    subs, waves = gm.wgmma_config(m, n, k)
    return subs[gm.BLOCK_M], subs[gm.BLOCK_N], subs[gm.NUM_STAGES], waves


@pytest.mark.parametrize("shape,tile", [
    # 1024^3: 128x256 -> 32 workgroups (1 round, cost 32768), 128x128 -> 64 (16384 / 0.97 = 16890),
    # 64x128 -> 128 (8192 / 0.70 = 11703), 64x64 -> 256 = 2 rounds (2 x 4096 / 0.40 = 20480)
    ((1024, 1024, 1024), (64, 128, 4, (1, 1))),
    # 4096^3: 128x256 -> 512 workgroups = 4 rounds (131072); 128x128 -> 2048 = 16 rounds (270226)
    ((4096, 4096, 4096), (128, 256, 4, (2, 1))),
    # 512 x 4096: 128x256 -> 64 (32768), 128x128 -> 128 (16890), 64x128 -> 256 = 2 rounds (23406)
    ((512, 4096, 4096), (128, 128, 4, (2, 1))),
    # M <= 64: one warpgroup of 64 rows; 12288 / 128 = 96 workgroups (11703) against 48 of 64x256 (43691 / 2)
    ((64, 12288, 4096), (64, 128, 4, (1, 1))),
    # K of two 64-steps: 3 stages are enough
    ((40, 72, 128), (64, 64, 3, (1, 1))),
])
def test_wgmma_config_fills_the_gpu(shape, tile) -> None:
    assert _tile(*shape) == tile


@pytest.mark.parametrize("subs,waves,ok,why", [
    ({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_STAGES": 4}, (2, 1), True, ""),
    # 64-row M wave tile per warpgroup is the instruction's M: 128 rows over 4 warpgroups is 32
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_STAGES": 4}, (4, 1), False, "wave tile 32 of M"),
    # (256 + 256) rows x 64 x 2 bytes x 4 stages = 262144 bytes > 232448 (227 KiB)
    ({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_STAGES": 4}, (2, 1), False, "262144 bytes"),
    # (256 + 192) x 64 x 2 x 4 = 229376 <= 232448
    ({"BLOCK_M": 256, "BLOCK_N": 192, "BLOCK_K": 64, "NUM_STAGES": 4}, (2, 1), True, ""),
])
def test_wgmma_space_legality(subs, waves, ok, why) -> None:
    kernel = gm.make_gemm(wc.f16, mma_type=gm.WGMMA_FOR_DTYPE["f16"], waves=waves)
    got, reason = legal(kernel, {**subs, "GROUP_M": 8}, "sm_90a")
    assert got == ok and why in reason
    if ok:
        rows = subs["BLOCK_M"] + subs["BLOCK_N"]
        assert shared_bytes(kernel, {**subs, "GROUP_M": 8}, "sm_90a") == subs["NUM_STAGES"] * rows * 64 * 2


def test_wgmma_space_and_target() -> None:
    src = _source(FACTORY, _fixed(wc.bf16, "wgmma"))
    cands = enumerate_space(space_for("wgmma"), src.params())
    assert len(cands) == 108 == len(enumerate_space(WGMMA_SPACE, src.params()))
    assert target_for("wgmma") == "sm_90a" and target_for("mma_sync", "sm_80") == "sm_80"
    heur = heuristic_candidate(4096, 4096, 4096, "wgmma")
    assert heur.subs_dict["BLOCK_N"] == 256 and heur.kwargs_dict["waves"] == (2, 1)
    assert heur in cands  # the heuristic's large-shape tile lies inside the space
    with pytest.raises(wc.WavecError, match="mma must be one of"):
        space_for("mfma")
