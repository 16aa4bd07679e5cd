"""``wc.autotune``: enumerate a space of configurations, filter, compile in parallel, time, cache.

A configuration binds the kernel's free symbols (``subs``) and, for a kernel factory, the space keys
that are factory parameters.  ``legality.legal`` -> compile in a process pool (into the shared disk
cache) -> ``reject_after_compile`` -> per shape, optional cost-model pruning, then the median of
``rounds`` shuffled rounds -> the best to the tuning cache, which ``lookup`` reads.  See docs/tuning.md.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import sympy

from ..errors import TuningError
from ..frontend.kernel import WaveKernel
from .cache import TuningCache, entry_key, gpu_name, versions
from .cost_model import CostModel
from .legality import legal, reject_after_compile
from .timing import _Progress, cuda_event_timer, time_candidates

# ----------------------------------------------------------------------------- values <-> JSON


def _encode(v):
    from ..frontend.dtypes import DType
    from ..indexing.mma import MMAType

    if isinstance(v, DType):
        return v.name
    if isinstance(v, MMAType):
        return f"MMAType.{v.name}"
    if isinstance(v, (tuple, list)):
        return [_encode(x) for x in v]
    if isinstance(v, (sympy.Integer,)):
        return int(v)
    return v


def _decode(v):
    import wavec as wc

    if isinstance(v, list):
        return tuple(_decode(x) for x in v)
    if isinstance(v, str):
        if v.startswith("MMAType."):
            return wc.MMAType[v.split(".", 1)[1]]
        if v in ("f16", "bf16", "f32", "i32", "i1"):
            return getattr(wc, v)
    return v


# ----------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidate:
    """One configuration: factory keyword arguments and symbol values (by name)."""

    kwargs: tuple  # ((name, value), ...) sorted
    subs: tuple  # ((symbol name, int), ...) sorted

    @property
    def kwargs_dict(self) -> dict:
        return dict(self.kwargs)

    @property
    def subs_dict(self) -> dict:
        return dict(self.subs)

    def symbol_subs(self) -> dict:
        from ..frontend.symbols import sym

        return {sym(k): v for k, v in self.subs}

    @property
    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.subs] + [f"{k}={_encode(v)}" for k, v in self.kwargs]
        return " ".join(parts)

    def to_json(self) -> dict:
        return {"kwargs": {k: _encode(v) for k, v in self.kwargs}, "subs": dict(self.subs)}

    @classmethod
    def from_json(cls, d: dict) -> Candidate:
        return cls(
            tuple(sorted(((k, _decode(v)) for k, v in d["kwargs"].items()), key=lambda x: x[0])),
            tuple(sorted((k, int(v)) for k, v in d["subs"].items())),
        )


@dataclass
class _KernelSource:
    """Where kernels come from: a factory (import path + fixed kwargs) or one fixed WaveKernel."""

    factory_path: str | None
    fixed: dict
    kernel: WaveKernel | None = None
    _built: dict[tuple, WaveKernel] = field(default_factory=dict)

    @property
    def kernel_id(self) -> str:
        if self.kernel is not None:
            return f"{self.kernel.__module__}.{self.kernel.name}"
        args = ",".join(f"{k}={_encode(v)}" for k, v in sorted(self.fixed.items()))
        return f"{self.factory_path}({args})"

    def params(self) -> set:
        if self.factory_path is None:
            return set()
        return set(inspect.signature(_import(self.factory_path)).parameters)

    def build(self, kwargs: tuple) -> WaveKernel:
        if self.kernel is not None:
            return self.kernel
        if self.factory_path is not None and kwargs not in self._built:
            self._built[kwargs] = _import(self.factory_path)(**self.fixed, **dict(kwargs))
        return self._built[kwargs]


def _import(path: str):
    mod, _, name = path.partition(":")
    obj = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _source(kernel, fixed: dict) -> _KernelSource:
    if isinstance(kernel, WaveKernel):
        if fixed:
            raise TuningError(message="fixed= needs a kernel factory, not a built kernel")
        return _KernelSource(None, {}, kernel)
    if isinstance(kernel, str):
        _import(kernel)
        return _KernelSource(kernel, dict(fixed))
    if callable(kernel):
        path = f"{kernel.__module__}:{kernel.__qualname__}"
        if "<locals>" in path or kernel.__module__ == "__main__":
            raise TuningError(
                message=f"kernel factory {path} must be a module-level function of an importable "
                "module (worker processes import it)"
            )
        return _KernelSource(path, dict(fixed))
    raise TuningError(
        message=f"autotune expects a @wc.wave kernel, a kernel factory or 'module:factory', got {type(kernel).__name__}"
    )


def enumerate_space(space: dict, factory_params: set) -> list[Candidate]:
    """Every combination of the space's values (keys: symbols / symbol names, or factory arguments)."""
    keys = list(space)
    out = []
    for values in itertools.product(*(space[k] for k in keys)):
        kw, subs = [], []
        for k, v in zip(keys, values):
            name = str(k)
            if isinstance(k, str) and k in factory_params:
                kw.append((name, tuple(v) if isinstance(v, list) else v))
            else:
                subs.append((name, int(v)))
        out.append(Candidate(tuple(sorted(kw, key=lambda x: x[0])), tuple(sorted(subs))))
    return out


# ----------------------------------------------------------------------------- compiling


def _compile_one(factory_path, fixed, kwargs, subs, backend, target, kernel=None) -> dict:
    """Worker: build the kernel, compile it (into the shared disk cache) and return its metadata."""
    import wavec as wc
    from wavec.frontend.symbols import sym

    t0 = time.perf_counter()
    try:
        k = kernel if kernel is not None else _import(factory_path)(**fixed, **dict(kwargs))
        ck = wc.compile(k, {sym(n): v for n, v in subs}, backend=backend, target=target)
    except Exception as e:  # noqa: BLE001 - a failing configuration is a rejected one
        return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300], "seconds": time.perf_counter() - t0}
    m = ck.artifact.metadata
    facts = {"registers": m.registers, "spills": m.spills, "shared_bytes": m.shared_bytes, "block": list(m.block)}
    return {**facts, "seconds": time.perf_counter() - t0}


def compile_candidates(
    src: _KernelSource, cands: list[Candidate], *, backend: str, target: str, workers: int | None, progress: bool = True
) -> dict[Candidate, dict]:
    """Metadata (or ``{"error": ...}``) per candidate, compiled in ``workers`` processes (0: in-process)."""
    bar = _Progress(len(cands), "compile", progress)
    out: dict[Candidate, dict] = {}
    if not cands:
        return out
    if src.factory_path is None or workers == 0:
        for c in cands:
            out[c] = _compile_one(
                src.factory_path, src.fixed, c.kwargs, c.subs, backend, target, kernel=src.build(c.kwargs)
            )
            bar.step()
    else:
        ctx = multiprocessing.get_context("spawn")  # CUDA in the parent forbids fork
        from ..knobs import knobs

        n = workers or knobs.tune_workers or min(len(cands), max(1, (multiprocessing.cpu_count() or 2) - 1))
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            futs = {
                pool.submit(_compile_one, src.factory_path, src.fixed, c.kwargs, c.subs, backend, target): c
                for c in cands
            }
            for f, c in futs.items():
                out[c] = f.result()
                bar.step()
    bar.close()
    return out


# ----------------------------------------------------------------------------- timing


class _Runner:
    """Launches one candidate on fixed inputs; compiles (a disk-cache hit after the pool) on first use."""

    def __init__(self, src: _KernelSource, cand: Candidate, inputs, backend, target) -> None:
        self.src, self.cand, self.inputs, self.backend, self.target = src, cand, inputs, backend, target
        self.kernel = None

    def compiled(self):
        if self.kernel is None:
            import wavec as wc

            self.kernel = wc.compile(
                self.src.build(self.cand.kwargs), self.cand.symbol_subs(), backend=self.backend, target=self.target
            )
        return self.kernel

    def __call__(self):
        return self.compiled()(*self.inputs)


# ----------------------------------------------------------------------------- the driver


@dataclass
class TuningResult:
    kernel_id: str
    best: dict = field(default_factory=dict)  # shape -> Candidate
    times: dict = field(default_factory=dict)  # shape -> {Candidate: median seconds}
    rejected: dict = field(default_factory=dict)  # Candidate -> reason
    metadata: dict = field(default_factory=dict)  # Candidate -> compile metadata
    from_cache: dict = field(default_factory=dict)  # shape -> bool

    def config(self, shape) -> tuple[dict, dict]:
        """(factory kwargs, subs keyed by symbol) of the best configuration for ``shape``."""
        c = self.best[tuple(shape)]
        return c.kwargs_dict, c.symbol_subs()


def _dtypes_of(inputs) -> list[str]:
    dtypes = [getattr(t, "dtype", None) for t in inputs]
    return [type(t).__name__ if d is None else str(d).replace("torch.", "") for t, d in zip(inputs, dtypes)]


@dataclass(frozen=True)
class TuneOptions:
    """``autotune``'s knobs, validated once.  ``make_inputs(shape)``: the launch arguments;
    ``timer(candidate, fn)``: seconds of one run of ``fn()`` (default: CUDA events); ``fixed``: factory
    arguments common to every configuration; ``dtypes``, ``gpu``, ``dims``: cache key parts (defaults from
    the inputs and the device); ``workers``: compile processes (0: in-process); ``model``/``prune_to``: time
    only the ``prune_to`` candidates a ``CostModel`` ranks best; ``rank``/``prune_to``: the same with a
    ranking hook ``rank(shape, candidates, compile_of) -> candidates best first`` (``compile_of(c)``: the
    compiled kernel; ``tuning.perf_prune.PerfRanker``, the performance model's predicted time);
    ``use_cache=False`` re-tunes; ``seed`` shuffles the rounds."""

    make_inputs: Callable | None = None
    timer: Callable | None = None
    fixed: dict | None = None
    target: str | None = None
    backend: str = "cuda"
    dtypes: tuple | list | None = None
    workers: int | None = None
    warmup: int = 3
    rounds: int = 7
    max_registers: int = 255
    model: CostModel | None = None
    prune_to: int | None = None
    rank: Callable | None = None
    use_cache: bool = True
    gpu: str | None = None
    dims: tuple[str, ...] | None = None
    progress: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "warmup": self.warmup >= 0,
            "rounds": self.rounds >= 1,
            "max_registers": 0 < self.max_registers <= 255,
            "workers": self.workers is None or self.workers >= 0,
            "prune_to": self.prune_to is None or self.prune_to >= 1,
            "rank": self.rank is None or (callable(self.rank) and self.model is None),
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise TuningError(message=f"TuneOptions: invalid {', '.join(f'{b}={getattr(self, b)!r}' for b in bad)}")


def autotune(kernel, space: dict, shapes, options: TuneOptions | None = None) -> TuningResult:
    """Tune ``kernel`` (a ``@wc.wave`` kernel, a module-level kernel factory or ``"module:factory"``) over
    ``space`` for each of ``shapes``.  Results are cached per (kernel, shape bucket, dtypes, GPU,
    versions); a cached shape is answered without compiling or timing."""
    from ..compiler import default_target

    opt = options or TuneOptions()
    src = _source(kernel, opt.fixed or {})
    target = opt.target or default_target(opt.backend)
    cache = TuningCache(f"{src.kernel_id}@{target}")
    cands = enumerate_space(space, src.params())
    result = TuningResult(src.kernel_id)
    inputs_of: dict = {}
    todo = _answer_cached(
        [tuple(int(x) for x in s) for s in shapes], opt, cache, {c.label: c for c in cands}, result, inputs_of
    )
    if not todo:
        return result
    compiled = _legal_and_compiled(src, cands, opt, target, result)
    timer = opt.timer or _default_timer()
    kernels = {c: _Runner(src, c, (), opt.backend, target) for c in compiled}  # compiled once, for every shape
    for shape, key in todo:
        pool = compiled
        if opt.model is not None and opt.prune_to:
            rank = {m.name: i for i, m in enumerate(opt.model.rank(shape))}
            pool = sorted(compiled, key=lambda c: rank.get(c.label, -1))[: opt.prune_to]
        elif opt.rank is not None and opt.prune_to:
            pool = list(opt.rank(shape, compiled, lambda c: kernels[c].compiled()))[: opt.prune_to]
        inputs = inputs_of.get(shape)
        if inputs is None and opt.make_inputs is not None:
            inputs = opt.make_inputs(shape)
        runners = {c: _Runner(src, c, inputs or (), opt.backend, target) for c in pool}
        for c, runner in runners.items():
            runner.kernel = kernels[c].kernel
        times = time_candidates(
            runners,
            timer,
            warmup=opt.warmup,
            rounds=opt.rounds,
            seed=opt.seed,
            progress=opt.progress,
            label="x".join(map(str, shape)),
        )
        best = min(times, key=times.__getitem__)
        result.best[shape], result.times[shape], result.from_cache[shape] = best, times, False
        meta = result.metadata.get(best, {})
        entry = cache_entry(shape, best, times, meta, candidates=len(cands), rejected=len(result.rejected))
        cache.put_many({key: entry})
    return result


def _answer_cached(shapes, opt: TuneOptions, cache, by_label: dict, result: TuningResult, inputs_of: dict) -> list:
    """Fill ``result`` for the shapes the cache answers; return ``(shape, key)`` of the others."""
    gpu, vers = opt.gpu or gpu_name(), versions()
    todo = []
    for shape in shapes:
        if opt.dtypes is not None:
            dts = list(opt.dtypes)
        elif opt.make_inputs is not None:
            inputs_of[shape] = opt.make_inputs(shape)
            dts = _dtypes_of(inputs_of[shape])
        else:
            dts = []
        key = entry_key(shape, dts, gpu, vers, opt.dims)
        hit = cache.get(key) if opt.use_cache else None
        if hit is None:
            todo.append((shape, key))
            continue
        best = Candidate.from_json(hit["best"])
        result.best[shape] = by_label.get(best.label, best)
        result.times[shape] = {by_label[lbl]: t for lbl, t in hit.get("times", {}).items() if lbl in by_label}
        result.from_cache[shape] = True
    return todo


def _legal_and_compiled(src: _KernelSource, cands: list, opt: TuneOptions, target: str, result: TuningResult) -> list:
    """The candidates that pass ``legal``, compile and ``reject_after_compile`` (the others' reasons to
    ``result.rejected``, every compile's metadata to ``result.metadata``)."""
    survivors = []
    for c in cands:
        ok, why = legal(src.build(c.kwargs), c.subs_dict, target)
        if ok:
            survivors.append(c)
        else:
            result.rejected[c] = why
    metas = compile_candidates(
        src, survivors, backend=opt.backend, target=target, workers=opt.workers, progress=opt.progress
    )
    compiled = []
    for c in survivors:
        result.metadata[c] = meta = metas[c]
        err = meta.get("error") or reject_after_compile(meta, opt.max_registers)
        if err:
            result.rejected[c] = err
        else:
            compiled.append(c)
    if not compiled:
        reasons = "; ".join(f"{c.label}: {r}" for c, r in list(result.rejected.items())[:5])
        raise TuningError(message=f"no configuration of {src.kernel_id} is legal on {target} ({reasons})")
    return compiled


def _default_timer():
    from ..compiler import gpu_visible

    if not gpu_visible():
        raise TuningError(
            message="timing needs a CUDA GPU (torch.cuda.is_available() is False); pass timer= to time some other way"
        )
    return cuda_event_timer


def cache_entry(shape, best: Candidate, times: dict, metadata: dict, **extra) -> dict:
    """The tuning cache's entry for one measured shape."""
    return {
        "shape": list(shape),
        "best": best.to_json(),
        "best_label": best.label,
        "seconds": times[best],
        "times": {c.label: t for c, t in times.items()},
        "metadata": metadata,
        **extra,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def lookup(
    kernel,
    shape,
    *,
    fixed: dict | None = None,
    target: str | None = None,
    backend: str = "cuda",
    dtypes=(),
    gpu: str | None = None,
    dims=None,
) -> tuple[dict, dict] | None:
    """The cached best ``(factory kwargs, subs keyed by symbol)`` for ``shape``, or None (never tunes)."""
    from ..compiler import default_target

    src = _source(kernel, fixed or {})
    target = target or default_target(backend)
    cache = TuningCache(f"{src.kernel_id}@{target}")
    hit = cache.get(entry_key(shape, list(dtypes), gpu or gpu_name(), versions(), dims))
    if hit is None:
        return None
    c = Candidate.from_json(hit["best"])
    return c.kwargs_dict, c.symbol_subs()
