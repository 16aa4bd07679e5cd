"""The performance model's estimator (``wavec.perf.estimator``, numpy) and its training (``wavec.perf.train``,
torch on the CPU): training recovers a known efficiency function far better than a constant or the
linear baseline, the P80 model sits above most rows, numpy inference equals the torch network's, weights
round-trip through their files and the shipped ones load from the package."""

import csv
from pathlib import Path

import numpy as np
import pytest

import wavec.perf
from wavec.errors import OptionError
from wavec.perf import estimator as E
from wavec.perf import gpu
from wavec.perf import train as T


def _known(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and an efficiency that depends on three of them (a sigmoid, a square), the rest noise."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, d))
    eff = 0.2 + 0.7 / (1 + np.exp(-6 * (x[:, 0] - x[:, 1]))) * (0.5 + 0.5 * x[:, 2] ** 2)
    return x, eff


def test_training_recovers_a_known_efficiency_function() -> None:
    x, eff = _known(400, 12, 0)
    fit, held = slice(0, 300), slice(300, None)
    model = T.fit_mlp(x[fit], eff[fit], steps=1500)
    mlp = T.mape(model.efficiency(x[held]), eff[held])
    constant = T.mape(np.full(100, np.median(eff[fit])), eff[held])
    linear = T.mape(E.fit_linear(x[fit], eff[fit]).efficiency(x[held]), eff[held])
    assert mlp < 5.0 and mlp < constant / 5 and mlp < linear / 2, (mlp, constant, linear)
    ceiling = T.fit_mlp(x[fit], eff[fit], "p80", steps=1500)
    below = float(np.mean(eff[fit] <= ceiling.efficiency(x[fit])))
    assert 0.7 <= below <= 0.95, below
    assert np.all(ceiling.efficiency(x) > 0)


def test_numpy_inference_matches_the_torch_network() -> None:
    import torch

    torch.manual_seed(3)
    net = T.make_net(len(E.INPUTS), (32, 32))
    for p in net.parameters():  # not the default init: every weight matters
        torch.nn.init.normal_(p, std=0.3)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, len(E.INPUTS))) * 3
    mean, std = rng.normal(size=len(E.INPUTS)), rng.uniform(0.5, 2, len(E.INPUTS))
    mlp = T.to_mlp(net, mean, std)
    with torch.no_grad():
        want = net(torch.tensor((x - mean) / std, dtype=torch.float64))[:, 0].numpy()
    np.testing.assert_allclose(mlp.log_efficiency(x), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mlp.efficiency(x[:1]), np.exp(want[:1]), rtol=1e-12)


def test_model_round_trips_through_its_file(tmp_path) -> None:
    x, eff = _known(60, len(E.INPUTS), 2)
    mean = T.fit_ensemble(x, eff, steps=50, seeds=(0, 1))
    model = E.Model("rows", mean, T.fit_ensemble(x, eff, "p80", steps=50, seeds=(0, 1, 2)), {"rows": 60})
    model.save(tmp_path / "rows.npz")
    back = E.Model.read(tmp_path / "rows.npz")
    assert back.family == "rows" and back.meta == {"rows": 60}
    assert len(back.mean.members) == 2 and len(back.ceiling.members) == 3
    with np.load(tmp_path / "rows.npz") as z:
        assert z["mean_1_w0"].dtype == np.float32 and z["p80_2_b2"].dtype == np.float32  # the file's precision
    # float32 weights: the efficiencies agree to float32's rounding, not to the last float64 bit
    np.testing.assert_allclose(back.mean.efficiency(x), model.mean.efficiency(x), rtol=1e-5)
    np.testing.assert_allclose(back.ceiling.efficiency(x), model.ceiling.efficiency(x), rtol=1e-5)
    back.save(tmp_path / "again.npz")  # already rounded: a second round trip is exact
    again = E.Model.read(tmp_path / "again.npz")
    np.testing.assert_array_equal(again.mean.efficiency(x), back.mean.efficiency(x))


def test_ensemble_is_the_geometric_mean_of_its_members() -> None:
    x, eff = _known(80, 6, 4)
    members = [T.fit_mlp(x, eff, steps=60, seed=s) for s in (0, 1, 2)]
    assert not np.allclose(members[0].efficiency(x), members[1].efficiency(x))  # seeds differ
    want = np.prod([m.efficiency(x) for m in members], axis=0) ** (1 / 3)
    np.testing.assert_allclose(E.Ensemble(tuple(members)).efficiency(x), want, rtol=1e-12)


def test_validation_split_holds_out_whole_training_shapes() -> None:
    shapes = [f"{i % 25}x64" for i in range(100)]  # 25 shapes, 4 rows each
    val = T.validation_split(shapes, seed=3)
    held = {s for s, v in zip(shapes, val, strict=True) if v}
    kept = {s for s, v in zip(shapes, val, strict=True) if not v}
    assert len(held) == 5 and not held & kept and val.sum() == 20  # 20 % of the shapes, every row of each
    np.testing.assert_array_equal(val, T.validation_split(shapes, seed=3))
    assert T.validation_split(["a", "a", "b"]).sum() in (1, 2)  # one of two shapes, never both
    assert T.validation_split(["a", "a"]).all()  # a single shape is all validation: nothing is chosen on it


def test_weight_decay_is_chosen_on_validation_shapes() -> None:
    x, eff = _known(120, 8, 6)
    shapes = [str(i // 3) for i in range(120)]
    wd, scores = T.choose_weight_decay(x, eff, shapes, (16, 16), 200, 0)
    assert set(scores) == {f"{w:g}" for w in T.WEIGHT_DECAYS} and wd in T.WEIGHT_DECAYS
    assert scores[f"{wd:g}"] == min(scores.values())
    # one shape: no validation rows to choose on, so the default
    assert T.choose_weight_decay(x, eff, ["s"] * 120, (16, 16), 10, 0) == (T.WEIGHT_DECAY, {})
    # two splits: each decay's score is the mean of its score on each split (the fits' seed unchanged)
    wd2, scores2 = T.choose_weight_decay(x, eff, shapes, (16, 16), 200, 0, splits=2)
    each = [T._validation_scores(x, eff, T.validation_split(shapes, s), (16, 16), 200, 0, "mape", None) for s in (0, 1)]
    assert scores2 == {f"{w:g}": round((each[0][w] + each[1][w]) / 2, 4) for w in T.WEIGHT_DECAYS}
    assert scores == {f"{w:g}": round(each[0][w], 4) for w in T.WEIGHT_DECAYS} and each[0] != each[1]
    assert scores2[f"{wd2:g}"] == min(scores2.values())


def _values(cycles: dict[str, float], **extra: float) -> dict[str, float]:
    values = {f"{c}_cycles": cycles.get(c, 0.0) for c in E.CYCLES}
    values.update({"tasks": 264.0, "waves": 1.0, "blocks_per_sm": 2.0, "sm_tasks": 2.0, "threads": 256.0})
    values.update({"global.gpu_bytes": 1e6, "tensor.gpu_ops": 1e9, "l2.gpu_bytes": 4e6})
    values.update({"align.read_bytes": 128.0, "align.write_bytes": 128.0})
    values.update({"wave.dram_bytes": 1e6, "wave.reuse": 1.0, "tile.steps": 1.0, "tile.fill": 1.0, "tile.stages": 1.0})
    return {**values, **extra}


def test_model_inputs_name_the_bound_and_the_launch() -> None:
    h100 = gpu("h100")
    cycles = {"tensor.sm": 1830.0, "tensor.gpu": 915.0, "global.gpu": 915.0}
    x = E.model_inputs(_values(cycles, registers=128.0), h100)
    named = dict(zip(E.INPUTS, x, strict=True))
    assert named["log2_tensor.sm/roof"] == 0.0 and named["log2_global.gpu/roof"] == -1.0
    assert named["log2_xu.sm/roof"] == -10.0  # an idle pipeline sits at the floor, 2^-10
    assert named["log2_roofline_us"] == pytest.approx(0.0)  # 1830 cycles at 1.83 GHz: 1 us
    # 264 tasks, 2 per SM on 132 SMs: one full wave, balanced
    assert (named["log2_waves"], named["last_wave_fill"], named["wave_fill"], named["sm_imbalance"]) == (0, 1, 1, 1)
    assert named["log2_flop_per_byte"] == pytest.approx(np.log2(1001.0))
    assert named["registers_255"] == pytest.approx(128 / 255)
    assert named["tensor.sm/mean"] == 2.0 and named["xu.sm/mean"] == 1.0  # busiest SM twice the mean; idle
    assert named["log2_align_read"] == 7.0 and named["log2_align_write"] == 7.0
    # no tiling: the wave's DRAM bytes are the footprint (1 MB at H100 HBM rate), nothing shared, one full step
    hbm_cycles = 1e6 / (h100.hbm_bytes_s / h100.clock_hz)
    assert named["log2_wave_dram/roof"] == pytest.approx(np.log2(hbm_cycles / 1830.0))
    assert (named["log2_wave_reuse"], named["log2_tile_steps"], named["tile_fill"]) == (0.0, 0.0, 1.0)
    # a GEMM: 8 x 1 MB of panels requested per MB read, 82 K steps of which the last is half full, 4 stages
    gemm = _values(cycles, **{"wave.reuse": 0.125, "tile.steps": 82.0, "tile.fill": 0.5, "tile.stages": 4.0})
    named = dict(zip(E.INPUTS, E.model_inputs(gemm, h100), strict=True))
    assert named["log2_wave_reuse"] == -3.0 and named["log2_tile_steps"] == pytest.approx(np.log2(82))
    assert (named["tile_fill"], named["tile_stages_8"]) == (0.5, 0.5)
    # attention's and elementwise's models do without the tiling inputs: the rest, in the same order
    rows = E.model_inputs(gemm, h100, "attention")
    assert E.inputs_for("attention") == tuple(n for n in E.INPUTS if n not in E.TILING_INPUTS) and len(rows) == 34
    assert rows.tolist() == [v for n, v in named.items() if n not in E.TILING_INPUTS]
    assert E.model_inputs(gemm, h100, "gemm_wgmma").tolist() == list(named.values())
    # 300 tasks on 264 slots: 1.14 waves, the second 36/264 full; the busiest SM runs 3 (mean 300/132)
    tail = _values(cycles, tasks=300.0, sm_tasks=3.0, **{"align.read_bytes": 16.0})
    named = dict(zip(E.INPUTS, E.model_inputs(tail, h100), strict=True))
    assert named["log2_waves"] == pytest.approx(np.log2(300 / 264))
    assert named["last_wave_fill"] == pytest.approx(36 / 264) and named["wave_fill"] == pytest.approx(300 / 528)
    assert named["sm_imbalance"] == pytest.approx(3 * 132 / 300) and named["log2_align_read"] == 4.0


def _feature_rows(n: int) -> list[dict[str, str]]:
    """A feature table: per GPU and row, features and a time from a known efficiency of the bound."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(n):
        roof_cycles = float(rng.uniform(1e3, 1e6))
        share = float(rng.uniform(0.1, 1.0))
        values = _values({"tensor.sm": roof_cycles, "l2.sm": share * roof_cycles})
        for key in ("h100", "h200"):
            eff = 0.4 + 0.5 * share if key == "h100" else 0.3 + 0.5 * share
            roof_us = roof_cycles / gpu(key).clock_hz * 1e6
            row = {"gpu": key, "family": "gemm_wgmma" if i % 2 else "rows", "shape": f"{i + 1}x64"}
            row["split"] = "test" if i % 5 == 0 else "train"
            row.update({"us": str(roof_us / eff), "roofline_us": str(roof_us)})
            rows.append({**row, **{f"f:{k}": str(v) for k, v in values.items()}})
    return rows


def test_train_all_writes_each_gpu_and_all_and_skips_small_families(tmp_path, capsys) -> None:
    rows = _feature_rows(40)
    rows += [{**rows[2], "family": "moe"}]  # one row: too few to train on
    models = T.train_all(rows, tmp_path, steps=300, members=2)
    assert {(m.meta["trained_on"], m.family) for m in models} == {
        (g, f) for g in ("h100", "h200", "all") for f in ("rows", "gemm_wgmma")
    }
    assert sorted(p.name for p in (tmp_path / "h200").iterdir()) == ["gemm_wgmma.npz", "rows.npz"]
    assert "moe: 1 rows" in capsys.readouterr().err
    model = E.Model.read(tmp_path / "h100" / "rows.npz")
    assert model.meta["rows"] == 16 and model.meta["split"] == "train"  # the test rows are held out
    assert len(model.mean.members) == len(model.ceiling.members) == model.meta["members"] == 2
    assert model.meta["weight_decay"] in T.WEIGHT_DECAYS and model.meta["p80_weight_decay"] in T.WEIGHT_DECAYS
    assert set(model.meta["val_mape"]) == {f"{w:g}" for w in T.WEIGHT_DECAYS}  # chosen on validation shapes
    held = [r for r in rows if r["gpu"] == "h100" and r["family"] == "rows" and r["split"] == "test"]
    x, eff = T.table(held)
    assert T.mape(model.mean.efficiency(x), eff) < 10.0


def test_training_cli_reads_feature_csvs(tmp_path) -> None:
    rows = _feature_rows(24)
    path = tmp_path / "features.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert T.main([str(path), "--out", str(tmp_path / "w"), "--steps", "100", "--rows", "all"]) == 0
    assert E.Model.read(tmp_path / "w" / "all" / "rows.npz").meta["rows"] == 24
    # --only: just the models named, the others' files untouched
    argv = [str(path), "--out", str(tmp_path / "o"), "--steps", "50", "--members", "1", "--only", "h200"]
    assert T.main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["h200"]


def test_shipped_weights_load_from_the_package() -> None:
    shipped = E.shipped()
    assert shipped, "no weights in wavec/perf/weights"
    root = Path(wavec.perf.__file__).parent / "weights"
    for trained_on, families in shipped.items():
        assert (root / trained_on).is_dir()
        for family in families:
            model = E.load(family, trained_on)
            assert model.family == family and model.meta["trained_on"] == trained_on
            assert model.meta["inputs"] == list(E.inputs_for(family))
    with pytest.raises(OptionError, match="no weights for nope"):
        E.load("nope", "h100")


def test_linear_and_ridge_baselines() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(size=(200, 5))
    eff = np.exp(0.3 * x[:, 0] - 0.2 * x[:, 3] - 1.0)  # log-linear: least squares recovers it exactly
    exact = E.fit_linear(x, eff)
    np.testing.assert_allclose(exact.efficiency(x), eff, rtol=1e-9)
    # a huge ridge shrinks every coefficient to nothing: the geometric mean of the training efficiencies
    flat = E.fit_linear(x, eff, ridge=1e6)
    np.testing.assert_allclose(flat.efficiency(x), np.exp(np.log(eff).mean()), rtol=1e-3)
    val = np.arange(200) % 5 == 0
    fit, strength = E.fit_ridge(x, eff * np.exp(rng.normal(scale=0.01, size=200)), val)
    assert strength in E.RIDGES and strength <= 1e-2  # little noise: a light penalty wins on validation
    assert T.mape(fit.efficiency(x), eff) < 2.0


def test_family_of_library_kernels() -> None:
    assert E.family_of("gemm", "wgmma") == "gemm_wgmma" and E.family_of("rms_norm") == "rows"
    assert E.family_of("silu_and_mul") == "elementwise" and E.family_of("moe_down") == "moe"
    with pytest.raises(OptionError, match="family"):
        E.family_of("conv")


def _launch_rows(family: str) -> list[dict[str, str]]:
    """Short launches: per GPU, its fixed launch cost plus the roofline over an efficiency of the bound's
    share that both GPUs share (so a model that knows the fixed cost transfers between them)."""
    rng = np.random.default_rng(9)
    rows = []
    for i in range(60):
        roof_cycles, share = float(rng.uniform(200, 2e4)), float(rng.uniform(0.1, 1.0))
        values = _values({"global.gpu": roof_cycles, "l2.sm": share * roof_cycles})
        for key in ("h100", "h200"):
            roof_us = roof_cycles / gpu(key).clock_hz * 1e6
            us = gpu(key).launch_s * 1e6 + roof_us / (0.3 + 0.5 * share)
            row = {"gpu": key, "family": family, "shape": f"{i + 1}x64", "split": "test" if i % 5 == 0 else "train"}
            row.update({"us": str(us), "roofline_us": str(roof_us)})
            rows.append({**row, **{f"f:{k}": str(v) for k, v in values.items()}})
    return rows


def test_launch_families_carry_each_gpus_fixed_cost_across_gpus(tmp_path) -> None:
    assert gpu("h100").launch_s > gpu("h200").launch_s > 0  # the H200 launches faster (docs/perf_model.md)
    assert "elementwise" in E.LAUNCH_FAMILIES and "attention" not in E.LAUNCH_FAMILIES
    errors = {}
    for family in ("elementwise", "attention"):  # the same launches, with and without the fixed cost
        rows = _launch_rows(family)
        model = T.train_all(rows, tmp_path, steps=600, members=1, only=("h100",))[0]
        assert model.meta["launch_offset"] is (family in E.LAUNCH_FAMILIES)
        test = [r for r in rows if r["gpu"] == "h200" and r["split"] == "test"]
        x, _eff = T.table(test)
        roof_s = np.array([float(r["roofline_us"]) for r in test]) * 1e-6
        time_s, ceiling_s = model.times_s(x, roof_s, gpu("h200"))
        np.testing.assert_allclose(time_s, model.fixed_s(gpu("h200")) + roof_s / model.mean.efficiency(x))
        assert np.all(ceiling_s > model.fixed_s(gpu("h200")))
        us = np.array([float(r["us"]) for r in test])
        errors[family] = float(np.mean(np.abs(time_s * 1e6 / us - 1))) * 100
    assert errors["elementwise"] < 0.5 and errors["elementwise"] < errors["attention"] / 3, errors


def test_launch_targets_are_the_launch_free_efficiency() -> None:
    rows = [{"gpu": "h100", "us": "4.36"}, {"gpu": "h200", "us": "2.0"}]
    eff, weight = T.launch_targets(rows, np.array([0.5, 0.25]))
    np.testing.assert_allclose(weight, [1 - 1.09 / 4.36, 0.5])
    np.testing.assert_allclose(eff, [0.5 / 0.75, 0.5])  # roofline 2.18 us over 4.36 - 1.09; 0.5 us over 1 us
    with pytest.raises(ValueError, match="launch cost"):
        T.launch_targets([{"gpu": "h200", "us": "0.9"}], np.array([0.1]))


def test_estimate_adds_the_launch_cost_of_a_shipped_launch_family() -> None:
    h200 = gpu("h200")
    values = _values({"global.gpu": 400.0, "l2.sm": 100.0})  # a short copy: 0.22 us of roofline
    model = E.load("elementwise", "h200")
    assert model.meta["launch_offset"] and model.fixed_s(h200) == h200.launch_s
    est = E.estimate(values, h200, "h200", "elementwise")
    roof = 400.0 / h200.clock_hz
    want = h200.launch_s + roof / model.mean.efficiency(E.model_inputs(values, h200, "elementwise"))[0]
    assert est.roofline_s == pytest.approx(roof) and est.time_s == pytest.approx(want, rel=1e-12)
    assert est.efficiency == pytest.approx(roof / est.time_s) and est.time_s > h200.launch_s
    gemm = E.load("gemm_wgmma", "h200")  # the GEMMs' time is the roofline over the efficiency alone
    assert gemm.fixed_s(h200) == 0.0
