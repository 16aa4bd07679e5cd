"""``decompose(kernel, *shapes)``: a compiled kernel's launch as tasks (workgroups) and each one's demand.

Requires: a ``CompiledKernel`` or an ``Artifact`` (its emitted MLIR and launch metadata); the launch's tensor
shapes (tuples or anything with ``.shape``, all bindings or the inputs only, in binding order) and integer
scalars by name.  Integer tensors given as arrays (numpy, torch) also give their values: routing, lengths
and tables then decide loop bounds and skipped blocks exactly.  No GPU, no MLIR bindings, no compiler.

Guarantees: the :class:`Decomposition` has one task per workgroup of the launch grid (x fastest), and per
task the demand that :mod:`wavec.perf.demand` defines, counted by evaluating the emitted MLIR for every
workgroup, thread and loop iteration (:mod:`wavec.perf.evaluate`): loop trip counts, masked tails and
skipped blocks come from the launch's sizes, exactly as the kernel computes them.  The MLIR is the ground
truth because it is what runs (after expansion, scheduling, pipelining and masking), unlike the traced
graph whose costs a lowering can still change.  An op the rules do not know is listed in ``notes``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..abi import SMS_NAME
from ..errors import ArgumentError, PerfError
from ..runtime.artifact import ArgSpec, Artifact
from ..runtime.binding import grid_for
from .demand import Demand
from .evaluate import Walker
from .gpus import GPUSpec
from .gpus import gpu as find_gpu
from .mlir_text import DTYPE_BYTES, Op, parse_kernel

__all__ = ["Decomposition", "decompose", "launch_symbols", "launch_tensors"]

CHUNK_ELEMENTS = 1 << 15  # workgroups x threads evaluated at once


@dataclass
class Decomposition:
    """A launch as tasks.  ``demand[key][t]``: task ``t``'s demand (keys in :mod:`wavec.perf.demand`);
    ``trips[loop][t]``: the trip count of each top-level loop for task ``t`` (the longest over its threads);
    ``footprint``: bytes of the tensors read and written (each once: what an ideal cache moves; for a
    data-dependent launch a read tensor counts only the leading-dimension slices its loads touched);
    ``tensors``: every binding's (shape, dtype, is output) whose shape the launch determines."""

    kernel: str
    target: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    wave: int
    shared_bytes: int
    registers: int | None
    demand: dict[str, np.ndarray]
    trips: dict[str, np.ndarray]
    footprint: dict[str, int]
    symbols: dict[str, int]
    notes: list[str] = field(default_factory=list)
    tensors: list[tuple[tuple[int, ...], str, bool]] = field(default_factory=list)

    @property
    def tasks(self) -> int:
        return math.prod(self.grid)

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    def per_task(self, prefix: str) -> np.ndarray:
        """Each task's demand summed over the keys starting with ``prefix`` (``"tensor"``, ``"xu:"``)."""
        out = np.zeros(self.tasks)
        for key, values in self.demand.items():
            if key.startswith(prefix):
                out = out + values
        return out

    def total(self, prefix: str) -> float:
        return float(self.per_task(prefix).sum())

    def totals(self) -> dict[str, float]:
        return {k: float(v.sum()) for k, v in sorted(self.demand.items())}


def _specs(artifact: Artifact, shapes: tuple[Any, ...]) -> list[ArgSpec]:
    meta = artifact.metadata
    inputs = [a for a in meta.args if not a.is_output]
    if len(shapes) == len(meta.args):
        return list(meta.args)
    if len(shapes) == len(inputs):
        return inputs
    raise ArgumentError(
        kernel=meta.kernel,
        arg="shapes",
        message=f"give the shapes of all {len(meta.args)} tensors or of the {len(inputs)} inputs, got {len(shapes)}",
    )


def _data(artifact: Artifact, shapes: tuple[Any, ...]) -> dict[int, np.ndarray]:
    """The values of the integer tensors given as arrays (numpy, or torch on any device), by binding."""
    out: dict[int, np.ndarray] = {}
    for spec, given in zip(_specs(artifact, shapes), shapes, strict=True):
        if not hasattr(given, "dtype"):
            continue
        array = np.asarray(given.detach().cpu().numpy() if hasattr(given, "detach") else given)
        if array.dtype.kind in "iu":
            out[artifact.metadata.args.index(spec)] = array
    return out


def launch_symbols(artifact: Artifact, shapes: tuple[Any, ...], scalars: Mapping[str, Any]) -> dict[str, int]:
    """Symbol values bound by the shapes (and the artifact's static symbols), checked for consistency."""
    meta = artifact.metadata
    specs = _specs(artifact, shapes)
    symbols: dict[str, int] = dict(meta.static_symbols)
    for spec, given in zip(specs, shapes, strict=True):
        shape = tuple(int(d) for d in (given.shape if hasattr(given, "shape") else given))
        if len(shape) != len(spec.shape):
            message = f"rank {len(spec.shape)} expected, got {shape}"
            raise ArgumentError(kernel=meta.kernel, arg=spec.name, message=message)
        for entry, size in zip(spec.shape, shape, strict=True):
            known = entry if isinstance(entry, int) else symbols.get(entry)
            if known is not None and known != size:
                message = f"dimension {entry} is {known}, got {size}"
                raise ArgumentError(kernel=meta.kernel, arg=spec.name, message=message)
            if isinstance(entry, str):
                symbols[entry] = size
    for name, value in scalars.items():
        if isinstance(value, int | np.integer):
            symbols[name] = int(value)
    return symbols


def _footprint(
    artifact: Artifact, symbols: dict[str, int], rules: Demand, views: Sequence[int] | None = None
) -> dict[str, int]:
    """Bytes read and written; inputs that view one buffer (``views``) count once, as the largest view."""
    write = 0
    reads: dict[int, int] = {}
    for binding, spec in enumerate(artifact.metadata.args):
        dims = [int(d) if isinstance(d, int) else symbols.get(d) for d in spec.shape]
        if any(d is None for d in dims):
            continue
        size = math.prod(int(d) for d in dims if d is not None) * DTYPE_BYTES.get(spec.dtype, 4)
        if not spec.is_output and binding in rules.touched and binding not in rules.untracked and dims:
            size = size // max(1, int(dims[0] or 1)) * len(rules.touched[binding])
        if spec.is_output:
            write += size
        else:
            group = views[binding] if views is not None and binding < len(views) else binding
            reads[group] = max(reads.get(group, 0), size)
    return {"read": sum(reads.values()), "write": write}


def launch_tensors(artifact: Artifact, symbols: Mapping[str, int]) -> list[tuple[tuple[int, ...], str, bool]]:
    """Every binding's (shape, dtype, is output) whose shape ``symbols`` determine (``Decomposition.tensors``)."""
    out = []
    for spec in artifact.metadata.args:
        dims = [d if isinstance(d, int) else symbols.get(d) for d in spec.shape]
        if all(d is not None for d in dims):
            out.append((tuple(int(d) for d in dims if d is not None), spec.dtype, spec.is_output))
    return out


def _grid(artifact: Artifact, symbols: dict[str, int], sms: int | None) -> tuple[int, int, int]:
    meta = artifact.metadata
    if any(SMS_NAME in g for g in meta.grid):
        if sms is None:
            raise ArgumentError(
                kernel=meta.kernel, arg="gpu", message="a persistent grid is sized by the SM count: pass gpu="
            )
        symbols = {**symbols, SMS_NAME: sms}
    return grid_for(meta, symbols)


def _allocated_shared(ops: list[Op]) -> int:
    """Bytes of the workgroup-memory allocations (a ROCm artifact's metadata records no shared size)."""
    total = 0
    for op in ops:
        if op.name == "memref.alloc" and "workgroup" in op.text:
            m = re.search(r"memref<((?:\d+x)+)(\w+)", op.text)
            if m:
                dims = [int(d) for d in m.group(1).split("x") if d]
                total += math.prod(dims) * DTYPE_BYTES.get(m.group(2), 4)
        for region in op.regions:
            total += _allocated_shared(region)
    return total


def _wave(artifact: Artifact) -> int:
    m = re.search(r"subgroup_size = (\d+)", artifact.mlir)
    return int(m.group(1)) if m else (64 if artifact.target.startswith("gfx") else 32)


def decompose(
    kernel: Any, *shapes: Any, gpu: str | GPUSpec | None = None, views: Sequence[int] | None = None, **scalars: Any
) -> Decomposition:
    """The tasks of ``kernel`` launched on tensors of ``shapes`` (see the module docstring); ``gpu`` (a name
    or spec) sizes a persistent grid by its SM count; ``views``: per binding, the first binding that views
    the same memory (``trace.storage_groups``), so that inputs read through several views of one buffer
    count once in the footprint."""
    artifact: Artifact = kernel if isinstance(kernel, Artifact) else kernel.artifact
    meta = artifact.metadata
    symbols = launch_symbols(artifact, shapes, scalars)
    grid = _grid(artifact, symbols, None if gpu is None else find_gpu(gpu).sms)
    block = meta.block
    constants = [symbols.get(name) for name in meta.constants]
    map_binding = len(meta.args) if meta.tensor_maps else None
    rules = Demand(meta.tensor_maps, map_binding, _wave(artifact), _data(artifact, shapes))
    ops = parse_kernel(artifact.mlir)
    tasks = math.prod(grid)
    if tasks == 0:
        raise PerfError(message=f"{meta.kernel}: the launch has an empty grid {grid}")
    chunk = max(1, CHUNK_ELEMENTS // math.prod(block))
    demand: dict[str, np.ndarray] = {}
    trips: dict[str, np.ndarray] = {}
    notes: set[str] = set()
    for first in range(0, tasks, chunk):
        count = min(chunk, tasks - first)
        walker = Walker(ops, constants, grid, block, first, count, rules.count, rules.value_of)
        walker.run()
        for key, values in walker.counts.items():
            demand.setdefault(key, np.zeros(tasks))[first : first + count] = values
        for key, values in walker.trips.items():
            trips.setdefault(key, np.zeros(tasks, dtype=np.int64))[first : first + count] = values
        notes |= walker.notes
    if rules.unknown:
        notes.add(f"ops not counted (no rule): {', '.join(sorted(rules.unknown))}")
    return Decomposition(
        kernel=meta.kernel,
        target=artifact.target,
        grid=grid,
        block=block,
        wave=rules.wave,
        shared_bytes=meta.shared_bytes or _allocated_shared(ops),
        registers=meta.registers,
        demand=demand,
        trips=trips,
        footprint=_footprint(artifact, symbols, rules, views),
        symbols=symbols,
        notes=sorted(notes),
        tensors=launch_tensors(artifact, symbols),
    )
