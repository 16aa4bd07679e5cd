"""The performance model's feature table: each timed row of ``benchmarks/perf_dataset.py`` with the features
of its launch, derived on the CPU from the same kernel (decompose -> schedule -> features).

    python -m wavec.perf.dataset build RAW.csv [RAW.csv ...] --out FEATURES.csv [--gpus h100,h200] [--jobs 2]
    python -m wavec.perf.dataset refresh FEATURES.csv [FEATURES.csv ...] [--jobs 2]

Requires: raw CSVs with the columns of ``perf_dataset.FIELDS`` (``us`` may be empty: a dry run's rows get
features too, so the table can be built before the timings arrive); the MLIR compiler.

Guarantees: one output row per input row, in input order: the raw columns, ``roofline_us``, ``bottleneck``
and ``f:<name>`` for every value of :class:`~wavec.perf.features.Features` plus the kernel's registers and
shared bytes, computed for the row's own GPU (its ``gpu`` column).  Decompositions are cached on disk per
(kernel configuration, launch, target) in ``CACHE/perf_features/<gpu>-<constants>.jsonl`` (``--cache``;
default the compile cache's folder; ``<constants>`` a digest of the GPU's figures and ``FEATURES_VERSION``,
so a changed rate in ``gpus.py`` or a new feature misses the cache instead of reading stale values),
features for every GPU of ``--gpus`` whose targets agree computed at once (the H100 and the H200 share a
decomposition: same SMs, same target), so a rebuild only decomposes new rows.
A row whose launch cannot be decomposed raises :class:`~wavec.errors.PerfError` naming it.
``refresh`` rewrites, in place, the columns of a built table that need the compiled kernel's metadata and
the launch's symbols but no decomposition (``tiling.TILING_FEATURES``, from :func:`case_tiling`: exactly
what ``features`` computes from the same symbols, tensors, task count, occupancy and footprint), so a new
tiling input reaches the stored tables without decomposing every launch again.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import multiprocessing
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import PerfError
from .cases import Case, target_of
from .gpus import GPUS
from .gpus import gpu as find_gpu

__all__ = [
    "row_case",
    "case_key",
    "case_features",
    "case_tiling",
    "cache_stem",
    "FeatureCache",
    "build",
    "refresh",
    "read_rows",
    "main",
]

CASE_FIELDS = ("family", "kernel", "dtype", "config", "shape")


def row_case(row: dict[str, str]) -> Case:
    return Case(*(row[k] for k in CASE_FIELDS))


def case_key(case: Case) -> str:
    return "|".join(getattr(case, k) for k in CASE_FIELDS)


def case_features(case: Case, gpus: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{gpu key: feature columns} of ``case``'s launch on each GPU, decomposing once per target."""
    from .features import bottleneck, features, roofline
    from .schedule import schedule

    decomps: dict[str, Any] = {}
    out: dict[str, dict[str, Any]] = {}
    for key in gpus:
        spec = find_gpu(key)
        target = target_of(case, spec)
        if target not in decomps:
            from .cases import decompose_case

            decomps[target] = decompose_case(case, spec)
        d = decomps[target]
        if d.notes:
            raise PerfError(message=f"{case_key(case)}: decomposition notes {d.notes}")
        feats = features(d, schedule(d, spec))
        values = {f"f:{k}": v for k, v in feats.values.items()}
        values.update({"f:registers": float(d.registers or 0), "f:shared_bytes": float(d.shared_bytes)})
        out[key] = {"roofline_us": roofline(feats) * 1e6, "bottleneck": bottleneck(feats), **values}
    return out


# bumped when ``features`` gains a value, so cached decompositions without it miss (2: row alignment,
# 3: tiling)
FEATURES_VERSION = 3


def case_tiling(case: Case, gpu_key: str, tasks: int, blocks_per_sm: int, footprint: float) -> dict[str, float]:
    """``tiling.TILING_FEATURES`` of ``case``'s launch on ``gpu_key``, from the compiled kernel's symbols and
    the launch's tensors (no decomposition); ``tasks``, ``blocks_per_sm`` and ``footprint`` (the HBM bytes,
    ``global.gpu_bytes``) as ``features`` has them."""
    from .cases import bindings, compile_case
    from .decompose import launch_symbols, launch_tensors
    from .tiling import tiling_features

    spec = find_gpu(gpu_key)
    artifact = compile_case(case, target_of(case, spec)).artifact
    binds, _scalars = bindings(case)
    symbols = launch_symbols(artifact, tuple(b.data if b.data is not None else b.shape for b in binds), {})
    slots = spec.sms * max(1, blocks_per_sm)
    return tiling_features(symbols, launch_tensors(artifact, symbols), tasks, slots, footprint)


def _tiling_work(item: tuple[tuple[str, ...], str, int, int, float]) -> tuple[tuple[str, str], dict[str, float]]:
    fields, gpu, tasks, blocks, footprint = item
    case = Case(*fields)
    return (case_key(case), gpu), case_tiling(case, gpu, tasks, blocks, footprint)


def refresh(rows: list[dict[str, Any]], jobs: int = 1) -> list[dict[str, Any]]:
    """``rows`` (a built table's) with their ``f:`` tiling columns recomputed (see the module docstring)."""
    todo: dict[tuple[str, str], tuple[tuple[str, ...], str, int, int, float]] = {}
    for r in rows:
        case = row_case(r)
        blocks, footprint = int(float(r["f:blocks_per_sm"])), float(r["f:global.gpu_bytes"])
        fields = tuple(getattr(case, k) for k in CASE_FIELDS)
        todo[(case_key(case), r["gpu"])] = (fields, r["gpu"], int(float(r["f:tasks"])), blocks, footprint)
    items = sorted(todo.values())  # one kernel's launches together: each process compiles it once
    if jobs > 1 and len(items) > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            done = dict(pool.imap_unordered(_tiling_work, items, chunksize=8))
    else:
        done = dict(map(_tiling_work, items))
    return [{**r, **{f"f:{k}": v for k, v in done[(case_key(row_case(r)), r["gpu"])].items()}} for r in rows]


def cache_stem(gpu_key: str) -> str:
    """The cache file's name for ``gpu_key``: the key and a digest of the GPU's constants."""
    # launch_s is added to some families' predicted times, never to a feature: a new value keeps the cache
    constants = {k: v for k, v in find_gpu(gpu_key).vector().items() if k != "launch_s"}
    vector = json.dumps([FEATURES_VERSION, *sorted(constants.items())])
    return f"{gpu_key}-{hashlib.sha256(vector.encode()).hexdigest()[:12]}"


class FeatureCache:
    """Feature columns by (GPU, case key), persisted as one JSON line per case and GPU (file per constants)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.entries: dict[tuple[str, str], dict[str, Any]] = {}
        for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
            with open(path) as f:
                for line in f:
                    item = json.loads(line)
                    self.entries[(path.stem, item["key"])] = item["features"]

    def get(self, gpu: str, key: str) -> dict[str, Any] | None:
        return self.entries.get((cache_stem(gpu), key))

    def put(self, key: str, by_gpu: dict[str, dict[str, Any]]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for gpu, values in by_gpu.items():
            self.entries[(cache_stem(gpu), key)] = values
            with open(self.folder / f"{cache_stem(gpu)}.jsonl", "a") as f:
                f.write(json.dumps({"key": key, "features": values}) + "\n")


def _work(item: tuple[tuple[str, ...], tuple[str, ...]]) -> tuple[str, dict[str, dict[str, Any]]]:
    fields, gpus = item
    case = Case(*fields)
    return case_key(case), case_features(case, gpus)


def read_rows(paths: Iterable[Path]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for path in paths:
        with open(path) as f:
            rows.extend(csv.DictReader(f))
    return rows


def build(rows: list[dict[str, str]], gpus: Iterable[str], cache: FeatureCache, jobs: int = 1) -> list[dict[str, Any]]:
    """The feature rows of ``rows`` (see the module docstring); missing features computed in ``jobs``
    processes and cached."""
    extra = list(gpus)
    todo: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for row in rows:
        case, gpu = row_case(row), row["gpu"]
        if gpu not in GPUS:
            raise PerfError(message=f"row {case_key(case)}: unknown gpu {gpu!r}; known: {', '.join(GPUS)}")
        key = case_key(case)
        if cache.get(gpu, key) is None:
            fields = tuple(getattr(case, k) for k in CASE_FIELDS)
            wanted = set(todo.get(key, ((), ()))[1]) | {gpu, *extra}
            todo[key] = (fields, tuple(sorted(wanted)))
    t0 = time.perf_counter()
    if todo:
        print(f"decomposing {len(todo)} launches ({jobs} jobs)", file=sys.stderr, flush=True)
    done = 0
    items = list(todo.values())
    if jobs > 1 and len(items) > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for key, by_gpu in pool.imap_unordered(_work, items):
                cache.put(key, by_gpu)
                done = _progress(done + 1, len(items), t0)
    else:
        for item in items:
            key, by_gpu = _work(item)
            cache.put(key, by_gpu)
            done = _progress(done + 1, len(items), t0)
    out = []
    for row in rows:
        values = cache.get(row["gpu"], case_key(row_case(row)))
        assert values is not None  # computed above
        out.append({**row, **values})
    return out


def _progress(done: int, total: int, t0: float) -> int:
    if done % 25 == 0 or done == total:
        print(f"  {done}/{total} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return done


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def main(argv: list[str] | None = None) -> int:
    from ..knobs import knobs

    p = argparse.ArgumentParser(prog="python -m wavec.perf.dataset", description="the performance model's features")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="features of raw timing rows (benchmarks/perf_dataset.py's CSV)")
    b.add_argument("raw", nargs="+", type=Path)
    b.add_argument("--out", required=True, type=Path)
    b.add_argument("--gpus", default="", help="also cache these GPUs' features (comma-separated)")
    b.add_argument("--jobs", type=int, default=1)
    b.add_argument("--cache", type=Path, default=None, help="feature cache folder (default: the compile cache's)")
    r = sub.add_parser("refresh", help="recompute a built table's tiling columns in place (no decomposition)")
    r.add_argument("tables", nargs="+", type=Path)
    r.add_argument("--jobs", type=int, default=1)
    args = p.parse_args(argv)
    if args.cmd == "refresh":
        for path in args.tables:
            write_csv(refresh(read_rows([path]), args.jobs), path)
            print(f"refreshed {path}", file=sys.stderr)
        return 0
    cache = FeatureCache(args.cache or Path(knobs.cache_dir) / "perf_features")
    rows = build(read_rows(args.raw), [g for g in args.gpus.split(",") if g], cache, args.jobs)
    write_csv(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
