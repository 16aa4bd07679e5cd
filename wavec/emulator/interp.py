"""Core of the emulator: compile a kernel's MLIR once into Python closures, then run workgroups.

Every SSA value lives in a slot of ``State.env`` as a numpy array whose leading axis is the lane axis:
either one entry per thread of the workgroup, or a single entry for a value that is uniform across
the workgroup (numpy broadcasting then gives exactly the per-lane semantics).  Vector values have shape
``(lanes, *vector_shape)``.  Each op is compiled by the handler registered for its name in :data:`OPS`
into an ``Instr`` (a closure taking the :class:`State`).  Lane-divergent control flow runs with
``State.mask`` set: memory is written only for active lanes, and region results are selected per lane.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Callable
from typing import Any

import numpy as np
from iree.compiler import ir

from wavec.errors import EmulatorError, SourceLoc

Instr = Callable[["State"], None]
Handler = Callable[["Compiler", ir.Operation], "Instr | None"]

#: op name -> handler that compiles one op into an Instr (or None for ops with no runtime effect).
OPS: dict[str, Handler] = {}
KDYN = -(2**63)  # a dynamic size, offset or position in a static list of an op's attribute


def register(*names: str) -> Callable[[Handler], Handler]:
    """Decorator registering one handler for the given op names."""

    def deco(fn: Handler) -> Handler:
        for n in names:
            OPS[n] = fn
        return fn

    return deco


class State:
    """Mutable state of one workgroup's execution."""

    def __init__(self, nslots: int, lanes: int, wave_size: int) -> None:
        self.env: list[Any] = [None] * nslots
        self.lanes = lanes
        self.wave_size = wave_size
        self.mask: np.ndarray | None = None
        self.block: tuple[int, int, int] = (1, 1, 1)
        self.grid: tuple[int, int, int] = (1, 1, 1)
        self.block_id: tuple[int, int, int] = (0, 0, 0)
        self.tid: tuple[np.ndarray, np.ndarray, np.ndarray] = (np.zeros(1, np.int64),) * 3
        self.linear = np.arange(lanes, dtype=np.int64)
        self.wave = self.linear // wave_size
        self.bindings: list[np.ndarray] = []
        self.constants: list[int] = []
        self.check_races = True
        self.global_writes: Any = None  # memory.GlobalWrites of the launch (race checker on)
        self.epoch = 0  # barriers this workgroup passed: global stores of its lanes in one epoch are unordered
        self.shared: list[Any] = []
        self.async_open: list[Callable[[State], None]] = []
        self.async_groups: list[list[Callable[[State], None]]] = []
        self.locs: list[OpLoc] = []
        # State of the op modules that need one, created on first use (None until then).
        self.wgmma_fenced = False  # ops_nvvm: a wgmma.fence since the last wgmma.wait_group
        self.mbarriers: dict[int, Any] | None = None  # ops_tma: shared address -> MBarrier
        self.baton: Any = None  # coop: the scheduler of the running warp-specialized split

    def active(self) -> np.ndarray:
        """Bool (lanes,) array of the active lanes."""
        return np.ones(self.lanes, bool) if self.mask is None else self.mask


def constant(o: int, val: Any) -> Instr:
    """An instruction that binds slot ``o`` to a value known when the kernel is compiled."""

    def run(st: State) -> None:
        st.env[o] = val

    return run


def elementwise(c: Compiler, op: ir.Operation, fn: Callable[..., Any]) -> Instr:
    """An instruction binding the op's one result to ``fn`` of its operands' values."""
    ins, (o,) = c.ins(op), c.outs(op)
    if len(ins) == 1:
        (a,) = ins

        def run1(st: State) -> None:
            st.env[o] = fn(st.env[a])

        return run1
    if len(ins) == 2:
        a, b = ins

        def run2(st: State) -> None:
            env = st.env
            env[o] = fn(env[a], env[b])

        return run2

    def run(st: State) -> None:
        env = st.env
        env[o] = fn(*[env[i] for i in ins])

    return run


def enum_name(attr: ir.Attribute) -> str:
    """The case of an enum attribute: ``add`` for ``#gpu<all_reduce_op add>`` or ``#vector.kind<add>``."""
    return str(attr).split("<")[-1].rstrip(">")


def run_block(st: State, instrs: list[Instr]) -> None:
    for ins in instrs:
        ins(st)


def retire_groups(st: State, groups: list[list[Instr]], keep: int) -> None:
    """Complete the asynchronous operations of all groups but the newest ``keep``, oldest first."""
    while len(groups) > keep:
        run_block(st, groups.pop(0))


def uniform(x: np.ndarray, what: str) -> int:
    """A value that must be the same in every lane, as a Python int."""
    a = np.asarray(x)
    if np.any(a != a[0]):
        raise EmulatorError(message=f"{what} is not uniform across the workgroup")
    return int(a[0])


def full_lanes(x: np.ndarray, lanes: int) -> np.ndarray:
    """Broadcast a (1, ...) uniform value to (lanes, ...)."""
    return np.broadcast_to(x, (lanes,) + x.shape[1:])


_LOC_RE = re.compile(r'loc\("([^"]*)":(\d+):(\d+)')


class OpLoc(str):
    """``op.name (file:line)`` for messages; ``source`` is the kernel source line when the module carries
    the op's location (artifacts are printed with them: ``codegen.emitter``), else None."""

    source: SourceLoc | None = None


def location(op: ir.Operation) -> OpLoc:
    """``op.name (file:line)``: the kernel line of the op, or ``(line N)`` of the module text."""
    m = _LOC_RE.search(str(op.location))
    if m is None or m.group(1) == "-":
        return OpLoc(f"{op.name} (line {m.group(2)})" if m else f"{op.name} ({op.location})")
    out = OpLoc(f"{op.name} ({m.group(1)}:{m.group(2)})")
    line = int(m.group(2))
    out.source = SourceLoc(m.group(1), line, linecache.getline(m.group(1), line))
    return out


class Compiler:
    """Turns MLIR blocks into lists of closures, assigning one env slot per SSA value."""

    def __init__(self) -> None:
        self.slots: dict[ir.Value, int] = {}
        self.locs: list[OpLoc] = []

    def slot(self, v: ir.Value) -> int:
        s = self.slots.get(v)
        if s is None:
            s = self.slots[v] = len(self.slots)
        return s

    def ins(self, op: ir.Operation) -> list[int]:
        return [self.slot(v) for v in op.operands]

    def outs(self, op: ir.Operation) -> list[int]:
        return [self.slot(v) for v in op.results]

    loc = staticmethod(location)

    def op_id(self, op: ir.Operation) -> int:
        """A small integer naming the op (index into ``State.locs``), for the race checker."""
        self.locs.append(location(op))
        return len(self.locs) - 1

    def compile_op(self, op: ir.Operation) -> Instr | None:
        handler = OPS.get(op.name)
        if handler is None:
            raise EmulatorError(message=f"unsupported op {location(op)}")
        return handler(self, op)

    def block(self, block: ir.Block) -> tuple[list[Instr], ir.Operation | None]:
        """Compile a block's ops except its terminator; returns (instrs, terminator)."""
        ops = [o.operation for o in block.operations]
        term = None
        if ops and ops[-1].name in ("scf.yield", "scf.condition", "func.return", "affine.yield"):
            term = ops.pop()
        instrs = [i for i in (self.compile_op(o) for o in ops) if i is not None]
        return instrs, term

    def args(self, block: ir.Block) -> list[int]:
        return [self.slot(a) for a in block.arguments]


def find_ops(op: ir.Operation, name: str) -> list[ir.Operation]:
    """The ops named ``name`` nested in ``op`` (at any depth)."""
    found = []
    for region in op.regions:
        for block in region.blocks:
            for o in block.operations:
                o = o.operation
                if o.name == name:
                    found.append(o)
                found.extend(find_ops(o, name))
    return found


def _wave_size_of(module: ir.Module) -> int:
    variants = find_ops(module.operation, "hal.executable.variant")
    if variants:
        target = str(variants[0].attributes["target"])
        if '"rocm"' in target or "gfx" in target:
            return 64
    return 32


def _workgroup_size(func: ir.Operation) -> tuple[int, ...] | None:
    if "translation_info" not in func.attributes:
        return None
    m = re.search(r"workgroup_size\s*=\s*\[([\d,\s]+)\]", str(func.attributes["translation_info"]))
    return tuple(int(x) for x in m.group(1).split(",")) if m else None


class EmulatedKernel:
    """A kernel parsed and compiled once; call it to run a grid of workgroups on the CPU."""

    def __init__(self, module_text: str, entry: str, *, wave_size: int | None = None) -> None:
        from wavec.emulator import load_ops

        load_ops()
        self.context = ir.Context()
        self.context.allow_unregistered_dialects = False
        self.context.load_all_available_dialects()
        try:
            self.module = ir.Module.parse(module_text, self.context)
        except ir.MLIRError as e:
            raise EmulatorError(message=f"cannot parse the module: {e}") from e
        funcs = [f for f in find_ops(self.module.operation, "func.func") if f.attributes["sym_name"].value == entry]
        if not funcs:
            raise EmulatorError(message=f"no func.func @{entry} in the module")
        self.func = funcs[0]
        self.wave_size = wave_size or _wave_size_of(self.module)
        self.workgroup_size = _workgroup_size(self.func)
        self.compiler = Compiler()
        self.body, _ = self.compiler.block(self.func.regions[0].blocks[0])
        self.nslots = len(self.compiler.slots)

    def __call__(
        self,
        *,
        bindings: list[np.ndarray],
        constants: list[int],
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        check_races: bool = True,
    ) -> None:
        grid = tuple(grid) + (1,) * (3 - len(grid))  # type: ignore[assignment]
        block = tuple(block) + (1,) * (3 - len(block))  # type: ignore[assignment]
        if self.workgroup_size and tuple(self.workgroup_size) != block:
            raise EmulatorError(message=f"block {block} differs from workgroup_size {self.workgroup_size}")
        lanes = block[0] * block[1] * block[2]
        from wavec.emulator.memory import GlobalWrites

        writes = GlobalWrites(grid, lanes) if check_races else None
        lin = np.arange(lanes, dtype=np.int64)
        tid = (lin % block[0], (lin // block[0]) % block[1], lin // (block[0] * block[1]))
        # IEEE results as the GPU gives them (x / 0 = inf, 0 / 0 = NaN, masked lanes' garbage): numpy's
        # warnings about them are not the kernel's errors, and they buried real ones in the test logs
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for z, y, x in np.ndindex(grid[2], grid[1], grid[0]):
                st = State(self.nslots, lanes, self.wave_size)
                st.block, st.grid, st.block_id, st.tid = block, grid, (x, y, z), tid
                st.bindings, st.constants, st.check_races = bindings, list(constants), check_races
                st.global_writes = writes
                st.locs = self.compiler.locs
                run_block(st, self.body)
                flush_async(st)


def flush_async(st: State) -> None:
    """Retire every outstanding async copy (the hardware completes them before the kernel ends), then run
    the end-of-workgroup checks ops registered in ``st.on_exit`` (e.g. no TMA copy left in flight)."""
    retire_groups(st, st.async_groups + [st.async_open], 0)
    st.async_groups, st.async_open = [], []
    for check in st.__dict__.pop("on_exit", []):
        check(st)


def run_kernel(
    module_text: str,
    entry: str,
    *,
    bindings: list[np.ndarray],
    constants: list[int],
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    check_races: bool = True,
    wave_size: int | None = None,
) -> None:
    """Parse, compile and run ``entry`` of ``module_text`` over ``grid`` workgroups of ``block`` threads."""
    kernel = EmulatedKernel(module_text, entry, wave_size=wave_size)
    kernel(bindings=bindings, constants=constants, grid=grid, block=block, check_races=check_races)
