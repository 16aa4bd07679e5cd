"""The performance model's first dataset from GPU timings already in the repository (no new measurements):
``benchmarks/results`` of earlier sessions, converted to ``perf_dataset.py``'s raw rows.

    python benchmarks/perf_import.py --out benchmarks/data/perf [--per-shape 3] [--seed 0]

Sources (``SOURCES``; each row keeps its file in a ``source`` column):

* GEMM mma.sync: the tuner's races (``tune_h100_v2/times.json``, ``tune_h200/times.json``): per shape the
  fastest configuration, the library's own (``matmul``'s plan today) when timed, and others up to
  ``--per-shape`` (seeded, the same on both GPUs where both timed them), one dtype per shape (seeded), C in
  f32 as the tuner timed it;
* GEMM wgmma (H100 only): ``wgmma_h100/shapefile_f16_final`` and ``shapefile_bf16_split_epi_run2``,
  ``matmul``'s plan per shape (tile, stages, producer warpgroup, persistent grid, split epilogue as their
  ``config`` column says), C in the inputs' dtype; the split-K decode rows (two kernels) are left out;
* attention: ``attention_h100`` and ``attention_h200`` (mma.sync), ``attention_wgmma_h200`` (wgmma), the
  library's heuristic tile (today's ``attention_config``), rows with as many queries as keys and
  B*H*S^2*D at most ``MAX_ATTENTION_WORK`` (the CPU's decomposition of larger ones takes too long);
* rows: ``rows_h100/rows_bf16.txt`` (softmax, RMSNorm, LayerNorm, bf16, today's ``config_for``).

The held-out split is by shape (``split_of``: a CRC of the shape string), the same on both GPUs.
Caveat (docs/perf_model.md): the timings were taken with older compiler versions; the features come from
today's kernels of the same configuration, which may differ from the timed binaries.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import random
import re
import sys
import zlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout's wavec

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
FIELDS = ("gpu", "device", "family", "kernel", "dtype", "config", "shape", "split", "us", "source", "library")
DEVICES = {"h100": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200"}
SOURCES = {
    "tune": {"h100": "tune_h100_v2/times.json", "h200": "tune_h200/times.json"},
    "wgmma": ["wgmma_h100/shapefile_f16_final/gemm.csv", "wgmma_h100/shapefile_bf16_split_epi_run2/gemm.csv"],
    "attention": {
        "attention_h100/attention.csv": ("h100", "mma_sync"),
        "attention_h200/attention.csv": ("h200", "mma_sync"),
        "attention_wgmma_h200/attention.csv": ("h200", "wgmma"),
    },
    "rows": {"rows_h100/rows_bf16.txt": ("h100", "bf16")},
}
TEST_MOD = 5  # one shape in five is held out
MAX_ATTENTION_WORK = 2**37  # B*H*S^2*D: the CPU decomposes larger launches in tens of seconds each


def split_of(shape: str) -> str:
    return "test" if zlib.crc32(shape.encode()) % TEST_MOD == 0 else "train"


def _row(
    gpu: str,
    family: str,
    kernel: str,
    dtype: str,
    config: str,
    shape: str,
    us: float,
    source: str,
    library: bool = True,
) -> dict:
    """A raw row; ``library``: the configuration the library ran (the heuristic of its day), not a tuning
    alternative."""
    values = (gpu, DEVICES[gpu], family, kernel, dtype, config, shape, split_of(shape), f"{us:.4f}", source)
    return dict(zip(FIELDS, (*values, int(library)), strict=True))


def _label_plan(label: str):
    """A tuner label (``BLOCK_K=32 BLOCK_M=16 ... waves=[1, 2]``) as the plan the tuner compiled."""
    from wavec.tuning.plan import schedule, tile_plan

    subs = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", label.split("waves")[0]))
    waves = tuple(int(w) for w in re.findall(r"\d+", label.split("waves")[1]))
    return tile_plan(subs, waves, "mma_sync", schedule(prefetch_fragments=True))


def _config(label: str) -> str:
    from wavec.perf.cases import gemm_config

    return gemm_config(_label_plan(label), c_f32=True)


def tune_rows(per_shape: int, seed: int) -> list[dict]:
    from wavec.perf.cases import Case
    from wavec.perf.gpus import gpu as find_gpu
    from wavec.perf.sampling import is_library

    runs = {gpu: json.loads((RESULTS / path).read_text()) for gpu, path in SOURCES["tune"].items()}
    times: dict[tuple, dict[str, dict[str, float]]] = {}  # (dtype, shape) -> gpu -> label -> seconds
    for gpu, run in runs.items():
        for dtype, data in run.items():
            labels = data["labels"]
            for entry in data["shapes"]:
                per = times.setdefault((dtype, tuple(entry["shape"])), {}).setdefault(gpu, {})
                per.update({labels[i]: t for i, t, _n in entry["t"]})
    rows = []
    for (dtype, shape), by_gpu in sorted(times.items()):
        name = "x".join(map(str, shape))
        rng = random.Random(f"{seed}/{name}")
        if rng.random() < 0.3 if dtype == "f16" else rng.random() >= 0.3:  # one dtype per shape
            continue
        both = sorted(set.intersection(*(set(t) for t in by_gpu.values())))
        picks = set()
        for t in by_gpu.values():
            picks.add(min(t, key=t.__getitem__))
        library = [
            c for c in both if is_library(Case("gemm_mma_sync", "gemm", dtype, _config(c), name), find_gpu("h100"))
        ]
        picks |= set(library)  # the library's own configuration, when the race timed it: its ceiling gap
        pool = [c for c in both if c not in picks]
        picks |= set(rng.sample(pool, min(len(pool), max(0, per_shape - len(picks)))))
        for gpu, t in sorted(by_gpu.items()):
            for label in sorted(picks & set(t)):
                config = _config(label)
                source = SOURCES["tune"][gpu]
                library = is_library(Case("gemm_mma_sync", "gemm", dtype, config, name), find_gpu(gpu))
                rows.append(_row(gpu, "gemm_mma_sync", "gemm", dtype, config, name, t[label] * 1e6, source, library))
    return rows


def _wgmma_plan(config: str):
    from wavec.tuning.plan import GemmPlan, schedule

    bm, bn, bk, stages, group = (int(x) for x in re.findall(r"\d+", config.split("]")[0]))
    waves = tuple(int(w) for w in re.findall(r"\d+", config.split("waves=")[1].split(")")[0]))
    flags = config.split(")")[1].split()
    sched = schedule(
        warp_specialize="ws" in flags, persistent="persistent" in flags, split_epilogue="split-epi" in flags
    )
    return GemmPlan(bm, bn, bk, stages, group, waves, "wgmma", sched)


def wgmma_rows() -> list[dict]:
    from wavec.perf.cases import gemm_config

    rows = []
    for path in SOURCES["wgmma"]:
        with open(RESULTS / path) as f:
            for r in csv.DictReader(f):
                if "split=" in r["config"] or not r["wavec_ms"]:
                    continue
                dtype = {"f16": "f16", "bf16": "bf16"}[r["dtype"]]
                shape = f"{r['M']}x{r['N']}x{r['K']}"
                config = gemm_config(_wgmma_plan(r["config"]))
                rows.append(_row("h100", "gemm_wgmma", "gemm", dtype, config, shape, float(r["wavec_ms"]) * 1e3, path))
    return rows


def attention_rows() -> list[dict]:
    from wavec.kernels import attention as A

    rows = []
    for path, (gpu, mma) in SOURCES["attention"].items():
        with open(RESULTS / path) as f:
            for r in csv.DictReader(f):
                if r["sq"] != r["skv"] or not r["wavec_ms"] or r["wavec_config"] != "heuristic":
                    continue
                work = int(r["b"]) * int(r["h"]) * int(r["sq"]) ** 2 * int(r["d"])
                if work > MAX_ATTENTION_WORK:
                    continue
                causal, d, s = r["causal"] == "True", int(r["d"]), int(r["sq"])
                subs, waves = A.attention_config(d, s, None, mma, causal)
                tile = f"bm={subs[A.BLOCK_M]};bn={subs[A.BLOCK_N]};w={waves};st={subs[A.NUM_STAGES]}"
                config = f"{tile};mma={mma};causal={int(causal)}"
                shape = f"{r['b']}x{r['h']}x{r['kvh']}x{s}x{d}"
                us = float(r["wavec_ms"]) * 1e3
                rows.append(_row(gpu, "attention", "attention", r["dtype"], config, shape, us, path))
    return rows


def row_rows() -> list[dict]:
    import wavec as wc
    from wavec.kernels import rows as R

    rows = []
    for path, (gpu, dtype) in SOURCES["rows"].items():
        for line in (RESULTS / path).read_text().splitlines():
            cells = [c.strip() for c in line.split("|")]
            if len(cells) < 4 or cells[0] not in R.KINDS:
                continue
            kind, n, m, us = cells[0], int(cells[1]), int(cells[2]), float(cells[3])
            block_n, loop, vec, waves = R.config_for(getattr(wc, dtype), n, kind)
            config = f"bn={block_n};loop={int(loop)};vec={vec};wpr={waves}"
            rows.append(_row(gpu, "rows", kind, dtype, config, f"{m}x{n}", us, path))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=pathlib.Path)
    p.add_argument("--per-shape", type=int, default=3, help="tuner configurations per GEMM shape")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rows = tune_rows(args.per_shape, args.seed) + wgmma_rows() + attention_rows() + row_rows()
    args.out.mkdir(parents=True, exist_ok=True)
    for gpu in DEVICES:
        mine = [r for r in rows if r["gpu"] == gpu]
        with open(args.out / f"raw_{gpu}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerows(mine)
        counts: dict[str, int] = {}
        for r in mine:
            counts[f"{r['family']}/{r['split']}"] = counts.get(f"{r['family']}/{r['split']}", 0) + 1
        print(f"{gpu}: {len(mine)} rows {dict(sorted(counts.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
