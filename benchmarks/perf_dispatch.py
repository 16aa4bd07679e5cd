"""GEMM dispatch by the performance model, evaluated offline on stored race timings (issue #22).

    PYTHONPATH=$PWD python benchmarks/perf_dispatch.py --out benchmarks/results/perf_dispatch --jobs 2

For each race file (``tune_gemm.py``'s ``times.json``: per shape, the median of every candidate raced) and
dtype, on the shapes the cost model holds out (``refit_cost_model.evaluate``'s split) that are not in the
performance model's training set (``benchmarks/data/perf/collected/raw_*.csv``, ``split=train``): the
shipped MLP (``wavec.perf.estimator``, trained on that GPU) predicts every raced candidate's time from its
decomposition (``wavec.perf.tile_cache.TileCache``: exact, one proxy walk per configuration, K and tile
remainders) with the registers the race's ptxas reported (``--registers today``: today's compile's); its
pick's regret (measured time over the race's best, minus 1) and the regret of the best measured among its
top 3 / 5 / 10; beside them the heuristic's (``mma_sync_plan``, raced every time) and the NNLS cost
model's (fitted on the race's fit shapes, as ``refit_cost_model.py`` does).  Beside the mma.sync races the
wgmma path is scored on the exhaustive H200 wgmma race (``session10_h200/tune_wg``, ``tune_gemm.py --mma
wgmma``) and on the performance dataset's test shapes (``--features``: every configuration timed on a
test shape is a small race, 1-5 candidates; the library's is the heuristic).  ``--race GPU:times.json``
scores other races.  The configuration ranking model (``wavec.perf.rank``, ``--rank-weights DIR``, default the
shipped ``h100`` and ``h200``) is scored beside them in a second table: trained on the race's GPU and on
the other GPU (``cross``), never on a shape in its ``meta["shapes"]``.  The fit shapes' inputs are built
too (``train_rank.py`` trains on them from the same cache).

Writes ``OUT/perf_dispatch.json`` (per shape: picks, regrets) and ``OUT/perf_dispatch.md`` (the table,
also printed last).  The MLP inputs of every launch are cached under ``WAVEC_CACHE_DIR/perf_dispatch/``
(keyed by the GPU constants' digests), so a rerun only scores: ~4 min on 2 CPU cores the first time.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pathlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, str(pathlib.Path(__file__).parent))

ROOT = pathlib.Path(__file__).resolve().parent.parent
RACES = (
    ("h100", "benchmarks/results/tune_h100/times.json"),
    ("h100", "benchmarks/results/tune_h100_v2/times.json"),
    ("h200", "benchmarks/results/tune_h200/times.json"),
    ("h200", "benchmarks/results/session10_h200/tune_wg/times.json"),  # the exhaustive wgmma race
)
COLLECTED = ROOT / "benchmarks/data/perf/collected"
TOPS = (1, 3, 5, 10)
TARGETS = {"mma_sync": "sm_90", "wgmma": "sm_90a"}  # Hopper's code per MMA kind (``library.target_for``)


def case_config(cand, mma: str) -> str:
    """``family|configuration`` (the perf dataset's strings) of a race candidate: ``make_gemm``'s defaults,
    fragment prefetch on (wgmma tiles ignore it), C in f32, as ``tune_gemm.py`` compiles them."""
    s, (w0, w1) = cand.subs_dict, dict(cand.kwargs)["waves"]
    return (
        f"gemm_{mma}|bm={s['BLOCK_M']};bn={s['BLOCK_N']};bk={s['BLOCK_K']};st={s['NUM_STAGES']};"
        f"gm={s['GROUP_M']};w={w0}x{w1};ws=0;pe=0;se=0;pf=1;c=f32"
    )


def trained_shapes() -> set[tuple[int, ...]]:
    out = set()
    for path in COLLECTED.glob("raw_*.csv"):
        for r in csv.DictReader(path.open()):
            if r["family"].startswith("gemm") and r["split"] == "train":
                out.add(tuple(int(x) for x in r["shape"].split("x")))
    return out


def default_cache() -> pathlib.Path:
    """The inputs cache, named by the GPU constants' digests and the feature version (a change rebuilds)."""
    from wavec.knobs import knobs
    from wavec.perf.dataset import FEATURES_VERSION, cache_stem

    folder = pathlib.Path(knobs.cache_dir) / "perf_dispatch"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"inputs-v{FEATURES_VERSION}-{cache_stem('h100')}-{cache_stem('h200')}.jsonl"


def _inputs_of(item):
    """Worker: (config, [(shape, gpu, registers)]) -> the MLP inputs of each launch (one compile, one
    ``TileCache``), and the registers of today's compile."""
    import dataclasses

    from wavec.perf import estimator as E
    from wavec.perf.cases import Case, compile_case
    from wavec.perf.features import features
    from wavec.perf.gpus import gpu
    from wavec.perf.schedule import schedule
    from wavec.perf.tile_cache import TileCache

    key, jobs = item
    family, config = key.split("|")
    kernel = compile_case(Case(family, "gemm", "f16", config, "1x1x8"), TARGETS[family.removeprefix("gemm_")])
    cache = TileCache(kernel)
    out, decomps = [], {}
    for shape, gpu_key, regs in jobs:
        m, n, k = shape
        if shape not in decomps:
            decomps[shape] = cache.decompose((m, k), (n, k))
        # regs < 0: today's compile's own count (the ``--registers today`` sensitivity run)
        d = dataclasses.replace(decomps[shape], registers=regs if regs >= 0 else decomps[shape].registers)
        spec = gpu(gpu_key)
        f = features(d, schedule(d, spec))
        values = E.launch_values(d, f)
        roof = max(float(values[f"{c}_cycles"]) for c in E.CYCLES if c not in E.NOT_BOUNDS) / spec.clock_hz
        out.append((key, shape, gpu_key, regs, E.model_inputs(values, spec).tolist(), roof))
    return out, kernel.artifact.metadata.registers, cache.walks


def _regs(race: dict, cand) -> int:
    return race["data"]["metadata"][cand]["registers"] if race.get("race_registers", True) else -1


def build_inputs(races, cache_path: pathlib.Path, jobs: int) -> dict:
    """{(config, shape, gpu, registers): (inputs, roofline s)} for every candidate raced on every shape."""
    have: dict = {}
    if cache_path.exists():
        for line in cache_path.read_text().splitlines():
            c, s, g, r, x, roof = json.loads(line)
            have[(c, tuple(s), g, r)] = (x, roof)
    want: dict[str, set] = {}
    for race in races:
        # the fit shapes too: the ranking model (``wavec.perf.rank``) trains on them
        for shape in race["shapes"] + race["fit"]:
            for cand in race["data"]["times"][shape]:
                regs = _regs(race, cand)
                key = (case_config(cand, race["data"]["mma"]), shape, race["gpu"], regs)
                if key not in have:
                    want.setdefault(key[0], set()).add(key[1:])
    t0, done, regs_today = time.time(), 0, {}
    with cache_path.open("a") as f, ProcessPoolExecutor(max(1, jobs)) as pool:
        for rows, today, _walks in pool.map(_inputs_of, [(c, sorted(v)) for c, v in sorted(want.items())]):
            for c, s, g, r, x, roof in rows:
                have[(c, tuple(s), g, r)] = (x, roof)
                f.write(json.dumps([c, list(s), g, r, x, roof]) + "\n")
                regs_today[c] = today
            done += 1
            print(f"  inputs: {done}/{len(want)} configurations, {time.time() - t0:.0f} s", file=sys.stderr)
    return have


def candidate_rows(race: dict, inputs: dict, shape) -> tuple:
    """(candidates, perf inputs, configuration inputs, measured seconds) of every candidate raced on
    ``shape``: the ranking model's lists (``train_rank.py`` on the fit shapes, :func:`score_race` here)."""
    import numpy as np

    from wavec.perf.rank import config_inputs

    times = race["data"]["times"][shape]
    cands = list(times)
    keys = [(case_config(c, race["data"]["mma"]), shape, race["gpu"], _regs(race, c)) for c in cands]
    perf = np.array([inputs[k][0] for k in keys])
    conf = np.array([config_inputs(shape, c.subs_dict, dict(c.kwargs)["waves"], race["data"]["mma"]) for c in cands])
    return cands, perf, conf, np.array([times[c] for c in cands])


def _regrets(times: dict, predicted: dict) -> dict:
    """Regret of the model's pick and of the best measured among its top N (``TOPS``)."""
    best = min(times.values())
    ranked = sorted(predicted, key=predicted.get)
    return {f"top{n}": min(times[c] for c in ranked[:n]) / best - 1.0 for n in TOPS}


def _summary(values) -> dict:
    v = list(values)
    return {"n": len(v), "mean": sum(v) / len(v) if v else math.nan, "max": max(v) if v else math.nan}


def score_race(race: dict, inputs: dict, rankers: dict) -> dict:
    """The model, ranking model, heuristic and NNLS regrets of one race file and dtype on its evaluated
    shapes; ``rankers``: {trained on: Ranker}, each scored on the shapes it did not train on (``rank_`` the
    race's own GPU's, ``xrank_`` the other GPU's: shapes never measured on this GPU)."""
    import numpy as np

    from wavec.perf import estimator as E
    from wavec.tuning.gemm import heuristic_candidate

    data, nnls = race["data"], {tuple(r["shape"]): r["regret"] for r in race["nnls"]["per_shape"]}
    family = f"gemm_{data['mma']}"
    model = E.load(family, E.trained_for(race["gpu"], family))
    rows = []
    for shape in race["shapes"]:
        times = data["times"][shape]
        cands, perf, conf, _t = candidate_rows(race, inputs, shape)
        roof = np.array([inputs[(case_config(c, data["mma"]), shape, race["gpu"], _regs(race, c))][1] for c in cands])
        predicted = dict(zip(cands, roof / model.mean.efficiency(perf), strict=True))
        heur = heuristic_candidate(*shape, data["mma"])
        row = {"shape": list(shape), **_regrets(times, predicted), "candidates": len(times)}
        for on, ranker in rankers.items():
            if list(shape) in ranker.meta.get("shapes", []) or not ranker.covers(data["mma"]):
                continue  # never score a ranking model on a shape it trained on, nor on a kind it lacks
            prefix = "rank_" if on == race["gpu"] else "xrank_"
            ranked = dict(zip(cands, ranker.scores(perf, conf), strict=True))
            row.update({prefix + k: v for k, v in _regrets(times, ranked).items()})
            row[prefix + "pick"] = min(ranked, key=ranked.get).label
        row["heuristic"] = times[heur] / min(times.values()) - 1.0 if heur in times else math.nan
        row["nnls"] = nnls.get(shape, math.nan)
        row["pick"] = min(predicted, key=predicted.get).label
        row["best"] = min(times, key=times.get).label
        rows.append(row)
    cols = [f"{p}top{n}" for p in ("", "rank_", "xrank_") for n in TOPS] + ["heuristic", "nnls"]
    return {
        "rows": rows,
        "summary": {c: _summary(r[c] for r in rows if c in r and not math.isnan(r[c])) for c in cols},
        "nnls_top": race["nnls"]["top_k_regret"],
    }


def score_features(paths: list[pathlib.Path]) -> list[dict]:
    """The wgmma and mma.sync GEMMs on the perf dataset's test shapes: each (shape, dtype)'s timed
    configurations as a small race, the library's configuration as the heuristic."""
    import numpy as np

    from wavec.perf import estimator as E
    from wavec.perf.cases import Case
    from wavec.perf.gpus import gpu
    from wavec.perf.sampling import is_library

    out = []
    for path in paths:
        rows = [r for r in csv.DictReader(path.open()) if r["family"].startswith("gemm") and r["split"] == "test"]
        for family in ("gemm_mma_sync", "gemm_wgmma"):
            by_shape: dict = {}
            for r in rows:
                if r["family"] == family:
                    by_shape.setdefault((r["gpu"], r["dtype"], r["shape"]), []).append(r)
            scored = []
            for (g, dtype, shape), group in sorted(by_shape.items()):
                if len(group) < 2:
                    continue
                spec = gpu(g)
                model = E.load(family, E.trained_for(g, family))
                values = [{k[2:]: float(v) for k, v in r.items() if k.startswith("f:")} for r in group]
                x = np.array([E.model_inputs(v, spec) for v in values])
                pred = np.array([float(r["roofline_us"]) for r in group]) / model.mean.efficiency(x)
                times = {r["config"]: float(r["us"]) for r in group}
                predicted = dict(zip(times, pred, strict=True))
                lib = [r["config"] for r in group if is_library(Case(family, "gemm", dtype, r["config"], shape), spec)]
                row = {"shape": shape, "gpu": g, "dtype": dtype, **_regrets(times, predicted), "candidates": len(group)}
                row["heuristic"] = times[lib[0]] / min(times.values()) - 1.0 if lib else math.nan
                scored.append(row)
            for g in sorted({r["gpu"] for r in scored}):
                mine = [r for r in scored if r["gpu"] == g]
                cols = [f"top{n}" for n in TOPS] + ["heuristic"]
                summ = {c: _summary(r[c] for r in mine if not math.isnan(r[c])) for c in cols}
                out.append({"gpu": g, "family": family, "rows": mine, "summary": summ})
    return out


def _cell(s: dict) -> str:
    return "–" if not s or not s.get("n") else f"{100 * s['mean']:.2f} / {100 * s['max']:.1f}"


def _tops(s: dict) -> str:
    return " | ".join(_cell(s[f"top{n}"]) for n in TOPS)


def table(race_scores: list[dict], feature_scores: list[dict]) -> str:
    cols = ("data", "GPU", "path", "dtype", "shapes", "cands/shape", "model pick", "model top-3", "model top-5")
    cols += ("model top-10", "heuristic", "NNLS cost model")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in race_scores:
        s, cands = r["summary"], [row["candidates"] for row in r["rows"]]
        lines.append(
            f"| race {r['file']} | {r['gpu']} | {r['mma']} | {r['dtype']} | {s['top1']['n']} | "
            f"{sum(cands) / len(cands):.0f} | {_tops(s)} | {_cell(s['heuristic'])} | {_cell(s['nnls'])} |"
        )
    for r in feature_scores:
        s, cands = r["summary"], [row["candidates"] for row in r["rows"]]
        lines.append(
            f"| perf test shapes | {r['gpu']} | {r['family'].removeprefix('gemm_')} | f16+bf16 | {s['top1']['n']} | "
            f"{sum(cands) / len(cands):.1f} | {_tops(s)} | {_cell(s['heuristic'])} | – |"
        )
    lines.append("")
    lines.append(
        "regret mean / max in %; target (issue #22): model pick mean <= 2 %, max <= 10 %; top-3 mean <= 1 %, max <= 5 %"
    )
    return "\n".join(lines)


def rank_table(race_scores: list[dict]) -> str:
    """The ranking model's regrets beside the MLP's pick and the heuristic: trained on the race's GPU
    (its fit shapes) and on the other GPU's races (``cross``: shapes never measured on this GPU)."""
    cols = ("race", "GPU", "dtype", "shapes", "rank pick", "rank top-3", "rank top-5", "rank top-10")
    cols += ("cross-GPU shapes", "cross pick", "cross top-3", "MLP pick", "heuristic", "NNLS cost model")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in race_scores:
        s = r["summary"]
        own = " | ".join(_cell(s[f"rank_top{n}"]) for n in TOPS)
        cross = " | ".join(_cell(s[f"xrank_top{n}"]) for n in (1, 3))
        lines.append(
            f"| {r['file']} | {r['gpu']} | {r['dtype']} | {s['rank_top1']['n']} | {own} | {s['xrank_top1']['n']} | "
            f"{cross} | {_cell(s['top1'])} | {_cell(s['heuristic'])} | {_cell(s['nnls'])} |"
        )
    return "\n".join(lines)


def load_rankers(folder: pathlib.Path | None) -> dict:
    """{GPU key: Ranker} of the ranking models trained on one GPU: ``folder``'s ``<gpu>.npz`` (default: the
    shipped ones)."""
    from wavec.perf import rank

    out = {}
    for key in ("h100", "h200"):
        if folder is not None and (folder / f"{key}.npz").exists():
            out[key] = rank.Ranker.read(folder / f"{key}.npz")
        elif folder is None and key in rank.shipped():
            out[key] = rank.load(key)
    return out


def load_races(files, limit: int | None) -> list[dict]:
    """Each race file and dtype with its evaluated shapes and the NNLS cost model's scores on them."""
    from refit_cost_model import evaluate, load

    trained = trained_shapes()
    races = []
    for gpu_key, rel in files:
        path = pathlib.Path(rel) if pathlib.Path(rel).exists() else ROOT / rel
        for dtype in json.loads(path.read_text()):
            data = load(path, dtype)
            nnls = evaluate(data, sms=132, target=TARGETS[data["mma"]], detail=True)  # H100 SXM, H200: 132 SMs
            fit = {tuple(s) for s in nnls["fit_shapes"]}
            shapes = [s for s in data["times"] if s not in fit and s not in trained][:limit]
            entry = {"gpu": gpu_key, "file": path.parent.name, "dtype": dtype, "mma": data["mma"], "data": data}
            entry["shapes"] = shapes
            entry["fit"] = [tuple(s) for s in nnls["fit_shapes"]]
            races.append({**entry, "nnls": nnls})
    return races


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="at most this many shapes per race (a smoke run)")
    ap.add_argument(
        "--registers",
        choices=("race", "today"),
        default="race",
        help="registers per candidate: what the race's ptxas reported (default) or today's compile's",
    )
    ap.add_argument("--race", nargs="*", help="GPU:times.json ... (default: the stored H100 and H200 races)")
    ap.add_argument("--cache", type=pathlib.Path, default=None, help="inputs cache (default: under WAVEC_CACHE_DIR)")
    ap.add_argument("--rank-weights", type=pathlib.Path, default=None, help="ranking models (default: shipped)")
    ap.add_argument(
        "--features",
        type=pathlib.Path,
        nargs="*",
        default=[COLLECTED / "features_h100.csv", COLLECTED / "features_h200.csv"],
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    files = [tuple(r.split(":", 1)) for r in args.race] if args.race else RACES
    races = [{**r, "race_registers": args.registers == "race"} for r in load_races(files, args.limit)]
    print(f"races loaded, NNLS refitted: {time.time() - t0:.0f} s", file=sys.stderr)
    inputs = build_inputs(races, args.cache or default_cache(), args.jobs)
    rankers = load_rankers(args.rank_weights)
    race_scores = [{k: r[k] for k in ("gpu", "file", "dtype", "mma")} | score_race(r, inputs, rankers) for r in races]
    feature_scores = score_features(args.features)
    (args.out / "perf_dispatch.json").write_text(
        json.dumps({"races": race_scores, "perf_test": feature_scores}, separators=(",", ":"))
    )
    text = table(race_scores, feature_scores) + "\n\n" + rank_table(race_scores)
    (args.out / "perf_dispatch.md").write_text(text + "\n")
    print(f"total {time.time() - t0:.0f} s")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
