"""TileCache: a GEMM launch's decomposition assembled from a proxy of <= 2x2 tiles equals the full walk's,
task for task, and so do its features and the model's predicted time; persistent grids fall back."""

import numpy as np
import pytest

from wavec.perf import estimator as E
from wavec.perf.cases import Case, compile_case
from wavec.perf.decompose import decompose
from wavec.perf.features import features
from wavec.perf.gpus import gpu
from wavec.perf.schedule import schedule
from wavec.perf.tile_cache import TileCache, tile_axes, tile_coords

FLAGS = "ws=0;pe=0;se=0;pf=1"
CONFIGS = [
    ("gemm_mma_sync", "sm_90", f"bm=128;bn=128;bk=32;st=3;gm=8;w=2x2;{FLAGS};c=f32"),
    ("gemm_mma_sync", "sm_90", f"bm=16;bn=64;bk=64;st=4;gm=8;w=1x4;{FLAGS};c=f32"),
    # its grid text lists N's tiles first: the axis order comes from the probe walk, not the text
    ("gemm_mma_sync", "sm_90", f"bm=128;bn=64;bk=32;st=2;gm=8;w=1x2;{FLAGS};c=f32"),
    ("gemm_mma_sync", "sm_80", f"bm=64;bn=256;bk=32;st=2;gm=8;w=1x4;{FLAGS}"),
    ("gemm_wgmma", "sm_90a", "bm=64;bn=128;bk=64;st=8;gm=8;w=1x1;ws=1;pe=0;se=1;pf=0"),
]
# interior and edge tiles on both axes, one tile row or column, K tails, a group of GROUP_M cut short
SHAPES = [
    (200, 1024, 520),
    (1000, 3000, 520),
    (1, 8192, 1024),
    (333, 1416, 8200),
    (2048, 100, 64),
    (17, 5000, 96),
    (1100, 1100, 136),
]


def _same(full, cached):
    assert cached.grid == full.grid and cached.footprint == full.footprint and cached.tensors == full.tensors
    assert cached.symbols == full.symbols and cached.notes == full.notes
    assert set(cached.demand) == set(full.demand) and set(cached.trips) == set(full.trips)
    for key, values in full.demand.items():
        np.testing.assert_array_equal(cached.demand[key], values, err_msg=key)
    for key, values in full.trips.items():
        np.testing.assert_array_equal(cached.trips[key], values, err_msg=key)


@pytest.mark.parametrize(("family", "target", "config"), CONFIGS)
def test_cached_equals_full_walk(family, target, config):
    spec = gpu("h100")
    kernel = compile_case(Case(family, "gemm", "f16", config, "1x1x8"), target)
    cache = TileCache(kernel, spec)
    assert cache.axes is not None
    for m, n, k in SHAPES:
        full = decompose(kernel, (m, k), (n, k), gpu=spec)
        cached = cache.decompose((m, k), (n, k))
        _same(full, cached)
        f_full, f_cached = features(full, schedule(full, spec)), features(cached, schedule(cached, spec))
        assert f_cached.values == f_full.values
        fam = "gemm_wgmma" if family == "gemm_wgmma" else "gemm_mma_sync"
        t_full = E.estimate(E.launch_values(full, f_full), spec, "h100", fam).time_s
        t_cached = E.estimate(E.launch_values(cached, f_cached), spec, "h100", fam).time_s
        assert t_cached == t_full
    # the same K and tile remainders (M differing by a multiple of every tile height) share one proxy walk
    walks = cache.walks
    cache.decompose((1000 + 256, 3000), (3000, 3000))
    cache.decompose((1000 + 1024, 3000), (3000, 3000))
    assert cache.walks == walks + 1


def test_tile_coords_grouped_order_visits_every_tile_once():
    for n0, n1, group in [(5, 3, 8), (17, 4, 8), (9, 9, 2), (1, 7, 8)]:
        t0, t1 = tile_coords(n0, n1, group, linear=True)
        assert sorted(zip(t0.tolist(), t1.tolist())) == [(i, j) for i in range(n0) for j in range(n1)]
    t0, t1 = tile_coords(3, 2, 1, linear=False)
    assert t0.tolist() == [0, 1, 2, 0, 1, 2] and t1.tolist() == [0, 0, 0, 1, 1, 1]


def test_persistent_grid_falls_back_to_the_full_walk():
    spec = gpu("h100")
    config = "bm=128;bn=128;bk=64;st=4;gm=8;w=2x1;ws=1;pe=1;se=1;pf=0"
    kernel = compile_case(Case("gemm_wgmma", "gemm", "f16", config, "1x1x8"), "sm_90a")
    cache = TileCache(kernel, spec)
    assert tile_axes(kernel.artifact) is None and cache.axes is None
    m, n, k = 1000, 3000, 520
    _same(decompose(kernel, (m, k), (n, k), gpu=spec), cache.decompose((m, k), (n, k)))
    assert cache.walks == 1
