"""Train the GEMM configuration ranking model (``wavec.perf.rank``) on the stored races' fit shapes.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/train_rank.py --out wavec/perf/rank_weights --jobs 2

For each GPU (``h100``: ``tune_h100`` and ``tune_h100_v2``; ``h200``: the mma.sync race ``tune_h200`` and
the wgmma race ``session10_h200/tune_wg``; ``all``: the four), the lists are the races' **fit shapes** only
(the 45 per race and dtype that ``refit_cost_model.evaluate`` fits the NNLS cost model on), every raced
candidate of a shape with its perf inputs (the race's registers, ``perf_dispatch.build_inputs``, cached) and
configuration (its MMA kind among the inputs: one model ranks both kinds; a shape raced on both gives a list
per kind, never one list mixing them); the times of the held-out shapes ``perf_dispatch.py`` scores on are
never read (their inputs are built into the shared cache). Validation shapes (``--val`` of the fit shapes,
the same shapes for every race and dtype of the GPU) choose the weight decay; the members are then fitted on
every fit shape.  Writes ``OUT/<gpu>.npz`` (its ``meta["shapes"]``: the shapes trained on, which
``perf_dispatch.py`` never scores the model on) and prints the validation regrets.  ~4-10 min per model on 2
shared cores once the inputs are cached (~9 min cold: ``perf_dispatch.build_inputs``).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))

GROUPS = {
    "h100": ("tune_h100", "tune_h100_v2"),
    "h200": ("tune_h200", "tune_wg"),
    "all": ("tune_h100", "tune_h100_v2", "tune_h200", "tune_wg"),
}


def lists_of(races: list[dict], inputs: dict, shapes: set) -> list[tuple[np.ndarray, np.ndarray]]:
    """One list per (race, dtype, shape in ``shapes`` among its fit shapes): (inputs, times)."""
    from perf_dispatch import candidate_rows

    from wavec.perf.estimator import INPUTS
    from wavec.perf.rank import CONFIG_INPUTS, rank_inputs

    out = []
    for race in races:
        for shape in race["fit"]:
            if shape in shapes:
                _c, perf, conf, times = candidate_rows(race, inputs, shape)
                out.append((rank_inputs(perf, conf, INPUTS, INPUTS + CONFIG_INPUTS), times))
    return out


def main(argv=None) -> int:
    from perf_dispatch import RACES, build_inputs, default_cache, load_races

    from wavec.perf.estimator import INPUTS
    from wavec.perf.rank import CONFIG_INPUTS
    from wavec.perf.rank_train import fit_ranker

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--val", type=float, default=0.2, help="fraction of the fit shapes held out for validation")
    ap.add_argument("--members", type=int, default=9)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--only", default="h100,h200,all")
    ap.add_argument("--seed", type=int, default=0, help="the validation shapes' draw")
    ap.add_argument("--member-seed", type=int, default=0, help="the first ensemble member's torch seed")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    wanted = {f for key in args.only.split(",") for f in GROUPS[key]}
    files = [(g, rel) for g, rel in RACES if pathlib.Path(rel).parent.name in wanted]
    races = [{**r, "race_registers": True} for r in load_races(files, None)]
    inputs = build_inputs(races, default_cache(), args.jobs)
    for key in args.only.split(","):
        mine = [r for r in races if r["file"] in GROUPS[key]]
        fit = sorted({s for r in mine for s in r["fit"]})
        rng = np.random.default_rng(args.seed)
        val = {fit[i] for i in rng.choice(len(fit), max(1, round(args.val * len(fit))), replace=False)}
        train = lists_of(mine, inputs, set(fit) - val)
        validation = lists_of(mine, inputs, val)
        meta = {
            "trained_on": key,
            "races": sorted({r["file"] for r in mine}),
            "shapes": [list(s) for s in fit],
            "validation_shapes": [list(s) for s in sorted(val)],
            "registers": "race",
        }
        names = INPUTS + CONFIG_INPUTS
        ranker = fit_ranker(
            train, validation, names, args.members, steps=args.steps, meta=meta, first_seed=args.member_seed
        )
        ranker.save(args.out / f"{key}.npz")
        v = ranker.meta["validation"][str(ranker.meta["weight_decay"])]
        print(
            f"{key}: {len(train)} training lists, {len(validation)} validation ({len(val)} shapes); weight decay "
            f"{ranker.meta['weight_decay']:g}: validation pick {100 * v['top1'][0]:.2f} / {100 * v['top1'][1]:.1f} %, "
            f"top-3 {100 * v['top3'][0]:.2f} / {100 * v['top3'][1]:.1f} %  ({time.time() - t0:.0f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
