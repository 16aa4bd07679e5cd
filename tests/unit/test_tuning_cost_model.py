"""Cost model (fit on synthetic data with known coefficients, host-side choice speed) and the ceiling."""

import random
import time

import pytest

from wavec.tuning.ceiling import device_rates, gemm_ceiling, percent_of_ceiling
from wavec.tuning.cost_model import ConfigModel, CostModel, features, fit, predict

TRUE = (5e-6, 2e-6, 3e-8, -4e-7)  # startup, per wave, per CTA, sub-wave


def _points(coef, n, slots=264, noise=0.0, seed=0):
    rng = random.Random(seed)
    pts = []
    for _ in range(n):
        ctas, work = rng.randint(1, 4000), rng.randint(1, 128)
        t = predict(coef, ctas, slots, work)
        pts.append((ctas, slots, work, t * (1 + rng.uniform(-noise, noise))))
    return pts


def test_features():
    assert features(264, 264) == (1.0, 1, 264, 0.0)
    assert features(265, 264, 2) == (1.0, 4, 530, 2 / 264)


def test_fit_recovers_coefficients():
    coef = fit(_points(TRUE, 25))
    for got, want in zip(coef, TRUE):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-12)


def test_fit_uses_at_most_25_points_and_tolerates_noise():
    pts = _points(TRUE, 200, noise=0.01, seed=1)
    coef = fit(pts)
    held = _points(TRUE, 50, seed=2)
    errs = [abs(predict(coef, c, s, w) - t) / t for c, s, w, t in held]
    assert sum(errs) / len(errs) < 0.03 and max(errs) < 0.15


def _model():
    m = CostModel()
    for i, (bm, bn, slots) in enumerate([(128, 128, 264), (128, 256, 132), (64, 128, 396), (64, 64, 528),
                                        (16, 128, 528), (256, 128, 132)]):
        coef = (4e-6, 1e-6 * bm * bn / 16384, 1e-9 * (i + 1), 0.0)
        m.configs.append(ConfigModel(f"c{i}", (bm, bn), 64, slots, coef))
    return m


def test_choose_is_the_argmin_and_fast():
    m = _model()
    shape = (4096, 4096, 4096)
    best = m.choose(shape)
    assert best is min(m.configs, key=lambda c: m.predict(c, shape))
    assert m.rank(shape)[0] is best
    shapes = [(random.randint(1, 8192), random.randint(1, 8192), random.randint(16, 8192)) for _ in range(200)]
    n = 0
    t0 = time.perf_counter()
    while n < 5000:
        m.choose(shapes[n % 200])
        n += 1
    per_call = (time.perf_counter() - t0) / n
    assert per_call <= 20e-6, f"{per_call * 1e6:.1f} us per choice"


def test_model_json_roundtrip():
    m = _model()
    m2 = CostModel.from_json(m.to_json())
    assert [c.name for c in m2.rank((1000, 3000, 512))] == [c.name for c in m.rank((1000, 3000, 512))]


def test_ceiling():
    h200 = device_rates("NVIDIA H200")
    assert h200.hbm_bytes == 4.8e12 and device_rates("NVIDIA H100 80GB HBM3").hbm_bytes == 3.35e12
    assert device_rates("H200", {"hbm_bytes": 4e12}).hbm_bytes == 4e12
    big = gemm_ceiling(8192, 8192, 8192, 128, 128, rates=device_rates("H200", {"l2_bytes": 20e12}))
    assert big["limiter"] == "mma"
    assert gemm_ceiling(8192, 8192, 8192, 128, 128, rates=h200)["bound"] >= big["bound"]
    ideal = 2 * 8192**3 / 989e12
    assert ideal < big["bound"] < 1.05 * ideal + 1e-5  # 4096 CTAs over 132 SMs: 32 rounds of 31.03
    decode = gemm_ceiling(1, 8192, 8192, 16, 128, waves=(1, 4), rates=h200)
    assert decode["limiter"] == "hbm"
    # one CTA more than the SMs: the busiest SM runs two, the matrix bound doubles
    one = gemm_ceiling(128 * 132, 128, 4096, 128, 128, rates=h200)["mma"]
    two = gemm_ceiling(128 * 133, 128, 4096, 128, 128, rates=h200)["mma"]
    assert two == pytest.approx(2 * one)
    assert percent_of_ceiling(2 * big["bound"], big) == pytest.approx(50.0)
