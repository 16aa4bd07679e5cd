"""``python -m wavec`` subcommands other than ``tune``: ``compile``, ``cache``, ``doctor``, ``perf``.

Requires: nothing beyond ``import wavec`` until a command needs it (torch, the IREE compiler and ptxas are
imported or looked up by the command that uses them, and their absence is reported, not raised).

Guarantees: each command returns a process exit status (0 ok, 1 a failure it explains, 2 bad usage) and
prints errors as ``wavec <command>: <message>`` on stderr; ``doctor`` never fails on a missing piece, it
names it and the ``pip install`` or setting that provides it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .errors import OptionError, WavecError
from .knobs import KNOBS

DUMPS = ("trace", "mlir", "ptx", "sass")


def add_parsers(sub) -> None:
    c = sub.add_parser("compile", help="compile a kernel from a Python file and dump its IR/PTX/SASS")
    c.add_argument("spec", help="FILE.py:NAME, NAME a @wc.wave kernel or a function returning one")
    c.add_argument("--subs", nargs="*", default=[], help="SYMBOL=INT ... (wc.sym names: BLOCK_M=64 K=4096)")
    c.add_argument("--target", default=None, help="sm_80, sm_90, sm_90a or gfx942 (default: the visible GPU)")
    c.add_argument("--backend", default=None, help="cuda, rocm or emulator (default: as wc.compile)")
    c.add_argument("--dump", default="", help=f"comma-separated subset of {','.join(DUMPS)}")
    c.add_argument("--out", default=None, help="write dumps into this directory instead of stdout")
    k = sub.add_parser("cache", help="inspect or clear the compile cache")
    k.add_argument("action", choices=["list", "info", "clear"])
    sub.add_parser("doctor", help="check the installation: what is there, what is missing and how to fix it")
    p = sub.add_parser("perf", help="a library kernel's tasks, demand and roofline on a GPU (compiled on the CPU)")
    p.add_argument("kernel", help="gemm, attention, softmax, rms_norm, layer_norm, moe_up or moe_down")
    p.add_argument(
        "--shapes", required=True, help="gemm: M,N,K; attention: B,H,S,D[,KVH[,SKV]]; rows: M,N; moe: T,H,I,E"
    )
    p.add_argument("--topk", type=int, default=8, help="moe: experts a token")
    p.add_argument(
        "--routing", default="uniform", help="moe: uniform, zipfA (e.g. zipf1.2) or counts:c0/c1/... (slots an expert)"
    )
    p.add_argument("--gpu", default="h100", help="h100, h200, a100, l40s, b200 or mi300x (or a driver name)")
    p.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    p.add_argument("--mma", default="mma_sync", choices=["mma_sync", "wgmma"])
    p.add_argument("--causal", action="store_true", help="attention: causal mask")
    p.add_argument("--policy", default="round_robin", choices=["round_robin", "greedy"])
    p.add_argument(
        "--trained-on", default=None, help="the MLPs trained on this GPU (h100, h200, all; default: --gpu's)"
    )


def run(args: argparse.Namespace) -> int:
    try:
        return {"compile": _compile, "cache": _cache, "doctor": _doctor, "perf": _perf}[args.cmd](args)
    except WavecError as e:
        print(f"wavec {args.cmd}: {e}", file=sys.stderr)
        return 1


# ------------------------------------------------------------------------------------------------ perf


def _perf(args: argparse.Namespace) -> int:
    from .perf import decompose, features, gpu, schedule
    from .perf.estimator import estimate, launch_values
    from .perf.forward import family_of
    from .perf.gpus import GPUS
    from .perf.library import library_launch
    from .perf.report import format_estimate, format_report

    try:
        sizes = tuple(int(x) for x in args.shapes.split(","))
    except ValueError:
        print(f"wavec perf: --shapes expects comma-separated integers, got {args.shapes!r}", file=sys.stderr)
        return 2
    spec = gpu(args.gpu)
    launch = library_launch(args.kernel, sizes, spec, args.dtype, args.mma, args.causal, args.topk, args.routing)
    decomp = decompose(launch.compiled, *launch.shapes, gpu=spec, views=launch.views, **launch.scalars)
    sched = schedule(decomp, spec, args.policy)
    feats = features(decomp, sched)
    print(format_report(decomp, sched, feats))
    # a trace keeps no routing, so family_of leaves the MoE GEMMs out; here the routing is the one given
    family = "moe" if args.kernel.startswith("moe_") else family_of(launch.compiled.artifact)
    if family is None:  # (an odd-length row kernel: docs/perf_model.md) the analytical half above stands
        print(f"no performance-model estimate: {decomp.kernel} is in no trained family")
        return 0
    key = next(k for k, v in GPUS.items() if v == spec)
    try:
        est = estimate(launch_values(decomp, feats), spec, key, family, args.trained_on)
    except OptionError as e:  # no weights for this family: the analytical half above still stands
        print(f"no performance-model estimate: {e} (train them: python -m wavec.perf.train)")
        return 0
    print(format_estimate(est, family))
    return 0


# ------------------------------------------------------------------------------------------------ compile


def _load_kernel(spec: str):
    import wavec as wc

    file, sep, name = spec.rpartition(":")
    if not sep or not file.endswith(".py") or not name:
        raise WavecError(message=f"expected FILE.py:NAME, got {spec!r}")
    path = Path(file)
    if not path.is_file():
        raise WavecError(message=f"no such file: {file}")
    module_spec = importlib.util.spec_from_file_location(f"_wavec_cli_{path.stem}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(path.parent.resolve()))
    module_spec.loader.exec_module(module)
    obj = getattr(module, name, None)
    if obj is None:
        raise WavecError(message=f"{file} defines no {name!r}")
    if callable(obj) and not isinstance(obj, wc.WaveKernel):
        obj = obj()
    if not isinstance(obj, wc.WaveKernel):
        raise WavecError(message=f"{spec} is a {type(obj).__name__}, not a @wc.wave kernel (or a factory of one)")
    return obj


def _parse_subs(items: list[str]) -> dict:
    import wavec as wc

    subs = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not value.lstrip("-").isdigit():
            raise WavecError(message=f"--subs expects SYMBOL=INT, got {item!r}")
        subs[getattr(wc.sym, name)] = int(value)
    return subs


def _compile(args: argparse.Namespace) -> int:
    import wavec as wc

    dumps = [d for d in args.dump.split(",") if d]
    unknown = sorted(set(dumps) - set(DUMPS))
    if unknown:
        print(f"wavec compile: unknown --dump {unknown}; accepted: {', '.join(DUMPS)}", file=sys.stderr)
        return 2
    kernel, subs = _load_kernel(args.spec), _parse_subs(args.subs)
    with tempfile.TemporaryDirectory(prefix="wavec-dump-") as tmp:
        previous = os.environ.get("WAVEC_DUMP_DIR")
        os.environ["WAVEC_DUMP_DIR"] = tmp  # a dump recompiles (no cache read), writing MLIR and PTX here
        try:
            start = time.perf_counter()
            compiled = wc.compile(kernel, subs, target=args.target, backend=args.backend)
            seconds = time.perf_counter() - start
        finally:
            if previous is None:
                del os.environ["WAVEC_DUMP_DIR"]
            else:
                os.environ["WAVEC_DUMP_DIR"] = previous
        texts = {d: _dump_text(d, kernel, compiled, Path(tmp)) for d in dumps}
    meta = compiled.metadata
    print(
        f"{meta.kernel}: target {compiled.artifact.target} ({compiled.artifact.format}), block {meta.block}, "
        f"grid {meta.grid}, shared {meta.shared_bytes} B, registers {meta.registers}, spills {meta.spills}, "
        f"{seconds:.2f} s"
    )
    for d, text in texts.items():
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{meta.kernel}.{d}").write_text(text)
            print(f"wrote {out / f'{meta.kernel}.{d}'}")
        else:
            print(f"// ----- {d} -----\n{text}")
    return 0


def _dump_text(what: str, kernel, compiled, folder: Path) -> str:
    if what == "trace":
        from .passes.printer import format_trace

        return format_trace(kernel.trace())
    if what == "mlir":
        return compiled.artifact.mlir
    if what == "ptx":
        found = sorted(folder.glob("*.ptx"))
        if not found:
            raise WavecError(message=f"no PTX for target {compiled.artifact.target} (PTX is NVIDIA's)")
        return found[-1].read_text()
    if compiled.artifact.format != "cubin":
        raise WavecError(message="SASS needs a cubin: an NVIDIA target and ptxas (see python -m wavec doctor)")
    from .codegen.ptxas import find_ptxas

    ptxas = find_ptxas()
    beside = Path(ptxas).parent / "cuobjdump" if ptxas else None
    tool = shutil.which("cuobjdump") or (str(beside) if beside and beside.is_file() else None)
    if tool is None:
        raise WavecError(message="SASS needs cuobjdump from the CUDA toolkit (on PATH or beside ptxas)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.artifact.binary)
        f.flush()
        return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout


# -------------------------------------------------------------------------------------------------- cache


def _entries(root: Path) -> list[Path]:
    from .runtime.cache import ENTRY_SUFFIX

    return sorted(root.glob(f"??/*{ENTRY_SUFFIX}")) if root.is_dir() else []


def _cache(args: argparse.Namespace) -> int:
    from .knobs import knobs
    from .runtime.artifact import Artifact

    root = Path(knobs.cache_dir)
    entries = _entries(root)
    if args.action == "clear":
        for path in entries:
            path.unlink(missing_ok=True)
        print(f"removed {len(entries)} compiled kernels from {root}")
        return 0
    size = sum(p.stat().st_size for p in entries)
    if args.action == "info":
        tuning = list((root / "tuning").glob("*.json")) if (root / "tuning").is_dir() else []
        print(f"cache directory: {root}\nkernels: {len(entries)} ({size / 1e6:.1f} MB)\ntuning files: {len(tuning)}")
        print(f"disabled: {knobs.cache_disable} (WAVEC_CACHE_DISABLE)")
        return 0
    for path in entries:
        try:
            art = Artifact.from_bytes(path.read_bytes())
            what = f"{art.metadata.kernel:<28} {art.target:<7} {art.format:<6}"
        except WavecError as e:
            what = f"(unreadable: {e})"
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))
        print(f"{path.stem[:16]}  {what} {path.stat().st_size / 1e3:8.1f} kB  {stamp}")
    print(f"{len(entries)} kernels, {size / 1e6:.1f} MB in {root}")
    return 0


# ------------------------------------------------------------------------------------------------- doctor


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _doctor(args: argparse.Namespace) -> int:
    from . import __version__

    rows: list[tuple[str, str]] = [("python", platform.python_version()), ("wavec", __version__)]
    missing: list[str] = []
    rows += _doctor_torch(missing)
    iree = _version("iree-base-compiler")
    rows.append(("iree-base-compiler", iree or "missing"))
    if iree is None:
        missing.append("the MLIR compiler: pip install iree-base-compiler (needed by wc.compile)")
    rows += _doctor_ptxas(missing)
    rows += _doctor_c_launcher(missing)
    rows += _doctor_knobs(missing)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print("\n" + ("\n".join(f"missing: {m}" for m in missing) if missing else "everything wavec uses is there"))
    return 0


def _doctor_torch(missing: list[str]) -> list[tuple[str, str]]:
    try:
        import torch
    except ImportError:
        missing.append("torch: pip install torch (CPU: --index-url https://download.pytorch.org/whl/cpu)")
        return [("torch", "missing")]
    rows = [("torch", f"{torch.__version__} (CUDA {torch.version.cuda or 'none'})")]
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        rows.append(("gpu", f"{torch.cuda.get_device_name()} (sm_{major}{minor})"))
        try:
            from cuda.bindings import driver

            _, version = driver.cuDriverGetVersion()
            rows.append(("cuda driver", f"{version // 1000}.{version % 1000 // 10}"))
        except ImportError:
            missing.append("cuda-bindings: pip install cuda-bindings (the CUDA launcher uses it)")
    else:
        rows.append(("gpu", "none visible: kernels run on the emulator (WAVEC_BACKEND=emulator)"))
    return rows


def _doctor_ptxas(missing: list[str]) -> list[tuple[str, str]]:
    from .codegen.ptxas import find_ptxas, ptxas_version

    path = find_ptxas()
    if path is None:
        missing.append("ptxas (cubins, register counts): install the CUDA toolkit or set WAVEC_PTXAS")
        return [("ptxas", "missing: NVIDIA kernels load as PTX")]
    return [("ptxas", f"{path} ({ptxas_version(path)})")]


def _doctor_c_launcher(missing: list[str]) -> list[tuple[str, str]]:
    """Whether ``WAVEC_LAUNCH_API=c``'s launcher can be built here (a C compiler and Python's headers);
    missing only where the knob asks for it."""
    import shutil

    from .runtime.c_launcher import toolchain

    cc, include = toolchain()
    found = shutil.which(cc)
    if found is not None and (include / "Python.h").exists():
        return [("c launcher", f"buildable ({found}, {include})")]
    why = f"no {cc} on PATH" if found is None else f"no Python.h in {include}"
    try:
        wanted = KNOBS["launch_api"].get() == "c"
    except WavecError:
        wanted = False  # (the knob's own row reports a bad value)
    if wanted:
        fix = "install a C compiler and python3-dev, or WAVEC_LAUNCH_API=ctypes"
        missing.append(f"the C launcher (WAVEC_LAUNCH_API=c): {fix}")
    return [("c launcher", f"not buildable: {why}")]


def _doctor_knobs(missing: list[str]) -> list[tuple[str, str]]:
    rows = []
    for name, knob in KNOBS.items():
        try:
            value = str(knob.get())
        except WavecError as e:
            value = f"INVALID: {e}"
            missing.append(f"a valid {knob.env}: {e}")
        rows.append((knob.env, f"{value}  ({knob.doc})"))
        if name == "cache_dir":
            root = Path(knob.get())
            writable = os.access(root if root.exists() else root.parent, os.W_OK)
            rows.append(("cache writable", str(writable)))
            if not writable:
                missing.append(f"a writable cache directory: set WAVEC_CACHE_DIR (now {root})")
    return rows


# ------------------------------------------------------------------------------------------------ tune moe


def _moe_rules(name: str, shape, swap: bool = False, split: bool = False, wgmma: bool = False) -> int:
    """``--dry-run``: the region rules and the candidate count on the visible GPU (else the H100), with
    the swap-AB candidates when ``swap``, the wgmma token blocks when ``wgmma`` and the split-K ones when
    ``split``."""
    from .target import get_target
    from .tuning import moe as tm
    from .tuning.devices import device

    dev = device()
    reg = tm.regions(shape, dev.sms, dev.l2_bytes)
    cands = tm.candidates(shape, reg) + (tm.swap_candidates(shape, reg) if swap else [])
    cands += tm.wgmma_candidates(shape, reg) if wgmma else []
    cands += tm.split_candidates(shape, reg, cands) if split else []
    print(f"model {name}: {shape.key()} on {dev.name} (rules only: nothing compiled or timed)")
    for line in reg.lines():
        print(f"  rule: {line}")
    per_bm = {
        bm: sum(c.block_m == bm for c in cands) for bm in sorted({*reg.block_ms, *(c.block_m for c in cands if c.swap)})
    }
    limit = get_target("sm_90a" if dev.arch == "sm_90" else dev.arch).max_shared_bytes
    fit = sum(max(tm.shared_bytes(c)) <= limit for c in cands)
    splits = sum(c.split_k > 1 for c in cands)
    print(f"  configs: {len(cands)} candidates (per BLOCK_M {per_bm}), {fit} within shared memory; not compiled")
    if split:
        print(f"  split-K: {splits} of them split the down-projection")
    return 0


def tune_moe(args: argparse.Namespace) -> int:
    """``python -m wavec tune moe --model NAME``: the region rules, the pool, the profile of its (T, beta)
    points, the fit (stored in the tuning cache), and a table of the fitted points' choices and regret."""
    from dataclasses import replace

    from .compiler import gpu_visible
    from .tuning import moe as tm
    from .tuning import moe_profile as mp

    if not args.model:
        print("wavec tune moe: --model NAME is required (a model of moe_shapes.csv)", file=sys.stderr)
        return 2
    try:
        shape = tm.model(args.model)
    except WavecError as e:
        print(f"wavec tune moe: {e}", file=sys.stderr)
        return 2
    if args.dtype:
        shape = replace(shape, dtype=args.dtype)
    if (args.max_configs is not None and args.max_configs < 1) or (args.points is not None and args.points < 1):
        print("wavec tune moe: --max-configs and --points must be positive", file=sys.stderr)
        return 2
    if args.dry_run:
        return _moe_rules(args.model, shape, args.swap, args.split_k, args.wgmma)
    if not gpu_visible():
        print("wavec tune moe: error: profiling times kernels on a CUDA GPU, and none is visible", file=sys.stderr)
        return 2

    def say(msg: str) -> None:
        print(f"[tune moe] {msg}", file=sys.stderr, flush=True)

    try:
        res = mp.tune(
            shape, budget_s=60 * args.budget_min, max_configs=args.max_configs, n_points=args.points,
            workers=args.workers, progress=say, swap=args.swap, split=args.split_k, deterministic=not args.atomic,
            wgmma=args.wgmma,
        )  # fmt: skip
    except WavecError as e:
        print(f"wavec tune moe: {e}", file=sys.stderr)
        return 1
    print(f"model {args.model}: {shape.key()} on {res.table.device} ({res.table.meta.get('target')})")
    for line in res.pool.regions.lines():
        print(f"  rule: {line}")
    per_bm = {bm: sum(p.cfg.block_m == bm for p in res.pool.pool) for bm in res.table.block_ms()}
    print(
        f"  configs: {res.pool.candidates} candidates, {res.pool.compiled} compiled, {res.pool.legal} legal, "
        f"pool {len(res.pool.pool)} (per BLOCK_M {per_bm}); {len(res.points)} points profiled"
    )
    meta = res.table.meta
    print(
        f"  fit: median RMS relative residual {100 * meta['rms_rel_residual_median']:.1f}%, "
        f"max {100 * meta['rms_rel_residual_max']:.1f}%; table -> {res.path}"
    )
    secs = res.seconds
    print(
        f"  time: pool {secs['pool']:.0f} s, profile {secs['profile']:.0f} s, fit {secs['fit']:.1f} s, "
        f"total {secs['total'] / 60:.1f} min"
    )
    rows = mp.regret_rows(res.table, res.points)
    print("in-sample (fitted points; held-out regret: python -m benchmarks.moe --regret):")
    print(mp.format_rows(rows, mp.summary(rows)))
    return 0
