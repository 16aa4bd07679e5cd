"""The legality filter of the autotuner: which symbol bindings can compile and run on a target.

Derived from the kernel's constraints and the target, never written per kernel (DESIGN §9):

* the constraints resolve under ``subs`` (``ConstraintSet``: positive tiles, wave tiles divide workgroup
  tiles, threads per block <= 1024 and a multiple of the wave size) and the wave size is the target's;
* the matrix instruction runs on this target's vendor, every wave tile of an ``mma``'s M and N is a
  multiple of the instruction tile (m16n8k16: M % 16, N % 8; MFMA 16x16x16 / 32x32x8) and the K loop
  tile a multiple of its K;
* every operand staged through shared memory can be copied by the workgroup the way
  ``passes/infer_indices.py::copy_layout`` spreads it (at least one element per thread, rows of runs that
  split evenly among the threads);
* shared memory, sum over staged operands of stages x rows x (row + pad) x bytes (pad as
  ``passes/swizzle_shared.py``, stages as ``passes/pipeline_loops.py``), fits ``target.max_shared_bytes``.

After compiling, :func:`reject_after_compile` rejects what ``ptxas`` reports as spilling or as using
more registers than allowed.
"""

from __future__ import annotations

import functools
import weakref

from ..errors import ConstraintError, WavecError
from ..frontend.constraints import ConstraintSet
from ..frontend.kernel import WaveKernel
from ..frontend.tracing import capture_root
from ..passes.swizzle_shared import row_pad, xor_swizzle

ACCESS_BYTES = 16  # infer_indices.ACCESS_BYTES: one global->shared run is at most 16 bytes
REGISTER_FILE = 65536  # 32-bit registers per SM (sm_80, sm_90)

_TRACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _target(target):
    from ..target import get_target

    return get_target(target) if isinstance(target, str) else target


def _trace(kernel: WaveKernel):
    tr = _TRACES.get(kernel)
    if tr is None:
        tr = _TRACES[kernel] = kernel.trace()
    return tr


def _structure(kernel: WaveKernel):
    """(mma dims [(m, n, k)], staged operands [(dims, elem_bytes, user-promoted, mma operand)]) of the traced
    kernel."""
    from ..frontend.ops import MMA, Read

    tr = _trace(kernel)
    mmas, staged = [], []
    root = tr.graph
    for g in tr.graphs():
        for n in g.nodes:
            op = n.meta.get("op")
            if op is MMA:
                mmas.append(MMA.dims(n))
            elif op is Read and g is not root:
                mem = capture_root(n.args[0])
                if mem.meta.get("role") != "memory":
                    continue
                by_mma = any(u.meta.get("op") is MMA and u.args.index(n) in (0, 1) for u in n.users)
                if mem.meta.get("promote") or by_mma:
                    ttype = n.meta["type"]
                    staged.append((ttype.dims, ttype.dtype.bytes, bool(mem.meta.get("promote")), by_mma))
    return mmas, staged


def copy_split(extents: list[int], threads: int, elem_bytes: int) -> tuple[int, int] | str:
    """(elements per run, runs per row) of ``copy_layout`` for a tile, or the reason it cannot split."""
    last, total = extents[-1], 1
    for e in extents:
        total *= e
    shape = "x".join(map(str, extents))
    if total < threads:
        return f"the {shape} tile has fewer elements ({total}) than the {threads} threads that copy it"
    ept = max(1, min(ACCESS_BYTES // elem_bytes, last))
    while ept > 1 and (total // ept < threads or last % ept):
        ept //= 2
    per_row = last // ept
    if threads % per_row and per_row % threads:
        return f"{threads} threads cannot split rows of {per_row} runs of {ept} elements of the {shape} tile"
    return ept, per_row


def _core_split(dims, extents: list[int], threads: int, elem_bytes: int) -> tuple | str:
    """The copy split of a wgmma operand tile (``core_copy_layout``), or why there is none."""
    from ..indexing.shared_layout import core_copy_layout

    layout = core_copy_layout(tuple(dims), tuple(extents), threads, elem_bytes)
    return layout if isinstance(layout, str) else layout.tile


def shared_bytes(kernel: WaveKernel, subs: dict, target) -> int:
    """Shared memory the compiled kernel will allocate (the emitter's ``shared_bytes``)."""
    tgt = _target(target)
    cs = ConstraintSet(kernel.constraints, _symbols(subs))
    return _shared(kernel, cs, tgt)


def _stages(cs: ConstraintSet, tgt) -> int:
    mma = cs.mma_type
    pipelined = cs.num_stages >= 2 and (mma is None or mma.spec.vendor == "nvidia") and tgt.name.startswith("sm_")
    return cs.num_stages if pipelined else 1


def _staged_tiles(staged, cs: ConstraintSet):
    """(dims, element bytes, workgroup tile extents, mma operand) of each operand that will be staged in
    shared memory."""
    for dims, nbytes, forced, by_mma in staged:
        if not forced and not cs.scheduling.promote_operands:
            continue
        extents = [cs.workgroup_extent(d) for d in dims]
        if all(e is not None for e in extents):
            yield dims, nbytes, extents, by_mma


def _xor_swizzled(cs: ConstraintSet, tgt, extents: list[int], nbytes: int, by_mma: bool) -> bool:
    """Whether ``swizzle_shared`` gives an mma.sync operand tile an XOR swizzle (no padding): ldmatrix
    reads it (an NVIDIA mma.sync operand), its copy moves 16-byte runs, and ``xor_swizzle`` has a width
    for it."""
    mma = cs.mma_type
    if not by_mma or cs.group_waves > 1 or mma is None or mma.spec.vendor != "nvidia" or not tgt.name.startswith("sm_"):
        return False
    split = copy_split(extents, cs.threads, nbytes)
    return (
        not isinstance(split, str)
        and split[0] * nbytes == ACCESS_BYTES
        and xor_swizzle(tuple(extents), nbytes, cs.scheduling.operand_swizzle) is not None
    )


def _shared(kernel: WaveKernel, cs: ConstraintSet, tgt) -> int:
    _mmas, staged = _structure(kernel)
    total = 0
    tma = (
        cs.group_waves > 1
        and tgt.name == "sm_90a"
        and _stages(cs, tgt) >= 2
        and (cs.scheduling.async_copy != "cp.async" and cs.scheduling.operand_swizzle in ("auto", "128B"))
    )
    for _dims, nbytes, extents, by_mma in _staged_tiles(staged, cs):
        rows = 1
        for e in extents[:-1]:
            rows *= e
        # wgmma tiles (core matrices or swizzled) and XOR-swizzled mma.sync tiles are not padded
        unpadded = cs.group_waves > 1 or _xor_swizzled(cs, tgt, extents, nbytes, by_mma)
        pad = 0 if unpadded else row_pad(extents[-1], nbytes)
        total += _stages(cs, tgt) * rows * (extents[-1] + pad) * nbytes
        tma &= len(extents) == 2 and rows <= 256 and extents[-1] * nbytes % 128 == 0  # as passes/hopper/pipeline_tma.py
    # TMA's mbarriers take one 1024-byte slot (the swizzled tiles after them stay 1024-byte aligned)
    return total + (1024 if tma and total else 0)


def _symbols(subs: dict) -> dict:
    from ..frontend.symbols import sym

    return {sym(k) if isinstance(k, str) else k: v for k, v in subs.items()}


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
    if cs.threads % tgt.threads_per_wave or cs.threads > 1024:
        return False, f"{cs.threads} threads per block (limit 1024, multiple of {tgt.threads_per_wave})"
    try:
        mmas, staged = _structure(kernel)
    except WavecError as e:
        return False, f"kernel does not trace: {e}"
    if mmas:
        if cs.mma_type is None:
            return False, "wc.mma needs HardwareConstraint(mma_type=...)"
        spec = cs.mma_type.spec
        if (spec.vendor == "nvidia") != tgt.is_nvidia:
            return False, f"{cs.mma_type.name} is a {spec.vendor} instruction; {tgt.name} cannot run it"
        if spec.group_waves > 1 and tgt.name != "sm_90a":
            return False, f"{cs.mma_type.name} (wgmma) needs target sm_90a, not {tgt.name}"
        for m, n, k in mmas:
            for dim, inst, what in ((m, spec.m, "M"), (n, spec.n, "N")):
                ext = cs.wave_extent(dim)
                if ext is not None and what == "N" and spec.group_waves > 1:  # wgmma: N from the wave tile
                    inst = spec.instruction_n(ext) or ext + 1
                if ext is not None and ext % inst:
                    return False, (
                        f"wave tile {ext} of {dim} is not a multiple of the {cs.mma_type.name} "
                        f"instruction's {what} = {inst}"
                    )
            ext = cs.workgroup_extent(k)
            if ext is not None and ext % spec.k:
                return False, (
                    f"loop tile {ext} of {k} is not a multiple of the {cs.mma_type.name} instruction's K = {spec.k}"
                )
    for dims, nbytes, extents, _by_mma in _staged_tiles(staged, cs):
        split = (
            copy_split(extents, cs.threads, nbytes)
            if cs.group_waves == 1 or len(extents) != 2
            else _core_split(dims, extents, cs.threads, nbytes)
        )
        if isinstance(split, str):
            return False, f"copy of {'x'.join(map(str, dims))} to shared memory: {split}"
    smem = _shared(kernel, cs, tgt)
    if smem > tgt.max_shared_bytes:
        return False, (
            f"{smem} bytes of shared memory (with {_stages(cs, tgt)} stages) exceed {tgt.name}'s {tgt.max_shared_bytes}"
        )
    return True, ""


def reject_after_compile(metadata, max_registers: int = 255) -> str | None:
    """The reason to drop a compiled configuration (spills, too many registers), or None to keep it.
    ``metadata`` is a ``KernelMetadata`` or a dict with ``registers``, ``spills`` and ``block``."""
    get = metadata.get if isinstance(metadata, dict) else functools.partial(getattr, metadata)
    spills, regs, block = get("spills"), get("registers"), get("block")
    if spills:
        return f"ptxas reports {spills} spill loads/stores"
    if regs is not None and regs > max_registers:
        return f"{regs} registers per thread exceed {max_registers}"
    if regs is not None and block:
        threads = 1
        for b in block:
            threads *= b
        if regs * threads > REGISTER_FILE:
            return f"{regs} registers x {threads} threads exceed the register file ({REGISTER_FILE})"
    return None


def ctas_per_sm(metadata, target, max_threads_per_sm: int = 2048, max_ctas: int = 32) -> int:
    """Workgroups resident per SM, from registers, shared memory and threads (at least 1)."""
    tgt = _target(target)
    get = metadata.get if isinstance(metadata, dict) else functools.partial(getattr, metadata)
    threads = 1
    for b in get("block") or (128,):
        threads *= b
    limits = [max_ctas, max_threads_per_sm // threads]
    regs = get("registers")
    if regs:
        per_warp = -(-regs * 32 // 256) * 256  # allocation granularity: 256 registers per warp
        limits.append(REGISTER_FILE // (per_warp * -(-threads // 32)))
    smem = get("shared_bytes") or 0
    if smem:
        limits.append(tgt.max_shared_bytes // (smem + 1024))  # 1 KiB reserved per block (sm_80+)
    return max(1, min(limits))
