"""Issue #22 evaluation: the performance model's MLPs against the roofline and a linear baseline, on shapes
held out of training, on the GPU they were trained on and across GPUs; the P80 ceiling's calibration; the
underperforming points of wavec's own library configurations.

    python benchmarks/perf_eval.py benchmarks/data/perf/features_h100.csv benchmarks/data/perf/features_h200.csv
                                   --out DIR [--weights wavec/perf/weights]

Requires: feature tables (``python -m wavec.perf.dataset build``) with measured times, and weights trained on
their ``train`` rows (``python -m wavec.perf.train ... --rows train``, the default).

Writes ``DIR/perf_eval.md`` (the MAPE table per family and setting: trained on GPU a, tested on the
``test`` rows of GPU b; MLP, linear least squares on the same inputs fitted on the same training rows and
the same with a ridge penalty chosen on validation shapes of those rows (``estimator.fit_ridge``),
plain roofline; the share of test rows at or below the ceiling; the underperforming library points),
``DIR/pred_vs_measured.csv`` (every test row's measured and predicted times: what the plots show) and,
when matplotlib is installed, ``DIR/pred_vs_measured_<family>_<gpu>.png``; ``DIR/underperforming.csv``:
every library row (its ``library`` column where the raw rows have one, the timed heuristic of
its day; else ``sampling.is_library``) of every GPU whose measured efficiency is more than ``GAP``
below the ceiling of the model trained on that GPU.
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout's wavec

from wavec.perf.standing import GAP  # noqa: E402  (SynPerf's: 0.1 of efficiency below the ceiling)


def _mape(pred_us: np.ndarray, us: np.ndarray) -> float:
    return float(np.mean(np.abs(pred_us / us - 1.0)) * 100)


def evaluate(rows: list[dict], weights: pathlib.Path) -> tuple[list[dict], list[dict]]:
    """(summary per family and setting, per-row predictions) for every (trained on, tested on) pair; trained
    on ``all``: the models trained on every GPU's training rows together."""
    from wavec.perf.estimator import LAUNCH_FAMILIES, Model, fit_linear, fit_ridge
    from wavec.perf.gpus import gpu
    from wavec.perf.train import launch_targets, table, validation_split

    timed = [r for r in rows if r.get("us")]
    gpus = sorted({r["gpu"] for r in timed})
    summary, points = [], []
    for family in sorted({r["family"] for r in timed}):
        for trained_on in gpus + ["all"]:
            path = weights / trained_on / f"{family}.npz"
            if not path.is_file():
                print(f"  no weights {path}: {family} on {trained_on} not evaluated", file=sys.stderr)
                continue
            model = Model.read(path)
            fit = [
                r for r in timed if trained_on in (r["gpu"], "all") and r["family"] == family and r["split"] == "train"
            ]
            x_fit, e_fit = table(fit)
            launch = family in LAUNCH_FAMILIES
            if launch:  # the baselines fit the same target as the MLP: the time less the launch cost
                e_fit, _weight = launch_targets(fit, e_fit)
            linear = fit_linear(x_fit, e_fit)
            ridge, _strength = fit_ridge(x_fit, e_fit, validation_split([r["shape"] for r in fit]))
            for tested_on in gpus:
                test = [r for r in timed if r["gpu"] == tested_on and r["family"] == family and r["split"] == "test"]
                if not test:
                    continue
                x, _eff = table(test)
                roof = np.array([float(r["roofline_us"]) for r in test])
                us = np.array([float(r["us"]) for r in test])
                spec = gpu(tested_on)
                mlp_us, ceiling_us = (t * 1e6 for t in model.times_s(x, roof * 1e-6, spec))
                fixed_us = spec.launch_s * 1e6 if launch else 0.0
                lin_us, ridge_us = fixed_us + roof / linear.efficiency(x), fixed_us + roof / ridge.efficiency(x)
                below = float(np.mean(us >= ceiling_us))
                summary.append(
                    {
                        "family": family,
                        "trained_on": trained_on,
                        "tested_on": tested_on,
                        "rows": len(test),
                        "train_rows": len(fit),
                        "mlp": _mape(mlp_us, us),
                        "linear": _mape(lin_us, us),
                        "ridge": _mape(ridge_us, us),
                        "roofline": _mape(roof, us),
                        "below_ceiling": below,
                    }
                )
                for r, m, li, ri in zip(test, mlp_us, lin_us, ridge_us, strict=True):
                    points.append({**_ids(r), "trained_on": trained_on, "mlp_us": m, "linear_us": li, "ridge_us": ri})
    return summary, points


def _ids(r: dict) -> dict:
    keys = ("gpu", "family", "kernel", "dtype", "config", "shape", "split", "us", "roofline_us")
    return {k: r[k] for k in keys}


def underperforming(rows: list[dict], weights: pathlib.Path) -> list[dict]:
    """Library rows measured more than ``GAP`` of efficiency below the ceiling of their GPU's model."""
    from wavec.perf.dataset import row_case
    from wavec.perf.estimator import Model
    from wavec.perf.gpus import gpu
    from wavec.perf.sampling import is_library
    from wavec.perf.train import table

    out = []
    by_key: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        library = r["library"] == "1" if r.get("library") else is_library(row_case(r), gpu(r["gpu"]))
        if r.get("us") and library:
            by_key[(r["gpu"], r["family"])].append(r)
    for (key, family), mine in sorted(by_key.items()):
        path = weights / key / f"{family}.npz"
        if not path.is_file():
            continue
        x, eff = table(mine)
        roof_s = np.array([float(r["roofline_us"]) for r in mine]) * 1e-6
        ceiling = roof_s / Model.read(path).times_s(x, roof_s, gpu(key))[1]  # the ceiling's efficiency
        for r, e, c in zip(mine, eff, ceiling, strict=True):
            if e < c - GAP:
                out.append({**_ids(r), "efficiency": e, "ceiling": c, "gap": c - e})
    return sorted(out, key=lambda r: -r["gap"])


def markdown(summary: list[dict], under: list[dict], plotted: bool) -> str:
    lines = [
        "| family | trained on | tested on | test rows | MLP MAPE | linear MAPE | ridge MAPE | roofline MAPE "
        "| at/below P80 |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| {s['family']} | {s['trained_on']} | {s['tested_on']} | {s['rows']} | {s['mlp']:.1f}% | "
            f"{s['linear']:.1f}% | {s['ridge']:.1f}% | {s['roofline']:.1f}% | {100 * s['below_ceiling']:.0f}% |"
        )
    lines += [
        "",
        f"Underperforming library points (measured efficiency > {GAP} below the P80 ceiling): {len(under)}",
        "",
    ]
    if under:
        lines += ["| gpu | kernel | dtype | shape | config | efficiency | ceiling |", "|---|---|---|---|---|---:|---:|"]
        for u in under[:25]:
            lines.append(
                f"| {u['gpu']} | {u['kernel']} | {u['dtype']} | {u['shape']} | `{u['config']}` | "
                f"{u['efficiency']:.2f} | {u['ceiling']:.2f} |"
            )
    note = "PNG plots per family and GPU" if plotted else "no matplotlib: pred_vs_measured.csv holds the plots' points"
    return "\n".join([*lines, "", note, ""])


def plot(points: list[dict], out: pathlib.Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for p in points:
        if p["trained_on"] == p["gpu"]:
            groups[(p["family"], p["gpu"])].append(p)
    for (family, key), pts in groups.items():
        us = np.array([float(p["us"]) for p in pts])
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        for col, label in (("mlp_us", "MLP"), ("roofline_us", "roofline"), ("linear_us", "linear")):
            ax.scatter(us, [float(p[col]) for p in pts], s=8, label=label)
        lo, hi = us.min() / 2, us.max() * 2
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="measured (us)", ylabel="predicted (us)", title=f"{family} on {key}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"pred_vs_measured_{family}_{key}.png", dpi=120)
        plt.close(fig)
    return True


def write_csv(rows: list[dict], path: pathlib.Path) -> None:
    with open(path, "w", newline="") as f:
        if not rows:
            return
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows({k: (f"{v:.5g}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows)


def main(argv: list[str] | None = None) -> int:
    from wavec.perf.dataset import read_rows

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("features", nargs="+", type=pathlib.Path)
    p.add_argument("--out", required=True, type=pathlib.Path)
    p.add_argument(
        "--weights", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[1] / "wavec/perf/weights"
    )
    args = p.parse_args(argv)
    rows = read_rows(args.features)
    summary, points = evaluate(rows, args.weights)
    under = underperforming(rows, args.weights)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(points, args.out / "pred_vs_measured.csv")
    write_csv(under, args.out / "underperforming.csv")
    text = markdown(summary, under, plot(points, args.out))
    (args.out / "perf_eval.md").write_text(text)
    print(text)
    return 0 if summary else 1


if __name__ == "__main__":
    sys.exit(main())
