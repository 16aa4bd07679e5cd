"""Binary tier: every mma.sync configuration ``matmul`` picks for the benchmark shape file
(``benchmarks/data/gemm_shapes.csv``) and the squares 1024-8192 assembles for sm_90 without spills, in f16
and bf16 (issue 5: no spills in the chosen configurations).  The shapes' tiles, waves and split-K choice
come from ``splitk_config``, as ``matmul`` calls it; C is in the input dtype, as the benchmark times it."""

import csv
import functools
import pathlib

import pytest

import wavec as wc
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels import gemm as gm
from wavec.tuning.plan import splitk_config

pytest.importorskip("iree.compiler")

SHAPES = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "gemm_shapes.csv"
MMA = {"f16": (wc.f16, wc.MMAType.NV_F32_16x8x16_F16), "bf16": (wc.bf16, wc.MMAType.NV_F32_16x8x16_BF16)}


@functools.cache
def chosen_configs() -> list[tuple]:
    """(subs items, waves, split-K?) of every distinct choice over the shapes."""
    with SHAPES.open() as f:
        shapes = [(int(r["M"]), int(r["N"]), int(r["K"])) for r in csv.DictReader(f)]
    shapes += [(n, n, n) for n in (1024, 2048, 4096, 8192)]
    seen = set()
    for m, n, k in shapes:
        subs, waves, split = splitk_config(m, n, k)
        seen.add((tuple(sorted(((str(s), v) for s, v in subs.items()))), waves, split > 1))
    return sorted(seen)


def _name(config: tuple) -> str:
    s = dict(config[0])
    return f"{s['BLOCK_M']}x{s['BLOCK_N']}x{s['BLOCK_K']}s{s['NUM_STAGES']}w{config[1][0]}x{config[1][1]}" + (
        "-splitk" if config[2] else ""
    )


def test_the_shape_file_covers_every_tile_family() -> None:
    """The check below is not vacuous: the big tiles, the mid-size ones and the split-K decode tiles."""
    tiles = {(dict(s)["BLOCK_M"], dict(s)["BLOCK_N"]) for s, _w, _split in chosen_configs()}
    assert {(128, 256), (128, 128), (16, 64)} <= tiles
    assert any(split for *_, split in chosen_configs()) and not all(split for *_, split in chosen_configs())


@pytest.mark.skipif(find_ptxas() is None, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize("dtype", list(MMA))
@pytest.mark.parametrize("config", chosen_configs(), ids=_name)
def test_chosen_configs_have_no_spills(config: tuple, dtype: str) -> None:
    items, waves, split = config
    wdt, mma = MMA[dtype]
    subs = {wc.sym(s): v for s, v in items}
    kernel = (
        gm.make_gemm_splitk(wdt, mma_type=mma, waves=waves)
        if split
        else gm.make_gemm(wdt, mma_type=mma, waves=waves, out_dtype=wdt)
    )
    m = wc.compile(kernel, subs, target="sm_90", backend="cuda", cache=False).metadata
    assert m.spills == 0 and m.registers <= 255, (items, waves, m.registers, m.spills)
