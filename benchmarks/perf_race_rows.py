"""Per-configuration training rows for the mma.sync GEMM model from the stored exhaustive races (issue #22).

    PYTHONPATH=$PWD python benchmarks/perf_race_rows.py --out benchmarks/data/perf/race --jobs 2

Requires: the races ``perf_dispatch.RACES`` (``tune_gemm.py``'s ``times.json``: every candidate's median on
every shape, mma.sync, f16 and bf16) and the collected perf dataset (``benchmarks/data/perf/collected``).

Guarantees: ``OUT/features_race_<gpu>.csv.gz``, one row per (race file, dtype, fit shape, candidate) in the
perf feature table's columns (``wavec.perf.dataset``: ``roofline_us``, ``bottleneck``, ``f:*``), with
``split=train`` and ``source=race:<file>``.  Only the race's *fit* shapes (``refit_cost_model.evaluate``'s
split, the 45 the NNLS cost model is fitted on) are used: the held-out ones are
``benchmarks/perf_dispatch.py``'s dispatch test set; and no shape of the perf dataset (either split) is
among them (checked: the run fails otherwise).  Each launch is decomposed exactly by
``perf.tile_cache.TileCache`` (today's compile of the candidate's configuration, C in f32 as the race
compiled it) with the **registers the race's ptxas reported** (the races are from an older compiler:
``docs/perf_model.md``), and its features computed on the race's own GPU.  A launch whose decomposition
has notes raises.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gzip
import io
import pathlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from perf_dispatch import COLLECTED, RACES, TARGETS, case_config  # noqa: E402

FIELDS = ("gpu", "device", "family", "kernel", "dtype", "config", "shape", "split", "us", "source")


def perf_shapes() -> set[tuple[int, ...]]:
    """Every GEMM shape of the collected perf dataset, train and test (``MxNxK``)."""
    out = set()
    for path in COLLECTED.glob("raw_*.csv"):
        for r in csv.DictReader(path.open()):
            if r["family"].startswith("gemm"):
                out.add(tuple(int(x) for x in r["shape"].split("x")))
    return out


def race_jobs(files) -> dict[str, list[dict]]:
    """{configuration: [row stub]} of every candidate raced on every fit shape of every race and dtype."""
    from refit_cost_model import evaluate, load

    taken = perf_shapes()
    jobs: dict[str, list[dict]] = {}
    for gpu_key, rel in files:
        path = pathlib.Path(rel)
        for dtype in ("f16", "bf16"):
            data = load(path, dtype)
            fit = [tuple(s) for s in evaluate(data, sms=132, target=TARGETS[data["mma"]], detail=False)["fit_shapes"]]
            clash = sorted(set(fit) & taken)
            if clash:
                raise SystemExit(f"{rel} {dtype}: fit shapes in the perf dataset: {clash}")
            for shape in fit:
                for cand, seconds in data["times"][shape].items():
                    config = case_config(cand, data["mma"])
                    stub = {"gpu": gpu_key, "family": config.split("|")[0], "kernel": "gemm", "dtype": dtype}
                    stub.update({"config": config.split("|")[1], "shape": "x".join(map(str, shape))})
                    stub.update({"split": "train", "us": f"{seconds * 1e6:.4f}", "source": f"race:{path.parent.name}"})
                    stub["registers"] = data["metadata"][cand]["registers"]
                    jobs.setdefault(config, []).append(stub)
    return jobs


def _rows_of(item: tuple[str, list[dict]]) -> list[dict]:
    """Worker: one configuration's rows with their features (one compile, one ``TileCache``)."""
    from wavec.perf.cases import Case, compile_case
    from wavec.perf.features import bottleneck, features, roofline
    from wavec.perf.gpus import gpu
    from wavec.perf.schedule import schedule
    from wavec.perf.tile_cache import TileCache

    key, stubs = item
    family, config = key.split("|")
    kernel = compile_case(Case(family, "gemm", "f16", config, "1x1x8"), TARGETS[family.removeprefix("gemm_")])
    cache, decomps, out = TileCache(kernel), {}, []
    for stub in stubs:
        m, n, k = (int(x) for x in stub["shape"].split("x"))
        if (m, n, k) not in decomps:
            decomps[(m, n, k)] = cache.decompose((m, k), (n, k))
        d = dataclasses.replace(decomps[(m, n, k)], registers=stub["registers"])
        if d.notes:
            raise RuntimeError(f"{key} {stub['shape']}: decomposition notes {d.notes}")
        spec = gpu(stub["gpu"])
        f = features(d, schedule(d, spec))
        row = {k: v for k, v in stub.items() if k != "registers"}
        row.update({"device": spec.name, "roofline_us": roofline(f) * 1e6, "bottleneck": bottleneck(f)})
        row.update({f"f:{k}": v for k, v in f.values.items()})
        row.update({"f:registers": float(d.registers or 0), "f:shared_bytes": float(d.shared_bytes)})
        out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    root = pathlib.Path(__file__).resolve().parent.parent
    t0 = time.time()
    jobs = race_jobs([(g, root / rel) for g, rel in RACES])
    print(f"{sum(map(len, jobs.values()))} launches of {len(jobs)} configurations ({time.time() - t0:.0f} s)")
    rows: list[dict] = []
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        for i, done in enumerate(pool.map(_rows_of, sorted(jobs.items())), 1):
            rows.extend(done)
            if i % 10 == 0 or i == len(jobs):
                print(f"  {i}/{len(jobs)} configurations, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys([*FIELDS, "roofline_us", "bottleneck", *(k for r in rows for k in r)]))
    for gpu_key in sorted({r["gpu"] for r in rows}):
        path = args.out / f"features_race_{gpu_key}.csv.gz"
        mine = sorted((r for r in rows if r["gpu"] == gpu_key), key=lambda r: (r["source"], r["dtype"], r["shape"]))
        # mtime 0: the same rows give the same bytes (the file is in the repository)
        with gzip.GzipFile(path, "wb", mtime=0) as raw, io.TextIOWrapper(raw, newline="") as f:
            w = csv.DictWriter(f, columns)
            w.writeheader()
            for r in mine:
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
        print(f"wrote {len(mine)} rows to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
