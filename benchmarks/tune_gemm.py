"""Issue #7's GPU evidence in one run: tuned GEMM vs the heuristic vs cuBLAS, cost-model regret on held-out
shapes, the tuning time the model saves, and % of the analytical ceiling per shape.

    PYTHONPATH=$PWD python benchmarks/tune_gemm.py --out DIR [--dtypes f16,bf16] [--time-budget 330]
                                                   [--space BLOCK_K=64,128 waves=2x2,2x4 ...] [--dry-run]
                                                   [--mma mma_sync|wgmma]

``--mma wgmma``: the Hopper warpgroup-MMA GEMM (sm_90a) over ``WGMMA_SPACE``, shapes with M > 16 only;
its tuning cache (OUT/tuning/) is what ``benchmarks/gemm.py --mma wgmma --tuned OUT/tuning`` times.

1. Shapes: benchmarks/data/gemm_shapes.csv, deduplicated (M, N, K).  Split (``split_shapes``: stratified
   by M, covering grid fill and K) into fit shapes (<= 25 per configuration) and held-out shapes (the rest).
2. Candidates: ``wavec.tuning.plan.DEFAULT_SPACE`` (or ``--space``) through the legality filter, compiled
   once each in a process pool (M, N, K are dynamic: one binary serves every shape), plus the configurations
   the ``gemm_config`` heuristic picks; ptxas spills reject; a launch on a shape with partial tiles must
   match torch.  All dtypes are submitted at once, so bf16 compiles while f16 is timed.
3. Per shape, the candidates that serve its M (16-row tiles only for M <= 64, ...), the heuristic's
   configuration and cuBLAS are raced (``race_candidates``): interleaved shuffled rounds, all candidates in
   round 1, then only those within 10 % of the leader; a time is a median.
4. Fit shapes: every candidate.  The cost model is fitted per configuration on them; the model that
   dispatches keeps the configurations it chooses on some shape of a reference grid.
5. Held-out shapes: exhaustive on at least a third of all shapes (regret: the model's pick vs the best),
   more while the time budget allows (``plan_holdout``, re-planned after every shape); the others time only
   the full model's top-k and the portfolio model's pick.  After each exhaustive race, the race's best,
   the model's pick and its top 2 are re-timed head to head (``confirm_shape``).
6. Report: per-shape CSV, measured-vs-ceiling plot, the tuning cache (``wavec.tuning.gemm.matmul`` then
   dispatches from it, and from the stored model for shapes never measured), summary.json, a table.

``--dry-run``: the same flow on the CPU: real legality and compiles, emulator correctness checks on tiny
shapes, a synthetic timer and a virtual clock (it shows the budget logic; its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shutil
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from tune_gemm_report import (  # noqa: E402
    DtypeRun,
    Models,
    Phases,
    ShapeResult,
    evaluate,
    plot,
    print_table,
    pruned_set,
    serving,
    write_csv,
)

SHAPES_CSV = pathlib.Path(__file__).parent / "data" / "gemm_shapes.csv"
CUBLAS = "cuBLAS"
CONFIRM_ROUNDS = 7  # head-to-head rounds re-timing the race's best against the model's picks


# ----------------------------------------------------------------------------- candidates and compiles


def load_shapes(limit: int | None, mma: str = "mma_sync") -> list[tuple]:
    import csv

    from wavec.tuning.evaluate import dedupe

    with open(SHAPES_CSV) as f:
        shapes = dedupe((r["M"], r["N"], r["K"]) for r in csv.DictReader(f))
    if mma == "wgmma":  # decode shapes run the mma.sync decode tiles (kernels.gemm.matmul), not wgmma
        shapes = [s for s in shapes if s[0] > 16]
    return shapes[:limit] if limit else shapes


def parse_space(items, mma: str = "mma_sync") -> dict:
    from wavec.tuning.plan import space_for

    space = space_for(mma)
    for item in items or ():
        name, _, values = item.partition("=")
        if name == "waves":
            space[name] = [tuple(int(x) for x in v.split("x")) for v in values.split(",")]
        elif name in space:
            space[name] = [int(v) for v in values.split(",")]
        else:
            raise SystemExit(f"--space: unknown axis {name!r} (known: {', '.join(space)})")
    return space


def legal_candidates(space: dict, dtype, shapes, target: str, mma: str = "mma_sync") -> tuple[list, list, dict]:
    """(space candidates that pass the legality filter, extra heuristic candidates, rejected reasons)."""
    from wavec.tuning.gemm import FACTORY, _fixed, heuristic_candidate
    from wavec.tuning.legality import legal
    from wavec.tuning.search import _source, enumerate_space

    src = _source(FACTORY, _fixed(dtype, mma))
    cands = enumerate_space(space, src.params())
    labels = {c.label for c in cands}
    extra = sorted({heuristic_candidate(*s, mma) for s in shapes} - set(cands), key=lambda c: c.label)
    ok, rejected = [], {}
    for c in cands + extra:
        good, why = legal(src.build(c.kwargs), c.subs_dict, target)
        if good:
            ok.append(c)
        else:
            rejected[c] = why
    return [c for c in ok if c.label in labels], [c for c in ok if c.label not in labels], rejected


class Compiles:
    """One spawn process pool for every (dtype, candidate): f16 first, so later dtypes compile while the
    first is timed."""

    def __init__(self, jobs: list, backend: str, target: str, workers: int, mma: str = "mma_sync") -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from wavec.tuning.gemm import FACTORY, _fixed
        from wavec.tuning.search import _compile_one

        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        self.futures = {
            (d.name, c): self.pool.submit(_compile_one, FACTORY, _fixed(d, mma), c.kwargs, c.subs, backend, target)
            for d, c in jobs
        }

    def wait(self, dtype_name: str) -> dict:
        from wavec.tuning.timing import _Progress

        mine = {c: f for (d, c), f in self.futures.items() if d == dtype_name}
        bar = _Progress(len(mine), "compile", True)
        out = {}
        for c, f in mine.items():
            out[c] = f.result()
            bar.step()
        bar.close()
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def load_kernels(run: DtypeRun, metas: dict, extra: list, dev, target: str) -> None:
    """Reject what failed, spills or computes wrong; load the rest (disk-cache hits after the pool)."""
    import wavec as wc
    from wavec.kernels.gemm import make_gemm
    from wavec.tuning.gemm import _fixed
    from wavec.tuning.legality import reject_after_compile

    secs = [m.get("seconds", 0.0) for m in metas.values()]
    print(
        f"   {len(metas)} compiles, {statistics.median(secs):.2f} s median each; "
        f"registers known: {sum(m.get('registers') is not None for m in metas.values())}"
    )
    factories: dict = {}
    for c, meta in metas.items():
        why = meta.get("error") or reject_after_compile(meta, 255)
        if not why:
            waves = c.kwargs_dict["waves"]
            kernel = factories.get(waves) or factories.setdefault(
                waves, make_gemm(**_fixed(run.wc_dtype, run.mma), waves=waves)
            )
            try:
                ck = wc.compile(kernel, c.symbol_subs(), backend=dev.backend, target=target)
                err = dev.check(ck, run.name, c)
            except Exception as e:  # noqa: BLE001 - a configuration that cannot load or launch is rejected
                why = f"launch failed: {type(e).__name__}: {e}".splitlines()[0][:200]
            else:
                if err is not None and not err < 1e-3:
                    why = f"wrong result: relative error {err:.2e}"
                else:
                    run.kernels[c], run.metadata[c] = ck, meta
        if why:
            run.rejected[c] = why
    run.candidates = [c for c in run.kernels if c not in extra]
    if not run.candidates:
        raise SystemExit(f"{run.name}: no candidate compiled and checked: {list(run.rejected.values())[:3]}")
    spills = sum("spill" in str(r) for r in run.rejected.values())
    wrong = sum("wrong" in str(r) for r in run.rejected.values())
    print(
        f"   {len(run.candidates)} candidates usable; rejected: {len(run.rejected)} "
        f"({spills} spill, {wrong} wrong results, {len(run.rejected) - spills - wrong} illegal/failed)"
    )


# ----------------------------------------------------------------------------- timing


def time_shape(dev, run: DtypeRun, shape, cands, kind: str, rounds: int, clock, seed: int, extra=()) -> ShapeResult:
    """Race ``cands`` (and ``extra``) with the heuristic's configuration and cuBLAS on ``shape``.  The
    heuristic's configuration is a candidate like the others (so "tuned" can never be worse than it), and
    like cuBLAS it is timed in every round."""
    from wavec.tuning.gemm import heuristic_candidate
    from wavec.tuning.timing import race_candidates

    t0 = clock()
    dev.begin_shape(shape, run.name)
    heur = heuristic_candidate(*shape, run.mma)
    pool = [c for c in dict.fromkeys([*cands, *extra, heur]) if c in run.kernels]
    runners = {c: dev.runner(run.kernels[c], c) for c in pool}
    runners[CUBLAS] = dev.cublas()
    dev.probe(runners.get(heur, runners[CUBLAS]))
    race = race_candidates(
        runners,
        dev.timer,
        rounds=rounds,
        keep_within=0.10,
        always=(heur, CUBLAS),
        warmup=1 if dev.reps > 1 else 0,
        seed=seed,
        clock=clock,
    )
    dev.end_shape()
    med = race.medians()
    res = ShapeResult(
        shape,
        kind,
        {c: med[c] for c in pool},
        med.get(heur, math.nan),
        med[CUBLAS],
        {c: race.cost_s[c] for c in pool},
        {c: len(race.samples[c]) for c in pool},
        clock() - t0,
    )
    run.results[shape] = res
    return res


def confirm_shape(dev, run: DtypeRun, r: ShapeResult, models, clock, seed: int) -> None:
    """Re-time the race's best, the dispatch model's pick and the full model's top 2 head to head
    (``CONFIRM_ROUNDS`` interleaved rounds, all of them every round) into ``r.confirmed``.  The race's
    best is the fastest of ~130 medians of ~3 noisy samples, so its time is biased low and the race's
    regret biased high; these few candidates re-timed together give the regret without that bias."""
    from wavec.tuning.timing import race_candidates

    by_label = {c.label: c for c in run.candidates}
    best = min(r.times, key=r.times.get)
    picks = [models.dispatch.choose(r.shape).name] + [m.name for m in models.full.rank(r.shape, 2)]
    cands = list(dict.fromkeys([best, *(by_label[n] for n in picks)]))
    if len(cands) < 2:  # the model picked the race's best: nothing to compare
        r.confirmed = {best: r.times[best]}
        return
    t0 = clock()
    dev.begin_shape(r.shape, run.name)
    runners = {c: dev.runner(run.kernels[c], c) for c in cands}
    dev.probe(runners[best])
    race = race_candidates(
        runners,
        dev.timer,
        rounds=CONFIRM_ROUNDS,
        keep_within=math.inf,
        warmup=1 if dev.reps > 1 else 0,
        seed=seed,
        clock=clock,
    )
    dev.end_shape()
    r.confirmed = race.medians()
    r.wall_s += clock() - t0


def print_shape(run: DtypeRun, r: ShapeResult, ceiling_of) -> None:
    best = min(r.times, key=r.times.get)
    t = r.times[best]
    ceil = ceiling_of(r.shape, best)
    m, n, k = r.shape
    print(
        f"   {run.name:4} {m:5d}x{n:6d}x{k:5d} {r.kind:10} {len(r.times):3d} cand  best {t * 1e6:9.1f} us "
        f"{2 * m * n * k / t / 1e12:6.1f} TF/s  x{r.cublas / t:5.2f} cuBLAS  heur x{r.cublas / r.heuristic:5.2f}  "
        f"{100 * ceil['bound'] / t:5.1f}% ceil ({ceil['limiter']})  [{r.wall_s:.2f} s]",
        flush=True,
    )


def estimate_cost(model, cands, shape, launch_s: float, scale: float, race_factor: float) -> float:
    """Clock seconds to race ``cands`` on ``shape``: predicted times, the reps the probe would choose,
    launch overheads; ``scale`` calibrates against what the fit shapes actually cost."""
    from tune_gemm_devices import reps_for

    by_name = {c.name: c for c in model.configs if c.serves(shape)}  # the piece of the shape's regime
    preds = [model.predict(by_name[c.label], shape) for c in cands if c.label in by_name]
    if not preds:
        return 0.0
    reps = reps_for(statistics.median(preds))
    per = [reps * (max(p, 1e-6) + launch_s) + 40e-6 for p in preds]
    refs = 2 * statistics.median(per) * 3  # heuristic and cuBLAS, every round
    return scale * (race_factor * sum(per) + refs)


def fit_models(run: DtypeRun, fit_shapes, sms: int, target: str) -> Models:
    """The cost model on the fit shapes only: every configuration fitted (``full``: prunes the search), and
    the dispatch model of the configurations it chooses somewhere (the same calls as
    ``benchmarks/refit_cost_model.py`` makes offline from times.json)."""
    from wavec.tuning.gemm import dispatch_model, fit_gemm_model

    space = set(run.candidates)  # the heuristic's configurations outside the space are not modelled
    times = {s: {c: t for c, t in run.results[s].times.items() if c in space} for s in fit_shapes}
    full = fit_gemm_model(times, run.metadata, sms=sms, target=target)
    dispatch, kept, info = dispatch_model(times, run.metadata, sms=sms, target=target)
    print(
        f"   fitted {info['fitted']} configurations on {len(fit_shapes)} shapes; dispatch keeps the {len(kept)} "
        f"the model chooses somewhere"
    )
    return Models(full, dispatch, kept)


def tune_dtype(dev, run: DtypeRun, shapes, args, share_s: float, clock, phases, ceiling_of) -> dict:
    """Fit, held-out exhaustive and pruned phases for one dtype within ``share_s`` clock seconds."""
    from wavec.tuning.evaluate import plan_holdout, split_shapes
    from wavec.tuning.gemm import fit_classes

    start = clock()
    heights = {c.subs_dict["BLOCK_M"] for c in run.candidates}
    fit, held = split_shapes(shapes, max_fit=25, seed=args.seed, sms=dev.sms, classes=fit_classes(heights))
    must = math.ceil(len(shapes) / 3)
    print(
        f"   {len(shapes)} shapes: {len(fit)} fit, {len(held)} held out ({must} at least exhaustive); "
        f"share of the budget {share_s:.0f} s"
    )
    phases.begin(f"{run.name}: fit shapes (exhaustive)")
    for i, s in enumerate(fit):
        print_shape(run, time_shape(dev, run, s, serving(run, s), "fit", args.rounds, clock, args.seed + i), ceiling_of)
    models = fit_models(run, fit, dev.sms, args.target)
    # calibrate the cost estimate on what the fit shapes actually cost
    fit_res = [run.results[s] for s in fit]
    race_factor = sum(sum(r.samples.values()) for r in fit_res) / max(1, sum(len(r.samples) for r in fit_res))
    est = [estimate_cost(models.full, serving(run, r.shape), r.shape, dev.launch_s, 1.0, race_factor) for r in fit_res]
    scale = sum(r.wall_s for r in fit_res) / max(sum(est), 1e-9)
    print(
        f"   fit shapes took {sum(r.wall_s for r in fit_res):.1f} s (estimate x{scale:.2f}); "
        f"{race_factor:.2f} samples per candidate"
    )

    memo: dict = {}  # the plan is redone after every shape: estimate each shape once

    def ex_cost(s):
        if ("ex", s) not in memo:
            memo["ex", s] = estimate_cost(models.full, serving(run, s), s, dev.launch_s, scale, race_factor)
        return memo["ex", s]

    def pr_cost(s):
        if ("pr", s) not in memo:
            memo["pr", s] = estimate_cost(
                models.full, pruned_set(run, models, s, args.top_k), s, dev.launch_s, scale, 2.0
            )
        return memo["pr", s]

    phases.begin(f"{run.name}: held-out shapes")
    todo, done_ex = list(held), 0
    plan = plan_holdout(todo, ex_cost, pr_cost, min_exhaustive=must, budget_s=share_s - (clock() - start))
    for note in plan.notes:
        print(f"   trimmed: {note}")
        run.notes.append(note)
    while todo:
        plan = plan_holdout(
            todo, ex_cost, pr_cost, min_exhaustive=max(0, must - done_ex), budget_s=share_s - (clock() - start)
        )
        s = todo.pop(0)
        if s in plan.exhaustive:
            r = time_shape(dev, run, s, serving(run, s), "exhaustive", args.rounds, clock, args.seed + 1000 + len(todo))
            confirm_shape(dev, run, r, models, clock, args.seed + 5000 + len(todo))
            done_ex += 1
        else:
            r = time_shape(
                dev,
                run,
                s,
                pruned_set(run, models, s, args.top_k),
                "pruned",
                args.rounds,
                clock,
                args.seed + 1000 + len(todo),
            )
        print_shape(run, r, ceiling_of)
    if done_ex < must:
        run.notes.append(f"only {done_ex} shapes searched exhaustively (wanted {must})")
    return {"fit": fit, "held": held, "models": models}


# ----------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtypes", default="f16,bf16", help="f16 first; later dtypes only if the budget allows")
    ap.add_argument("--time-budget", type=float, default=330.0, help="seconds for the whole run (compiles included)")
    ap.add_argument("--space", nargs="*", help="AXIS=v1,v2 or waves=2x2,2x4 (replaces that axis of DEFAULT_SPACE)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds for the contenders (medians)")
    ap.add_argument("--top-k", type=int, default=6, help="configurations the model lets through when it prunes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=0, help="compile processes (0: CPU cores - 2)")
    ap.add_argument("--max-shapes", type=int, default=None, help="first N distinct shapes only")
    ap.add_argument("--target", default=None, help="default: the GPU's (sm_90a with --mma wgmma)")
    ap.add_argument(
        "--mma",
        choices=("mma_sync", "wgmma"),
        default="mma_sync",
        help="wgmma: Hopper warpgroup MMA over WGMMA_SPACE (sm_90a); shapes with M <= 16 are left out "
        "(matmul keeps the mma.sync decode tiles for them)",
    )
    ap.add_argument("--dry-run", action="store_true", help="CPU only: emulator checks, synthetic timer, virtual clock")
    ap.add_argument("--dry-checks", type=int, default=4, help="dry run: emulator correctness checks per dtype")
    return ap.parse_args(argv)


def make_device(args, clock):
    from tune_gemm_devices import GpuDevice, SyntheticDevice

    if args.dry_run:
        return SyntheticDevice(clock, checks=args.dry_checks, seed=args.seed)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible: use --dry-run to check the flow on the CPU")
    return GpuDevice()


@dataclass
class Context:
    args: argparse.Namespace
    out: pathlib.Path
    clock: object
    phases: Phases
    dev: object
    shapes: list
    runs: list
    extras: dict
    compiles: Compiles
    measured: dict
    ceiling_of: object
    compiles_done_at: float  # dry run: when the GPU machine's pool would have finished every compile


def setup(args) -> Context:
    from tune_gemm_devices import VirtualClock

    import wavec as wc
    from wavec.tuning.ceiling import device_rates, gemm_ceiling
    from wavec.tuning.gemm import target_for

    clock = VirtualClock() if args.dry_run else time.perf_counter
    phases = Phases(clock)
    phases.begin("setup: shapes, legality, compile pool, device rates")
    args.target = target_for(args.mma, args.target)
    dev = make_device(args, clock)
    shapes = load_shapes(args.max_shapes, args.mma)
    space = parse_space(args.space, args.mma)
    runs, jobs, extras = [], [], {}
    for name in args.dtypes.split(","):
        run = DtypeRun(name, getattr(wc, name), mma=args.mma)
        cands, extra, rejected = legal_candidates(space, run.wc_dtype, shapes, args.target, args.mma)
        run.rejected.update(rejected)
        extras[name] = extra
        jobs += [(run.wc_dtype, c) for c in cands + extra]
        runs.append(run)
        print(
            f"   {name}: {len(cands)} legal candidates of the space, {len(extra)} heuristic configurations "
            f"outside it, {len(rejected)} illegal"
        )
    workers = args.workers or max(1, (os.cpu_count() or 2) - 2)
    compiles = Compiles(jobs, dev.backend, args.target, workers, args.mma)
    measured = dev.rates()
    rates = device_rates(dev.name, measured)
    print(
        f"   device {dev.name}: {dev.sms} SMs; measured {measured['matrix_flops'] / 1e12:.0f} TFLOP/s (cuBLAS "
        f"8192^3), {measured['hbm_bytes'] / 1e12:.2f} TB/s (copy); {len(shapes)} distinct shapes; "
        f"{workers} compile workers"
    )

    def ceiling_of(shape, cand):
        s = cand.subs_dict
        return gemm_ceiling(*shape, s["BLOCK_M"], s["BLOCK_N"], tuple(cand.kwargs_dict["waves"]), rates=rates)

    # dry run: ~1.5 s per compile over the GPU machine's 14 workers (the brief's figure, not measured here)
    done_at = clock() + len(jobs) * 1.5 / 14
    return Context(
        args, pathlib.Path(args.out), clock, phases, dev, shapes, runs, extras, compiles, measured, ceiling_of, done_at
    )


def run_dtypes(ctx: Context) -> tuple[dict, list]:
    """Each dtype in turn within its share of what is left of the budget; later dtypes are skipped when
    they cannot fit the minimum the first one needed."""
    args, dev, runs = ctx.args, ctx.dev, ctx.runs
    infos, skipped = {}, []
    reserve = 10.0  # the report: evaluation, CSV, plot, cache
    try:
        for i, run in enumerate(runs):
            ctx.phases.begin(f"{run.name}: compile (wait), load, check")
            t_wait = time.perf_counter()
            metas = ctx.compiles.wait(run.name)
            if args.dry_run:
                per_dtype = ctx.compiles_done_at - ctx.phases.t0
                ctx.clock.now = max(ctx.clock.now, ctx.phases.t0 + per_dtype * (i + 1) / len(runs))
            load_kernels(run, metas, ctx.extras[run.name], dev, args.target)
            if i == 0:
                print(
                    f"   CPU per launch {1e6 * dev.measure_launch(run.kernels[run.candidates[0]]):.1f} us "
                    f"(compile wait {time.perf_counter() - t_wait:.1f} s wall)"
                )
            share = (args.time_budget - ctx.phases.elapsed() - reserve) / (len(runs) - i)
            need = heads_need(runs[0], infos) if i > 0 else 0.0
            if need > share:
                note = f"{run.name} skipped: needs ~{need:.0f} s (as {runs[0].name} took), {share:.0f} s left"
                print(f"   trimmed: {note}")
                skipped.append({"dtype": run.name, "skipped": note})
                continue
            infos[run.name] = tune_dtype(dev, run, ctx.shapes, args, share, ctx.clock, ctx.phases, ctx.ceiling_of)
    finally:
        ctx.compiles.close()
    return infos, skipped


def report(ctx: Context, infos: dict, skipped: list) -> None:
    from wavec.tuning.gemm import _cache, store_tuned

    out, args = ctx.out, ctx.args
    ctx.phases.begin("report")
    heads, rows = [], []
    for run in ctx.runs:
        if run.name not in infos:
            continue
        head, shape_rows = evaluate(run, infos[run.name], args.top_k, ctx.ceiling_of)
        heads.append(head)
        rows += shape_rows
        times = {s: r.times for s, r in run.results.items()}
        n = store_tuned(
            run.wc_dtype,
            times,
            run.metadata,
            target=args.target,
            gpu=ctx.dev.name,
            model=infos[run.name]["models"].dispatch,
            candidates=run.candidates,
            mma=run.mma,
        )
        cache = _cache(run.wc_dtype, args.target, run.mma)
        (out / "tuning").mkdir(exist_ok=True)
        shutil.copy(cache.path, out / "tuning" / cache.path.name)
        print(f"   {run.name}: {n} tuning-cache entries and the dispatch model -> {cache.path}")
    write_csv(rows, out / "tune_gemm.csv")
    # every median of the run, so the model can be refitted and re-evaluated offline without a GPU
    (out / "times.json").write_text(json.dumps({run.name: raw_times(run) for run in ctx.runs if run.name in infos}))
    try:
        plot(rows, out / "tune_gemm_ceiling.png")
    except ImportError as e:  # the CSV has every number the plot shows
        print(f"   no plot: {e}")
    ctx.phases.end()
    summary = {
        "device": ctx.dev.name,
        "dry_run": args.dry_run,
        "rates": ctx.measured,
        "phases": ctx.phases.rows,
        "budget_s": args.time_budget,
        "total_s": ctx.phases.elapsed(),
        "dtypes": heads,
        "skipped": skipped,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print_table(heads, ctx.phases)
    for s in skipped:
        print(f"\n== {s['skipped']}")
    print(f"\nwrote {', '.join(str(p) for p in sorted(out.iterdir()))}")


def raw_times(run: DtypeRun) -> dict:
    """Compact record of a dtype's race results: candidates by index, ``[index, median s, samples]`` per shape."""
    labels = [c.label for c in run.metadata]
    index = {c: i for i, c in enumerate(run.metadata)}
    return {
        "labels": labels,
        "mma": run.mma,
        "metadata": [run.metadata[c] for c in run.metadata],
        "space": [index[c] for c in run.candidates],
        "shapes": [
            {
                "shape": list(s),
                "split": r.kind,
                "cublas": r.cublas,
                "t": [[index[c], float(f"{t:.6g}"), r.samples[c]] for c, t in r.times.items()],
                "confirmed": [[index[c], float(f"{t:.6g}")] for c, t in r.confirmed.items()],
            }
            for s, r in run.results.items()
        ],
    }


class Tee:
    """stdout to the terminal and to a log file under --out (the terminal's tail may be all a caller keeps)."""

    def __init__(self, path: pathlib.Path) -> None:
        self.file, self.stdout = open(path, "w"), sys.stdout  # noqa: SIM115 - closed in main

    def write(self, text: str) -> int:
        self.file.write(text)
        return self.stdout.write(text)

    def flush(self) -> None:
        self.file.flush()
        self.stdout.flush()


def main(argv=None) -> int:
    args = parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WAVEC_CACHE_DIR", "/tmp/wavec-tune-cache")
    tee = Tee(out / "tune_gemm.log")
    sys.stdout = tee
    try:
        ctx = setup(args)
        infos, skipped = run_dtypes(ctx)
        report(ctx, infos, skipped)
    finally:
        sys.stdout = tee.stdout
        tee.file.close()
    return 0


def heads_need(first: DtypeRun, infos: dict) -> float:
    """Clock seconds the first dtype's search took, minus what it spent beyond the required held-out shapes
    (a later dtype can run with the minimum exhaustive set)."""
    if first.name not in infos:
        return 0.0
    res = list(first.results.values())
    must = math.ceil(len(res) / 3)
    ex = [r.wall_s for r in res if r.kind == "exhaustive"]
    pr = [r.wall_s for r in res if r.kind == "pruned"]
    per_pr = statistics.mean(pr) if pr else (statistics.mean(ex) / 10 if ex else 0.0)
    extra = max(0, len(ex) - must)
    return sum(r.wall_s for r in res) - (sum(sorted(ex)[must:]) if extra else 0.0) + extra * per_pr


if __name__ == "__main__":
    sys.exit(main())
