"""The split-K rule of ``wavec.kernels.gemm`` (``choose_split`` / ``splitk_config``) on the benchmark's decode
shapes, that it leaves ``gemm_config``'s tile alone, and that what it picks passes the legality filter."""

import pytest

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning import legal
from wavec.tuning.plan import choose_split, gemm_config, splitk_config

# (M, N, K) -> (BLOCK_N, S): 16x64 tiles below 264 tiles, doubling S until S * tiles >= 264 with >= 4 K steps
# (BLOCK_K 128) per slice; 16x128 tiles from N = 33792 on (>= 264 tiles: never split).
DECODE = {
    (1, 4096, 4096): (64, 8),  # 64 tiles -> 512 workgroups, 4 K steps each
    (16, 4096, 11008): (64, 8),  # 86 K steps: 11 per slice
    (1, 8192, 8192): (64, 4),  # 128 tiles -> 512
    (16, 5120, 13824): (64, 4),  # 80 tiles -> 320
    (1, 14336, 4096): (64, 2),  # 224 tiles -> 448
    (16, 28672, 4096): (64, 1),  # 448 tiles: already 3.4 per SM
    (16, 128256, 4096): (128, 1),
    (1, 4096, 1024): (64, 2),  # 8 K steps: at most 2 slices of 4
    (1, 4096, 512): (64, 2),  # BLOCK_K 64 below K = 1024: 8 K steps
}


@pytest.mark.parametrize("shape", list(DECODE), ids=lambda s: "x".join(map(str, s)))
def test_split_rule_on_decode_shapes(shape) -> None:
    subs, waves, split = splitk_config(*shape)
    assert (subs, waves) == gemm_config(*shape)  # the tile is gemm_config's, unchanged
    bn, want = DECODE[shape]
    assert (subs[gm.BLOCK_N], split) == (bn, want)
    m, n, k = shape
    tiles, steps = -(-n // bn), -(-k // subs[gm.BLOCK_K])
    if split > 1:
        assert 2 * 132 <= tiles * split < 4 * 132 or 2 * split > steps // 4
        assert steps // split >= 4


def test_no_split_outside_decode() -> None:
    assert splitk_config(17, 4096, 4096)[2] == 1
    assert splitk_config(128, 256, 8192)[2] == 1
    assert choose_split(tiles=1, k_steps=7) == 1  # too shallow for two slices of 4 steps
    assert choose_split(tiles=1, k_steps=10**6) == 16  # capped
    assert gm.split_slice(200, 3, 32) == 96 and gm.split_slice(40, 4, 32) == 32


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_split_configs_are_legal(dtype, target: str) -> None:
    mma = wc.MMAType.NV_F32_16x8x16_F16 if dtype == wc.f16 else wc.MMAType.NV_F32_16x8x16_BF16
    for shape in DECODE:
        subs, waves, split = splitk_config(*shape)
        ok, why = legal(gm.make_gemm_splitk(dtype, mma_type=mma, waves=waves), subs, target)
        assert ok, (shape, why)
    for split in (2, 4, 8, 16):
        ok, why = legal(gm.make_splitk_reduce(dtype), {gm.S: split, gm.BLOCK_P: 512}, target)
        assert ok, (split, why)
