"""Issue #22 item 5: time the performance model's dataset on a GPU (raw timings only; features come later,
on the CPU, from the same kernels: ``python -m wavec.perf.dataset build``).

    python benchmarks/perf_dataset.py --gpu-name h100 --out DIR --budget-s 200 [--scale 1.0] [--seed 0]
                                      [--workers 16] [--families gemm_wgmma,rows] [--dry-run] [--limit N]

1. Rows: ``wavec.perf.sampling.plan_rows`` (seeded: the same rows on every GPU and on the CPU): groups of
   cases sharing a launch shape, interleaved across families, each group ``train`` or ``test`` (held out
   by shape).
2. Compile: every distinct kernel once, in a spawn process pool into the disk cache (``--workers``), for
   the target ``cases.target_of`` names; compile errors, and spills of the tuner's GEMM configurations,
   drop their rows (listed in meta.json).
3. Time, group by group, until ``--budget-s`` seconds have passed since the start (compiles included):
   per group, inputs allocated once and rotated over enough sets to exceed twice the L2 (so a small
   kernel never runs from L2); per case, one probe launch (after a ``torch.cuda._sleep`` head start)
   chooses ``reps`` launches of ~300 µs, captured in a CUDA graph; ``ROUNDS`` replays timed by CUDA
   events; the median per launch (and the minimum) in µs.  A failed capture times plain launches.
4. Output: ``DIR/raw_<gpu>.csv`` (one row per case, flushed as it is timed: a run cut short keeps what it
   measured) and ``DIR/meta_<gpu>.json`` (device, counts, dropped kernels, phase times).

``--dry-run``: on the CPU, compile every kernel with the emulator backend for the GPU's targets (sm_90 /
sm_90a for the H100 and H200) and write the CSV of the rows it would time (no times).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import pathlib
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # this checkout's wavec

FIELDS = ("gpu", "device", "family", "kernel", "dtype", "config", "shape", "split", "us", "us_min", "reps", "sets")
MEASURE_S = 300e-6  # GPU time one graph replay aims for
MAX_REPS = 200
ROUNDS = 5


def compile_job(case_fields: tuple, target: str, backend: str) -> dict:
    """Worker: compile one kernel into the disk cache; its registers and spills, or the error."""
    from wavec.perf.cases import Case, compile_case

    t0 = time.perf_counter()
    try:
        meta = compile_case(Case(*case_fields), target, backend).artifact.metadata
    except Exception as e:  # noqa: BLE001 - a kernel that does not compile drops its rows
        return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300], "seconds": time.perf_counter() - t0}
    return {"registers": meta.registers, "spills": meta.spills, "seconds": time.perf_counter() - t0}


def compile_all(groups, gpu, backend: str, workers: int) -> dict:
    """{kernel_key: compile facts} for every distinct kernel of ``groups``."""
    import multiprocessing

    from wavec.perf.cases import kernel_key, target_of

    first = {}
    for g in groups:
        for c in g.cases:
            first.setdefault(kernel_key(c), c)
    out = {}
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {
            key: pool.submit(compile_job, (c.family, c.kernel, c.dtype, c.config, c.shape), target_of(c, gpu), backend)
            for key, c in first.items()
        }
        for i, (key, f) in enumerate(futures.items()):
            out[key] = f.result()
            if (i + 1) % 20 == 0 or i + 1 == len(futures):
                print(f"   compiled {i + 1}/{len(futures)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def rejected(facts: dict, family: str) -> str | None:
    """Why a kernel's rows are dropped: it did not compile, or (a GEMM of the tuner's space, which the tuner
    would reject too) it spills.  The library's own configurations are timed as the library runs them."""
    from wavec.tuning.legality import reject_after_compile

    spills = reject_after_compile({"block": None, **facts}, 255) if family.startswith("gemm") else None
    return facts.get("error") or spills


# ----------------------------------------------------------------------------- GPU timing


class Timer:
    def __init__(self) -> None:
        import torch

        self.torch = torch
        props = torch.cuda.get_device_properties(0)
        self.name = torch.cuda.get_device_name()
        self.l2 = getattr(props, "L2_cache_size", 0) or 50 * 2**20
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.graph_failures = 0

    def inputs(self, binds) -> list[list]:
        """Sets of tensors for ``binds`` (``cases.Binding``), enough that their bytes exceed 2x the L2."""
        torch = self.torch
        dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32}
        size = sum(math.prod(b.shape) * (4 if b.dtype in ("f32", "i32") else 2) for b in binds)
        count = max(1, min(16, math.ceil(2 * self.l2 / max(size, 1))))
        sets = []
        for _ in range(count):
            tensors = []
            for b in binds:
                if b.data is not None:
                    tensors.append(torch.from_numpy(b.data).to("cuda"))
                elif b.output:
                    tensors.append(torch.empty(b.shape, dtype=dtypes[b.dtype], device="cuda"))
                else:
                    tensors.append(torch.randn(b.shape, dtype=dtypes[b.dtype], device="cuda") * 0.5)
            sets.append(tensors)
        return sets

    def _events(self, work, sleep_s: float) -> float:
        self.torch.cuda._sleep(int(sleep_s * 2e9))  # keeps the GPU busy while the CPU enqueues ``work``
        self.start.record()
        work()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e-3

    def time(self, kernel, sets: list, scalars: list) -> tuple[float, float, int]:
        """(median s per launch, min s per launch, reps) of ``kernel`` over the rotating ``sets``."""
        torch = self.torch
        launches = [lambda s=s: kernel(*s, *scalars) for s in sets]
        for f in launches:
            f()
        torch.cuda.synchronize()
        probe = min(self._events(launches[0], 50e-6) for _ in range(2))
        reps = max(len(sets), min(MAX_REPS, math.ceil(MEASURE_S / max(probe, 1e-7))))

        def work() -> None:
            for i in range(reps):
                launches[i % len(launches)]()

        replay = self._graph(work)
        run = replay if replay is not None else work
        sleep = 20e-6 if replay is not None else reps * 25e-6
        run()
        samples = [self._events(run, sleep) / reps for _ in range(ROUNDS)]
        return statistics.median(samples), min(samples), reps

    def _graph(self, work):
        torch = self.torch
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                work()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                work()
        except RuntimeError as e:
            self.graph_failures += 1
            if self.graph_failures <= 3:
                print(f"   note: graph capture failed ({str(e).splitlines()[0][:120]}); timing plain launches")
            torch.cuda.synchronize()
            return None
        return graph.replay


def time_groups(groups, gpu_key: str, compiled: dict, writer, out_file, deadline: float) -> dict:
    from wavec.perf import gpu
    from wavec.perf.cases import bindings, compile_case, kernel_key, target_of

    timer, spec = Timer(), gpu(gpu_key)
    counts = {"timed": 0, "failed": 0, "groups": 0, "skipped_groups": 0}
    for g in groups:
        if time.perf_counter() > deadline:
            counts["skipped_groups"] += 1
            continue
        cases = [c for c in g.cases if rejected(compiled[kernel_key(c)], c.family) is None]
        if not cases:
            continue
        inputs: dict[tuple, tuple[list, list]] = {}  # a group's cases share inputs where their bindings agree
        for c in cases:
            binds, scalars = bindings(c)
            key = tuple((b.shape, b.dtype, b.output, None if b.data is None else b.data.tobytes()) for b in binds)
            if key not in inputs:
                inputs[key] = (timer.inputs(binds), scalars)
            sets, scalars = inputs[key]
            try:
                kernel = compile_case(c, target_of(c, spec), "cuda")
                med, low, reps = timer.time(kernel, sets, scalars)
            except Exception as e:  # noqa: BLE001 - one failing launch is reported, the run goes on
                counts["failed"] += 1
                if counts["failed"] <= 20:
                    print(f"   FAILED {c}: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
                continue
            row = (gpu_key, timer.name, c.family, c.kernel, c.dtype, c.config, c.shape, g.split)
            writer.writerow((*row, f"{med * 1e6:.4f}", f"{low * 1e6:.4f}", reps, len(sets)))
            counts["timed"] += 1
        out_file.flush()
        counts["groups"] += 1
        if counts["groups"] % 50 == 0:
            left = deadline - time.perf_counter()
            print(
                f"   {counts['groups']} groups, {counts['timed']} rows timed, {left:.0f} s of budget left", flush=True
            )
        del sets
    counts["graph_failures"] = timer.graph_failures
    return counts


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpu-name", required=True, help="h100 or h200 (wavec.perf.gpus)")
    p.add_argument("--out", required=True, type=pathlib.Path)
    p.add_argument("--budget-s", type=float, default=200.0, help="seconds from start (compiles included)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the shapes per family")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 4)
    p.add_argument("--families", default="", help="comma-separated subset of wavec.perf.cases.FAMILIES")
    p.add_argument("--limit", type=int, default=0, help="only the first N groups (testing)")
    p.add_argument("--dry-run", action="store_true", help="CPU: compile with the emulator and list the rows")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    from wavec.perf.cases import FAMILIES, kernel_key
    from wavec.perf.gpus import GPUS, gpu
    from wavec.perf.sampling import plan_rows

    spec = gpu(args.gpu_name)
    key = next(k for k, v in GPUS.items() if v == spec)
    families = [f for f in args.families.split(",") if f] or list(FAMILIES)
    if set(families) - set(FAMILIES):
        raise SystemExit(f"--families: unknown {sorted(set(families) - set(FAMILIES))}; known: {FAMILIES}")
    groups = [g for g in plan_rows(spec, args.seed, args.scale) if g.family in families]
    groups = groups[: args.limit] if args.limit else groups
    rows = sum(len(g.cases) for g in groups)
    print(
        f"{len(groups)} groups, {rows} rows on {spec.name} ({args.gpu_name}); budget {args.budget_s:.0f} s", flush=True
    )
    compiled = compile_all(groups, spec, "emulator" if args.dry_run else "cuda", args.workers)
    t_compile = time.perf_counter() - t0
    dropped = {"/".join(k): why for k, f in compiled.items() if (why := rejected(f, k[0])) is not None}
    print(f"   {len(compiled)} kernels in {t_compile:.0f} s; dropped {len(dropped)}", flush=True)
    for name, why in list(dropped.items())[:10]:
        print(f"     {name}: {why}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"raw_{key}.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        if args.dry_run:
            counts = {"listed": 0}
            for g in groups:
                for c in g.cases:
                    if rejected(compiled[kernel_key(c)], c.family) is None:
                        writer.writerow(
                            (key, "dry-run", c.family, c.kernel, c.dtype, c.config, c.shape, g.split, "", "", "", "")
                        )
                        counts["listed"] += 1
        else:
            counts = time_groups(groups, key, compiled, writer, f, t0 + args.budget_s)
    meta = {
        "gpu": key,
        "args": {k: str(v) for k, v in vars(args).items()},
        "groups": len(groups),
        "rows_planned": rows,
        "kernels": len(compiled),
        "dropped": dropped,
        "compile_s": round(t_compile, 1),
        "total_s": round(time.perf_counter() - t0, 1),
        **counts,
    }
    (args.out / f"meta_{key}.json").write_text(json.dumps(meta, indent=1))
    print(f"wrote {path}: {json.dumps({k: v for k, v in meta.items() if k not in ('dropped', 'args')})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
