"""The legality filter of the autotuner: which symbol bindings can compile and run on a target.

Derived from the kernel's constraints, the target and the compiler itself, never written per kernel
(DESIGN §9): the constraints resolve under ``subs`` and the wave size is the target's; the matrix
instruction runs on the target's vendor and divides the wave and K tiles; the pass pipeline itself
(``front_half``, no MLIR) accepts the configuration, and its result gives the shared memory and threads.
After compiling, :func:`reject_after_compile` rejects spills and too many registers.
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass

from ..errors import ConstraintError, WavecError
from ..frontend.constraints import ConstraintSet
from ..frontend.kernel import WaveKernel

REGISTER_FILE = 65536  # 32-bit registers per SM (sm_80, sm_90)
MBARRIER_SLOT = 1024  # TMA's mbarriers take one 1024-byte slot (the swizzled tiles after it stay aligned)

_TRACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _target(target):
    from ..target import get_target

    return get_target(target) if isinstance(target, str) else target


def _mma_dims(kernel: WaveKernel) -> list[tuple]:
    """(m, n, k) of every ``wc.mma`` of the traced kernel (the trace cached per kernel: passes never see it)."""
    from ..frontend.ops import MMA

    tr = _TRACES.get(kernel)
    if tr is None:
        tr = _TRACES[kernel] = kernel.trace()
    return [MMA.dims(n) for g in tr.graphs() for n in g.nodes if n.meta.get("op") is MMA]


@dataclass(frozen=True, slots=True)
class FrontHalf:
    """What the pass pipeline made of one configuration (``front_half``)."""

    shared_bytes: int
    threads: int  # per block, with a producer warpgroup
    stages: int  # the deepest pipeline's
    copies: tuple  # (elements per run, runs per thread) of each cp.async copy into shared memory


def _allocation_bytes(node) -> int:
    tile = list(node.kwargs["tile"].values())
    layout = node.kwargs.get("smem_layout")
    shape = layout.memref_shape(tuple(tile)) if layout is not None else [*tile[:-1], tile[-1] + node.kwargs["pad"]]
    return int(node.kwargs.get("stages", 1)) * math.prod(int(x) for x in shape) * node.meta["type"].dtype.bytes


def front_half(kernel: WaveKernel, cs: ConstraintSet, target_name: str) -> FrontHalf:
    """Every pass of the pipeline (no MLIR) on a fresh trace of ``kernel`` under ``cs``, and the numbers the
    legality filter needs read off the result; a pass's ``WavecError`` propagates."""
    from ..frontend.ops import Allocate, AsyncCopy
    from ..frontend.ops_hopper import MBarrierInit
    from ..passes.context import PassContext
    from ..passes.pipeline import run_pipeline

    trace = kernel.trace()
    ctx = PassContext.build(trace, cs, target_name)
    run_pipeline(trace, ctx)
    nodes = [n for g in trace.graphs() for n in g.nodes]
    allocs = [n for n in nodes if n.meta.get("op") is Allocate]
    total = sum(_allocation_bytes(n) for n in allocs)
    if total and any(n.meta.get("op") is MBarrierInit for n in nodes):
        total += MBARRIER_SLOT
    copies = tuple(  # coarsen_loads' runs of each cp.async copy: (elements per run, runs per thread)
        (max(length for _f, length, _o in n.meta["accesses"]), len(n.meta["accesses"]))
        for n in nodes
        if n.meta.get("op") is AsyncCopy and n.meta.get("accesses")
    )
    stages = max((int(n.kwargs.get("stages", 1)) for n in allocs), default=1)
    return FrontHalf(total, cs.threads + ctx.producer_threads, stages, copies)


def shared_bytes(kernel: WaveKernel, subs: dict, target) -> int:
    """Shared memory the compiled kernel will allocate, as the pass pipeline leaves it."""
    return front_half(kernel, ConstraintSet(kernel.constraints, _symbols(subs)), _target(target).name).shared_bytes


def _symbols(subs: dict) -> dict:
    from ..frontend.symbols import sym

    return {sym(k) if isinstance(k, str) else k: v for k, v in subs.items()}


def _instruction_fits(kernel: WaveKernel, cs: ConstraintSet, tgt) -> str:
    """Why the kernel's MMAs cannot run as tiled on ``tgt``, or "" (the instruction's shape and vendor)."""
    mmas = _mma_dims(kernel)
    if not mmas:
        return ""
    if cs.mma_type is None:
        return "wc.mma needs HardwareConstraint(mma_type=...)"
    spec = cs.mma_type.spec
    if (spec.vendor == "nvidia") != tgt.is_nvidia:
        return f"{cs.mma_type.name} is a {spec.vendor} instruction; {tgt.name} cannot run it"
    if spec.group_waves > 1 and tgt.name != "sm_90a":
        return f"{cs.mma_type.name} (wgmma) needs target sm_90a, not {tgt.name}"
    for m, n, k in mmas:
        for dim, inst, what in ((m, spec.m, "M"), (n, spec.n, "N")):
            ext = cs.wave_extent(dim)
            if ext is not None and what == "N" and spec.group_waves > 1:  # wgmma: N from the wave tile
                inst = spec.instruction_n(ext) or ext + 1
            if ext is not None and ext % inst:
                name = cs.mma_type.name
                return f"wave tile {ext} of {dim} is not a multiple of the {name} instruction's {what} = {inst}"
        ext = cs.workgroup_extent(k)
        if ext is not None and ext % spec.k:
            return f"loop tile {ext} of {k} is not a multiple of the {cs.mma_type.name} instruction's K = {spec.k}"
    return ""


def legal(kernel: WaveKernel, subs: dict, target="sm_90") -> tuple[bool, str]:
    """``(True, "")`` when ``kernel`` with ``subs`` passes the pre-compile filter on ``target``, else
    ``(False, reason)``.  ``subs`` keys are symbols or their names; ``target`` a name or ``Target``."""
    tgt = _target(target)
    try:
        cs = ConstraintSet(kernel.constraints, _symbols(subs))
    except ConstraintError as e:
        return False, str(e)
    if cs.threads_per_wave != tgt.threads_per_wave:
        return False, f"waves of {cs.threads_per_wave} threads, but {tgt.name} runs waves of {tgt.threads_per_wave}"
    try:
        why = _instruction_fits(kernel, cs, tgt)
    except WavecError as e:
        return False, f"kernel does not trace: {e}"
    if why:
        return False, why
    try:
        front = front_half(kernel, cs, tgt.name)
    except Exception as e:  # noqa: BLE001 - what a pass rejects is illegal, with the pass's reason
        return False, " ".join(f"{type(e).__name__}: {e}".split())[:500]
    if front.threads % tgt.threads_per_wave or front.threads > 1024:
        return False, f"{front.threads} threads per block (limit 1024, multiple of {tgt.threads_per_wave})"
    if front.shared_bytes > tgt.max_shared_bytes:
        return False, (
            f"{front.shared_bytes} bytes of shared memory (with {front.stages} stages) exceed "
            f"{tgt.name}'s {tgt.max_shared_bytes}"
        )
    return True, ""


def reject_after_compile(metadata, max_registers: int = 255) -> str | None:
    """Why to drop a compiled configuration (spills, too many registers), or None; ``metadata`` is a
    ``KernelMetadata`` or a dict with ``registers``, ``spills`` and ``block``."""
    get = metadata.get if isinstance(metadata, dict) else functools.partial(getattr, metadata)
    spills, regs, block = get("spills"), get("registers"), get("block")
    if spills:
        return f"ptxas reports {spills} spill loads/stores"
    if regs is not None and regs > max_registers:
        return f"{regs} registers per thread exceed {max_registers}"
    if regs is not None and block:
        threads = math.prod(block)
        if regs * threads > REGISTER_FILE:
            return f"{regs} registers x {threads} threads exceed the register file ({REGISTER_FILE})"
    return None


def ctas_per_sm(metadata, target, max_threads_per_sm: int = 2048, max_ctas: int = 32) -> int:
    """Workgroups resident per SM, from registers, shared memory and threads (at least 1)."""
    tgt = _target(target)
    get = metadata.get if isinstance(metadata, dict) else functools.partial(getattr, metadata)
    threads = math.prod(get("block") or (128,))
    limits = [max_ctas, max_threads_per_sm // threads]
    regs = get("registers")
    if regs:
        per_warp = -(-regs * 32 // 256) * 256  # allocation granularity: 256 registers per warp
        limits.append(REGISTER_FILE // (per_warp * -(-threads // 32)))
    smem = get("shared_bytes") or 0
    if smem:
        limits.append(tgt.max_shared_bytes // (smem + 1024))  # 1 KiB reserved per block (sm_80+)
    return max(1, min(limits))
