"""``wc.compile``: trace, run the pass pipeline, emit MLIR, build the binary, cache it, load it.

The cache key is a hash of the canonical traced kernel (its printed trace: body, shapes, dtypes and
closure values as they were traced), the constraint list, ``subs``, every compile option, the target and
the versions of wavec and the compiler.  A cache hit never imports the MLIR bindings or IREE.
"""

from __future__ import annotations

import functools
import gc
import importlib.metadata
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import sympy

from . import __version__
from .errors import (
    CodegenError,
    ConstraintError,
    KernelDefinitionError,
    OptionError,
    SourceLoc,
    ToolchainError,
    UnsupportedBackendError,
)
from .frontend.constraints import ConstraintSet
from .frontend.kernel import WaveKernel
from .indexing.symbols import shape_symbol
from .knobs import knobs
from .passes.printer import format_trace
from .runtime.artifact import ArgSpec, Artifact, KernelMetadata
from .runtime.backends import BACKENDS
from .runtime.cache import cache_key, default_cache
from .runtime.tensor_map import TensorMapSpec


def _iree_version() -> str:
    try:
        return importlib.metadata.version("iree-base-compiler")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _assembler_version() -> str:
    """Path and version of the ptxas that would assemble the cubin (part of the cache key)."""
    from .codegen.ptxas import find_ptxas

    path = find_ptxas()
    return _ptxas_identity(path, os.stat(path).st_mtime_ns) if path else "none"


@functools.lru_cache(maxsize=8)
def _ptxas_identity(path: str, mtime_ns: int) -> str:
    from .codegen.ptxas import ptxas_version

    return f"{path} {ptxas_version(path)} {mtime_ns}"


def gpu_visible() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def default_backend() -> str:
    forced = knobs.backend
    if forced:
        if forced not in BACKENDS:
            raise UnsupportedBackendError(backend=forced, expected=list(BACKENDS))
        return forced
    return "cuda" if gpu_visible() else "emulator"


def default_target(backend: str) -> str:
    if backend == "rocm":
        return "gfx942"
    if backend == "cuda" and gpu_visible():
        import torch

        major, minor = torch.cuda.get_device_capability()
        return "sm_90" if major >= 9 else "sm_80"
    return "sm_90"


@dataclass
class CompileStats:
    cached: bool = False
    seconds: dict = field(default_factory=dict)


def _build(
    kernel: WaveKernel,
    trace,
    cs: ConstraintSet,
    target_name: str,
    print_ir_after,
    check_bounds: bool,
    run_caps: dict[str, int],
    strided: dict[str, int] | None,
) -> Artifact:
    from .codegen.binary import parse_executable
    from .codegen.emitter import emit_kernel
    from .codegen.iree_compile import compile_hal_executable, dump_file
    from .codegen.l2_prefetch import with_l2_prefetch
    from .codegen.launch_bounds import with_min_workgroups
    from .codegen.ptxas import assemble, find_ptxas
    from .passes.context import PassContext
    from .passes.pipeline import run_pipeline
    from .target import get_target

    target = get_target(target_name)
    bound, prefetch = cs.scheduling.min_workgroups_per_sm, cs.scheduling.l2_prefetch
    if prefetch is not None and target.binary_format != "ptx":
        raise ConstraintError(
            cs.scheduling.loc,
            message=f"SchedulingConstraint(l2_prefetch={prefetch}): an L2 prefetch size of NVIDIA targets "
            f"(PTX cp.async .L2::{prefetch}B); {target_name} has none: leave it None there",
        )
    if bound is not None and target.binary_format != "ptx":
        raise ConstraintError(
            cs.scheduling.loc,
            message=f"SchedulingConstraint(min_workgroups_per_sm={bound}): a launch bound of NVIDIA targets "
            f"(PTX .minnctapersm); {target_name} has none: leave it None there",
        )
    ctx = PassContext.build(trace, cs, target_name)
    ctx.check_bounds = check_bounds
    ctx.run_caps = {shape_symbol(k): v for k, v in run_caps.items()}
    ctx.strided = strided
    run_pipeline(trace, ctx, print_ir_after)
    text, iface = emit_kernel(trace, ctx, target)
    if print_ir_after and ("all" in print_ir_after or "mlir" in print_ir_after):
        print(f"// ----- emitted MLIR -----\n{text}")
    blob = compile_hal_executable(text, target, kernel=kernel.name)
    gpu = parse_executable(blob, target.binary_format)
    export = gpu.export(iface.entry)
    registers = spills = None
    if target.binary_format == "ptx":
        ptx = gpu.image if isinstance(gpu.image, str) else gpu.image.decode()
        _check_ptx(ptx, trace)
        if prefetch is not None:
            ptx = with_l2_prefetch(ptx, prefetch, cs.scheduling.loc)
        if bound is not None:
            ptx = with_min_workgroups(ptx, bound, cs.scheduling.loc)
        if bound is not None or prefetch is not None:
            dump_file(kernel.name, target, "ptx", ptx.encode())  # the dump shows what ptxas assembles
        image, fmt = ptx.encode(), "ptx"
        if find_ptxas() is not None:
            image, info = assemble(ptx, target.arch)
            fmt, registers, spills = "cubin", info.registers, info.spill_stores + info.spill_loads
    else:
        assert isinstance(gpu.image, bytes), "parse_executable returns an HSACO image as bytes"
        image, fmt = gpu.image, "hsaco"
    meta = KernelMetadata(
        kernel=kernel.name,
        entry=iface.entry,
        block=export.block,
        shared_bytes=export.shared_bytes,
        args=tuple(ArgSpec(*b) for b in iface.bindings),
        constants=iface.constants,
        static_symbols=tuple((str(k), int(v)) for k, v in cs.subs.items() if sympy.sympify(v).is_Integer),
        grid=iface.grid,
        divisibility=iface.divisibility,
        alignment_bytes=iface.alignment_bytes,
        source=str(SourceLoc(trace.loc.filename, trace.loc.line)),
        registers=registers,
        spills=spills,
        scalars=iface.scalars,
        signature=tuple(trace.signature),
        tensor_maps=tuple(TensorMapSpec(m.arg, m.dtype, m.box, m.swizzle) for m in iface.tensor_maps),
        bounds_checks=iface.bounds_checks,
        cluster=iface.cluster,
    )
    return Artifact(target=target_name, format=fmt, binary=bytes(image), metadata=meta, mlir=iface.located_mlir)


def _check_ptx(ptx: str, trace) -> None:
    from .codegen.ptx_check import wgmma_descriptor_violations, wgmma_fence_violations

    if "wgmma.mma_async" not in ptx:
        return
    bad = wgmma_fence_violations(ptx)
    if bad:
        raise CodegenError(
            trace.loc,
            message=f"LLVM placed {len(bad)} writes of wgmma accumulator registers "
            f"between wgmma.fence and the wgmma (first: {bad[0]!r}); the kernel would read "
            "undefined registers",
        )
    bad = wgmma_descriptor_violations(ptx)
    if bad:
        raise CodegenError(
            trace.loc,
            message=f"{len(bad)} wgmma matrix descriptors are not built as a 32-bit "
            f"low word ORed with a constant high word (first: {bad[0]!r}); ptxas 12.9 "
            "miscompiled the high word of such descriptors (codegen/ptx_check.py)",
        )


def _check_subs(name: str, subs: dict, source: str, constraints: list) -> None:
    """Every ``subs`` key must be a symbol the kernel's signature, body or constraints use: a misspelt or
    foreign key would otherwise be ignored and the symbol it meant left dynamic."""
    words = set(re.findall(r"[A-Za-z_]\w*", source + " ".join(map(repr, constraints))))
    unknown = sorted(str(k) for k in subs if str(k) not in words)
    if unknown:
        raise OptionError(
            option="subs",
            message=f"{', '.join(unknown)} {'is not a symbol' if len(unknown) == 1 else 'are not symbols'} of "
            f"kernel {name!r} (its shapes, body and constraints); remove {'it' if len(unknown) == 1 else 'them'}",
        )


def _check_strided(name: str, strided: dict | None, trace) -> None:
    """``strided`` names tensor arguments, each with a cap of 0 (inner-strided) or a power of two."""
    if strided is None:
        return
    tensors = [a.name for a in trace.args]
    for arg, cap in strided.items():
        if arg not in tensors or not isinstance(cap, int) or cap < 0 or cap & (cap - 1):
            raise OptionError(
                option="strided",
                message=f"{arg!r}: {cap!r} — expected tensor arguments of kernel {name!r} ({', '.join(tensors)}) "
                "each with 0 (its innermost stride a launch value) or a power of two (its longest run)",
            )


def _require_mlir() -> None:
    """The MLIR compiler is an optional dependency: its absence is a ``ToolchainError`` saying how to
    install it, not an import error from deep inside the code generator."""
    from importlib.util import find_spec

    try:
        found = find_spec("iree.compiler") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise ToolchainError(
            message="wc.compile needs the MLIR compiler: pip install 'iree-base-compiler==3.13.0' "
            "(or pip install 'wavec[compile]')"
        )


_SETTLED = False  # whether this process has frozen its objects once


def _settle_garbage(built: bool) -> None:
    """After a build (and once per process after a cache hit), when ``WAVEC_GC_FREEZE`` is on: one full
    collection, then ``gc.freeze()``.  Compiling imports the MLIR bindings and leaves tens of thousands of
    long-lived objects; the first full collection that CPython's thresholds trigger later walks all of
    them (and torch's) and stalls whatever call it lands in.  Frozen objects are still freed by reference
    counting; only a cycle among them is never collected (docs/performance.md, "Host path")."""
    global _SETTLED
    if not (built or not _SETTLED) or not knobs.gc_freeze:
        return
    gc.collect()
    gc.freeze()
    _SETTLED = True


def _key(kernel: WaveKernel, source: str, subs: dict, target: str, check_bounds: bool, run_caps, strided) -> str:
    """The disk cache key: the traced source and its definition site, every compile option, the target
    and the versions of wavec, the MLIR compiler and ptxas."""
    return cache_key(
        kernel_source=source,
        options={
            "constraints": [repr(c) for c in kernel.constraints],
            "subs": {str(k): v for k, v in subs.items()},
            "check_bounds": check_bounds,
            **({"run_caps": sorted(run_caps.items())} if run_caps else {}),
            **({"strided": sorted(strided.items())} if strided is not None else {}),
        },
        target=target,
        versions={
            "wavec": __version__,
            "iree": _iree_version(),
            "ptxas": _assembler_version() if target.startswith("sm_") else "n/a",
        },
    )


def compile(
    kernel: WaveKernel,
    subs: dict | None = None,
    *,
    target: str | None = None,  # noqa: A001
    backend: str | None = None,
    print_ir_after: Sequence[str] = (),
    cache: bool = True,
    torch_op: str | None = None,
    run_caps: dict[str, int] | None = None,
    strided: dict[str, int] | None = None,
):
    """Compile ``kernel`` with the symbols in ``subs`` bound; unbound symbols stay dynamic.

    ``backend``: "cuda", "rocm" or "emulator" (default: cuda when a GPU is visible, else the emulator;
    ``WAVEC_BACKEND`` forces one).  ``target``: "sm_80", "sm_90", "sm_90a", "gfx942" (default: the
    visible GPU).  ``print_ir_after``: pass names, "trace", "mlir" or "all".  ``torch_op``: "ns::op" also
    registers the kernel as ``torch.ops.ns.op`` (outputs allocated and returned) and ``ns::op_out``
    (outputs passed in); see ``docs/torch_ops.md``.  Registration is not part of the cache key.
    ``run_caps``: {dynamic symbol: longest access run along it}, a narrow variant; the returned kernel
    compiles these itself, on the first launch with sizes the vector width does not divide
    (docs/sizes_and_strides.md).  ``strided``: None (dense row-major tensors) or a strided variant, every
    tensor's outer strides launch values, {argument: cap} capping runs along its innermost dim (0: its
    innermost stride a launch value too, read element by element); the returned kernel compiles it itself
    on the first launch with a non-contiguous or misaligned tensor.
    """
    from .runtime.kernel import CompiledKernel

    if not isinstance(kernel, WaveKernel):
        raise KernelDefinitionError(message=f"wc.compile expects a @wc.wave kernel, got {type(kernel).__name__}")
    if isinstance(print_ir_after, str):
        print_ir_after = [print_ir_after]
    backend = backend or default_backend()
    if backend not in BACKENDS:
        raise UnsupportedBackendError(backend=backend, expected=list(BACKENDS))
    target = target or default_target(backend)
    subs = dict(subs or {})
    stats = CompileStats()
    t0 = time.perf_counter()
    trace = kernel.trace()
    subs.update(trace.meta["debug_subs"])  # the iteration slots of wc.debug_log
    cs = ConstraintSet(kernel.constraints, subs)
    if backend == "emulator" and cs.scheduling.cluster != (1, 1):
        raise ConstraintError(
            cs.scheduling.loc,
            message=f"SchedulingConstraint(cluster={cs.scheduling.cluster}): the emulator runs workgroups one "
            "after another and has no thread-block clusters (TMA multicast, remote mbarriers); compile for "
            "backend='cuda' (target sm_90a), or leave cluster=(1, 1) to emulate",
        )
    # The definition site is part of the key: the artifact's error messages name it.
    source = f"{format_trace(trace)}\n# defined at {trace.loc.filename}:{trace.loc.line}"
    _check_subs(kernel.name, subs, source, kernel.constraints)
    _check_strided(kernel.name, strided, trace)
    check_bounds = knobs.check_bounds
    key = _key(kernel, source, subs, target, check_bounds, run_caps, strided)
    store = default_cache() if cache and not knobs.cache_disable else None
    # printing or dumping IR needs a real compilation, so those never read the cache
    artifact = store.get(key) if store is not None and not print_ir_after and not knobs.dump_dir else None
    stats.seconds["trace"] = time.perf_counter() - t0
    if artifact is None:
        _require_mlir()  # here, not before the cache: a cache hit imports no compiler
        caps, layout = dict(run_caps or {}), None if strided is None else dict(strided)
        artifact = _build(kernel, trace, cs, target, print_ir_after, check_bounds, caps, layout)
        if store is not None:
            store.put(key, artifact)
    else:
        stats.cached = True
    stats.seconds["total"] = time.perf_counter() - t0
    _settle_garbage(not stats.cached)
    compiled = CompiledKernel(artifact, backend, stats)
    # sizes the vector width does not divide launch a narrow variant, non-dense tensors a strided one
    compiled.narrow = functools.partial(compile, kernel, subs, target=target, backend=backend, cache=cache)
    compiled.run_caps, compiled.strided = dict(run_caps or {}), None if strided is None else dict(strided)
    compiled.debug = tuple(trace.meta["debug_logs"])
    if torch_op is not None:
        from .runtime.torch_op import register_torch_op

        register_torch_op(compiled, torch_op)
    return compiled
