"""The ranking model's held-out regrets from a ``perf_dispatch.py`` run, with and without named shapes, and
the picks whose measured time is suspect (issue #22's wgmma race).

    PYTHONPATH=$PWD python benchmarks/rank_regrets.py OUT/perf_dispatch.json --without 2048x12288x4096

Reads ``perf_dispatch.json`` (per race, dtype and held-out shape: the ranking model's regrets and pick) and
the races' ``times.json``.  Prints, per race and dtype, the ranking model's pick / top-3 / top-5 regret (mean
/ max, %) on every scored shape, then on those shapes less ``--without`` (labelled: a shape left out here is
still in the first row, which is the score; ``--drop-suspects`` leaves out the shapes of suspect picks there
too; ``--same-shapes OTHER.json`` scores only the shapes the ranking model of another run was scored on, per
race and dtype: two models trained on different shapes compared on the same ones).  A pick is **suspect**
when its time is one sample (``tune_gemm.py``'s race times every candidate once, then re-times only those
within 10 % of the leader) and more than ``--twin`` times the same configuration's time on the same shape in
the other dtype of the race, measured there over several rounds: f16 and bf16 run at the same tensor-core
rate, so such a ratio points at a glitch of that one sample rather than at the configuration's
speed.  Suspect picks are listed; the first row always keeps them.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RACE_FILES = {
    "tune_h200": ROOT / "benchmarks/results/tune_h200/times.json",
    "tune_wg": ROOT / "benchmarks/results/session10_h200/tune_wg/times.json",
}
TOPS = (1, 3, 5)


def _cell(values: list[float]) -> str:
    return f"{100 * sum(values) / len(values):.2f} / {100 * max(values):.1f}" if values else "–"


def samples(times_json: pathlib.Path) -> dict:
    """{dtype: {(shape, label): (seconds, samples)}} of a race file (``tune_gemm.py``'s layout)."""
    out: dict = {}
    for dtype, d in json.loads(times_json.read_text()).items():
        labels = d["labels"]
        out[dtype] = {(tuple(e["shape"]), labels[i]): (t, n) for e in d["shapes"] for i, t, n in e["t"]}
    return out


def suspects(race: dict, timed: dict, twin: float) -> list[tuple]:
    """(shape, pick, its time over its twin's, regret) of each suspect rank pick (module docstring)."""
    other = [d for d in timed if d != race["dtype"]]
    out = []
    for row in race["rows"]:
        if "rank_pick" not in row or not other:
            continue
        key = (tuple(row["shape"]), row["rank_pick"])
        t, n = timed[race["dtype"]][key]
        twin_t, twin_n = timed[other[0]].get(key, (None, 0))
        if n == 1 and twin_n > 1 and t > twin * twin_t:
            out.append((row["shape"], row["rank_pick"], t / twin_t, row["rank_top1"]))
    return out


def scored_shapes(path: pathlib.Path) -> dict:
    """{(race, dtype): the shapes a run scored its ranking model on}."""
    races = json.loads(path.read_text())["races"]
    return {(r["file"], r["dtype"]): {tuple(x["shape"]) for x in r["rows"] if "rank_top1" in x} for r in races}


def report(
    path: pathlib.Path, without: set, twin: float, drop_suspects: bool = False, same: pathlib.Path | None = None
) -> str:
    data = json.loads(path.read_text())
    only = scored_shapes(same) if same else None
    cols = ("race", "dtype", "shapes", "scored on") + tuple(f"rank {'pick' if n == 1 else f'top-{n}'}" for n in TOPS)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    notes = []
    for race in data["races"]:
        rows = [r for r in race["rows"] if "rank_top1" in r]
        if only is not None:
            rows = [r for r in rows if tuple(r["shape"]) in only.get((race["file"], race["dtype"]), set())]
        if not rows:
            continue
        bad = suspects(race, samples(RACE_FILES[race["file"]]), twin) if race["file"] in RACE_FILES else []
        for shape, pick, ratio, regret in bad:
            notes.append(
                f"suspect: {race['file']} {race['dtype']} {_name(shape)}: pick {pick} regret {100 * regret:.1f} %, "
                f"one sample at {ratio:.2f}x its other-dtype time"
            )
        drop = without | ({tuple(b[0]) for b in bad} if drop_suspects else set())
        label = "without " + ", ".join(_name(s) for s in sorted(drop))
        kept = [r for r in rows if tuple(r["shape"]) not in drop]
        for what, chosen in (("all held-out shapes", rows), (label, kept)):
            if chosen is kept and len(kept) == len(rows):
                continue
            cells = " | ".join(_cell([r[f"rank_top{n}"] for r in chosen]) for n in TOPS)
            lines.append(f"| {race['file']} | {race['dtype']} | {len(chosen)} | {what} | {cells} |")
    return "\n".join(lines + [""] + notes)


def _name(shape) -> str:
    return "x".join(str(v) for v in shape)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dispatch", type=pathlib.Path, help="perf_dispatch.py's OUT/perf_dispatch.json")
    ap.add_argument("--without", nargs="*", default=[], help="MxNxK shapes for the labelled second row")
    ap.add_argument("--twin", type=float, default=1.5, help="one-sample time over the other dtype's: suspect")
    ap.add_argument("--drop-suspects", action="store_true", help="the second row also leaves out suspect picks")
    ap.add_argument("--same-shapes", type=pathlib.Path, default=None, help="another run's perf_dispatch.json")
    args = ap.parse_args(argv)
    without = {tuple(int(v) for v in s.split("x")) for s in args.without}
    print(report(args.dispatch, without, args.twin, args.drop_suspects, args.same_shapes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
