"""Constraints: how a kernel's work is spread over workgroups, waves, loop tiles and instructions.

``ConstraintSet`` derives what the passes need: each dimension's workgroup tile and workgroup axis, the
wave tile, waves per workgroup and their layout, loop tiles, threads per block and the launch grid.
Tile sizes may be symbols bound later through ``subs``; ``resolve`` substitutes them.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import sympy

from ..errors import ConstraintError, SourceLoc
from ..indexing.mma import MMAType
from ..indexing.symbols import WAVE, WORKGROUP, induction_symbol, tile_start_symbol
from .tracing import current_loc


def _defined_here(c) -> None:
    """Record where the user wrote constraint ``c`` (errors about it show that line)."""
    if c.loc is None:  # frames: this, __post_init__, the generated __init__, then the caller
        object.__setattr__(c, "loc", current_loc(skip=3))


def _loc_field():
    """The source line a constraint was written on: not part of its value (equality, hash, repr, cache key)."""
    return field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class WorkgroupConstraint:
    """Workgroups split ``dim`` into tiles of ``tile`` along grid axis ``workgroup_dim``.

    ``workgroup_dim=None``: every workgroup covers the whole dimension (``tile`` must be its size, bound in
    ``subs``), so it takes no grid axis — e.g. the head dimension of attention.  A tile of literally 1 makes
    ``dim`` a *batch* dimension: each workgroup handles one coordinate of it, and register values do not
    carry it (``wc.read`` indexes it with the workgroup id)."""

    dim: sympy.Symbol
    tile: sympy.Expr | int
    workgroup_dim: int | None
    loc: SourceLoc | None = _loc_field()

    def __post_init__(self) -> None:
        _defined_here(self)
        if self.workgroup_dim not in (0, 1, 2, None):
            raise ConstraintError(
                self.loc,
                message=f"WorkgroupConstraint({self.dim}, {self.tile}, {self.workgroup_dim!r}): workgroup_dim "
                "must be 0, 1, 2 (a grid axis) or None (the whole dimension in every workgroup)",
            )

    @property
    def is_batch(self) -> bool:
        return sympy.sympify(self.tile) == 1 and self.workgroup_dim is not None


@dataclass(frozen=True)
class WaveConstraint:
    """Each wave (warpgroup, for a warpgroup MMA type) of a workgroup covers ``tile`` of ``dim``."""

    dim: sympy.Symbol
    tile: sympy.Expr | int
    loc: SourceLoc | None = _loc_field()

    def __post_init__(self) -> None:
        _defined_here(self)


@dataclass(frozen=True)
class TilingConstraint:
    """``wc.iterate(dim, ...)`` steps through ``dim`` in tiles of ``tile``."""

    dim: sympy.Symbol
    tile: sympy.Expr | int
    loc: SourceLoc | None = _loc_field()

    def __post_init__(self) -> None:
        _defined_here(self)


@dataclass(frozen=True)
class HardwareConstraint:
    """``vector_shapes``: each dim's instruction tile, spread over the lanes from the fastest dim;
    ``per_thread``: dims each thread holds whole (lanes spread over the others), e.g. the 16-byte chunk
    ``V`` of a buffer viewed as ``[chunks, V]`` and gathered by chunk (``kernels/rows_odd.py``)."""

    threads_per_wave: int
    mma_type: MMAType | None = None
    vector_shapes: dict = field(default_factory=dict)
    per_thread: tuple = ()
    loc: SourceLoc | None = _loc_field()

    def __post_init__(self) -> None:
        _defined_here(self)
        if self.threads_per_wave not in (32, 64):
            raise ConstraintError(
                self.loc,
                message=f"HardwareConstraint(threads_per_wave={self.threads_per_wave!r}): threads_per_wave must "
                "be 32 (NVIDIA) or 64 (AMD)",
            )
        if self.mma_type is not None and self.mma_type.spec.threads != self.threads_per_wave:
            raise ConstraintError(
                self.loc,
                message=f"{self.mma_type.name} runs on waves of {self.mma_type.spec.threads} "
                f"threads, but threads_per_wave={self.threads_per_wave}",
            )

    def __hash__(self) -> int:
        shapes = tuple(sorted(self.vector_shapes.items(), key=str))
        return hash((self.threads_per_wave, self.mma_type, shapes, *self.per_thread))


ASYNC_COPIES = ("auto", "tma", "tma-mbarrier", "tma-barrier", "cp.async")


CLUSTERS = ((1, 1), (2, 1), (1, 2))  # 2-CTA clusters: one operand multicast, the other per CTA


_BOOL_FLAGS = ("split_epilogue", "persistent", "warp_specialize", "prefetch_fragments", "intra_wg_overlap", "pingpong")


@dataclass(frozen=True)
class SchedulingConstraint:
    """How the kernel's loops and workgroups are scheduled (values may be symbols bound by ``subs``).

    ``num_stages``: software-pipelining depth of ``iterate`` loops (1 = no pipelining; applied where the
    target has asynchronous copies); ``group_size``: workgroups along axis 0 launched together for L2
    reuse (1 = row-major order); ``promote_operands``: stage MMA operands through shared memory;
    ``operand_swizzle``: shared layout of warpgroup-MMA (wgmma) operand tiles, "auto" (the widest
    swizzle, 128, 64 or 32 bytes, that the K rows are whole multiples of, else core matrices), "128B",
    "64B", "32B" or "none" (core matrices); for mma.sync operand tiles (read by ``ldmatrix``) "auto" or a
    width XOR-swizzles them and "none" pads their rows by 16 bytes (``passes/swizzle_shared.py``);
    ``async_copy``: how a pipelined loop fetches its tiles,
    "auto" (TMA where ``pipeline_loops`` can use it: sm_90a wgmma operand tiles in the 128-byte swizzle,
    else ``cp.async``), "tma" (TMA, or a ``ConstraintError`` saying why it cannot be used), "tma-mbarrier"
    / "tma-barrier" (TMA with stage reuse ordered by per-stage "empty" mbarriers / by the workgroup barrier
    after each stage wait; "auto" and "tma" choose, see ``passes/hopper/pipeline_tma.py``) or "cp.async" (never
    TMA: the comparison baseline); ``reverse_axis0``: launch the tiles of workgroup axis 0 last
    first (causal attention: the query tiles with the most keys start first and the light ones fill the
    tail; not combined with ``group_size``); ``warp_specialize``: Hopper TMA GEMM loops get one extra
    producer warpgroup that issues every TMA fill while the consumer warpgroups of the wave grid only
    wait, multiply and release stages (``passes/hopper/warp_specialize.py``; sm_90a, TMA, num_stages >= 2, else a
    ``ConstraintError`` saying why); ``persistent``: launch min(output tiles, SMs x workgroups per SM)
    workgroups that each loop over output tiles (in the grouped order of ``group_size``), mbarrier phases
    continuing across tiles (``passes/hopper/persistent_grid.py``; the TMA wgmma GEMM only, else a
    ``ConstraintError`` saying why); ``split_epilogue``: a masked store of several runs per thread (the
    GEMM's accumulator write) tests once whether all of this thread's runs are in bounds and then stores
    them unguarded, the per-run guards only on the other branch (``codegen/memory_access.lower_write``);
    ``prefetch_fragments``: a ``cp.async`` pipelined mma.sync GEMM loop reads the first K step's fragments
    of the next iteration during the last K step of this one, the stage wait and barrier moved before
    that step (``passes/prefetch_fragments.py``); ``min_workgroups_per_sm``: a launch bound (CUDA's
    ``__launch_bounds__`` second value, PTX ``.minnctapersm``): ptxas keeps the registers low enough for that
    many workgroups of this size to be resident on one SM (spilling if it must; NVIDIA targets only, else
    a ``ConstraintError``); None leaves the register count to ptxas; ``intra_wg_overlap``: an
    attention-shaped wgmma loop (scores ``Q Kᵀ``, a softmax, ``P V``) computes the next tile's scores while
    this tile's softmax runs (``passes/hopper/intra_warpgroup_overlap.py``; sm_90a wgmma, TMA, num_stages >=
    3, else a ``ConstraintError`` saying why); ``l2_prefetch``: bytes (64, 128 or 256) the L2 fetches from DRAM
    for a ``cp.async`` copy's missed sector (PTX ``.L2::128B``; NVIDIA targets only, else a
    ``ConstraintError``; ``codegen/l2_prefetch.py``), None: the hardware's default; ``cluster``: thread-block
    clusters of (along workgroup axis 0, along axis 1) workgroups, (1, 1) (off), (2, 1) or (1, 2): the two
    workgroups of a cluster share one operand's tile (B's along axis 0, A's along axis 1), each loads half of
    it by TMA multicast into both (``passes/hopper/cluster_launch.py``; sm_90a, TMA with empty mbarriers, no
    persistent grid, the CUDA backend, else a ``ConstraintError`` saying why); ``producer_regs``: the
    ``setmaxnreg`` of a ``warp_specialize`` producer warpgroup (None: 40), the consumers take what it frees;
    ``pingpong``: the two consumer warpgroups of a warp-specialized attention body issue their wgmma chains in
    turn, one's softmax under the other's wgmmas (``passes/hopper/pingpong_warpgroups.py``).
    A kernel without a SchedulingConstraint gets these defaults."""

    num_stages: sympy.Expr | int = 2
    group_size: sympy.Expr | int = 1
    promote_operands: bool = True
    operand_swizzle: str = "auto"
    async_copy: str = "auto"
    reverse_axis0: bool = False
    warp_specialize: bool = False
    persistent: bool = False
    split_epilogue: bool = False
    prefetch_fragments: bool = False
    min_workgroups_per_sm: int | None = None
    intra_wg_overlap: bool = False
    l2_prefetch: int | None = None
    cluster: tuple[int, int] = (1, 1)
    producer_regs: int | None = None
    pingpong: bool = False
    loc: SourceLoc | None = _loc_field()

    def __post_init__(self) -> None:
        _defined_here(self)
        for flag in _BOOL_FLAGS:
            if not isinstance(getattr(self, flag), bool):
                raise ConstraintError(
                    self.loc, message=f"SchedulingConstraint({flag}={getattr(self, flag)!r}): expected True or False"
                )
        if self.operand_swizzle not in ("auto", "128B", "64B", "32B", "none"):
            raise ConstraintError(
                self.loc,
                message=f"SchedulingConstraint(operand_swizzle={self.operand_swizzle!r}): expected "
                "'auto', '128B', '64B', '32B' or 'none'",
            )
        bound = self.min_workgroups_per_sm
        if bound is not None and (type(bound) is not int or not 1 <= bound <= 32):
            raise ConstraintError(
                self.loc,
                message=f"SchedulingConstraint(min_workgroups_per_sm={bound!r}): expected None or an int in 1..32",
            )
        if self.async_copy not in ASYNC_COPIES:
            raise ConstraintError(
                self.loc,
                message=f"SchedulingConstraint(async_copy={self.async_copy!r}): expected one of {ASYNC_COPIES}",
            )
        prefetch = self.l2_prefetch
        if prefetch is not None and (type(prefetch) is not int or prefetch not in (64, 128, 256)):
            raise ConstraintError(
                self.loc, message=f"SchedulingConstraint(l2_prefetch={prefetch!r}): expected None, 64, 128 or 256"
            )
        if self.cluster not in CLUSTERS:
            raise ConstraintError(
                self.loc, message=f"SchedulingConstraint(cluster={self.cluster!r}): expected one of {CLUSTERS}"
            )
        regs = self.producer_regs
        if regs is not None and (type(regs) is not int or not 24 <= regs <= 256 or regs % 8):
            raise ConstraintError(
                self.loc,
                message=f"SchedulingConstraint(producer_regs={regs!r}): expected None or a multiple of 8 in 24..256",
            )


def _int(expr, what: str, loc: SourceLoc | None = None) -> int:
    expr = sympy.sympify(expr)
    if not expr.is_Integer or int(expr) <= 0:
        hint = " (bind its symbols in wc.compile(..., subs={...}))" if expr.free_symbols else ""
        raise ConstraintError(loc, message=f"{what} must be a positive integer after subs, got {expr}{hint}")
    return int(expr)


Tiled = WorkgroupConstraint | WaveConstraint | TilingConstraint


def describe(c: Tiled) -> str:
    """A tiling constraint as the user wrote it: ``WaveConstraint(M, BLOCK_M/2)``."""
    if isinstance(c, WorkgroupConstraint):
        return f"WorkgroupConstraint({c.dim}, {c.tile}, {c.workgroup_dim})"
    return f"{type(c).__name__}({c.dim}, {c.tile})"


def defined_at(c) -> str:
    """`` (file:line)`` of the line that made constraint ``c``, or nothing when unknown."""
    return f" ({c.loc.filename}:{c.loc.line})" if c.loc is not None else ""


def _bind_subs(subs: dict) -> dict:
    """``subs`` with sympy keys: positive 32-bit integers, and *derived sizes*, sympy expressions of other
    symbols (``{N: P * 16}``: the keys a paged kernel walks are the block table's pages times the page
    size; ``N`` then appears in no argument and is never a launch constant).  Derived sizes are resolved
    against the integer ones and may not refer to each other."""
    out: dict = {}
    derived: dict = {}
    for k, v in subs.items():
        if isinstance(v, sympy.Expr) and v.free_symbols:
            derived[sympy.sympify(k)] = v
            continue
        ok = isinstance(v, (numbers.Integral, sympy.Integer)) and not isinstance(v, bool) and 0 < int(v) < 2**31
        if not ok:
            raise ConstraintError(message=f"subs[{k}] = {v!r}: symbol values must be positive 32-bit integers")
        out[sympy.sympify(k)] = int(v)
    for k, v in derived.items():
        if v.free_symbols & set(derived):
            raise ConstraintError(message=f"subs[{k}] = {v}: a derived size may not refer to another derived size")
        out[k] = v.subs(out)
        if out[k].is_Number and not (out[k].is_Integer and 0 < int(out[k]) < 2**31):
            raise ConstraintError(message=f"subs[{k}] = {v} = {out[k]}: sizes must be positive 32-bit integers")
    return out


class ConstraintSet:
    """The constraint list with every tile resolved to an integer under ``subs``.  ``origin`` keeps, per
    ("workgroup" | "wave" | "loop", dim), the constraint that set the tile: an error about a tile names
    that constraint, the symbols it was given and the line it was written on (``explain``)."""

    def __init__(self, constraints, subs: dict) -> None:
        self.subs = _bind_subs(subs)
        self._resolved: dict = {}  # resolve() memo: the passes resolve the same few expressions hundreds of times
        hw = [c for c in constraints if isinstance(c, HardwareConstraint)]
        if len(hw) != 1:
            raise ConstraintError(
                hw[1].loc if hw else None, message=f"exactly one HardwareConstraint is needed, got {len(hw)}"
            )
        self.hardware: HardwareConstraint = hw[0]
        self.threads_per_wave = self.hardware.threads_per_wave
        self.mma_type = self.hardware.mma_type
        self.origin: dict[tuple[str, sympy.Symbol], Tiled] = {}
        self.wg_tile: dict[sympy.Symbol, int] = {}
        self.wg_axis: dict[sympy.Symbol, int] = {}
        self.wave_tile: dict[sympy.Symbol, int] = {}
        self.loop_tile: dict[sympy.Symbol, int] = {}
        for c in constraints:
            if isinstance(c, WorkgroupConstraint):
                self._add_workgroup(c)
            elif isinstance(c, WaveConstraint):
                self.wave_tile[c.dim] = self._add("wave", c)
            elif isinstance(c, TilingConstraint):
                self.loop_tile[c.dim] = self._add("loop", c)
        # batch dims (a literal workgroup tile of 1): register values do not carry them
        self.batch_dims = tuple(c.dim for c in constraints if isinstance(c, WorkgroupConstraint) and c.is_batch)
        hw_loc = self.hardware.loc
        for k in self.hardware.vector_shapes:
            if not isinstance(k, sympy.Symbol):  # sympify("N") is sympy's N(), not a dimension
                raise ConstraintError(
                    hw_loc, message=f"HardwareConstraint: vector_shapes key {k!r} must be a wc.sym dimension symbol"
                )
        self.vector_shapes = {
            sympy.sympify(k): _int(self.resolve(v), f"HardwareConstraint: vector_shapes[{k}]", hw_loc)
            for k, v in self.hardware.vector_shapes.items()
        }
        sched = [c for c in constraints if isinstance(c, SchedulingConstraint)]
        if len(sched) > 1:
            raise ConstraintError(sched[1].loc, message="at most one SchedulingConstraint")
        self.scheduling = sched[0] if sched else SchedulingConstraint()
        sloc = self.scheduling.loc
        self.num_stages = _int(self.resolve(self.scheduling.num_stages), "SchedulingConstraint: num_stages", sloc)
        self.group_size = _int(self.resolve(self.scheduling.group_size), "SchedulingConstraint: group_size", sloc)
        self._check_waves()

    def _add(self, kind: str, c: Tiled) -> int:
        """Record ``c`` as the ``kind`` tile of its dim (once per dim) and return the tile's value."""
        first = self.origin.get((kind, c.dim))
        if first is not None:
            raise ConstraintError(
                c.loc,
                message=f"two {type(c).__name__}s for dimension {c.dim}: {describe(first)}{defined_at(first)} "
                f"and {describe(c)}",
            )
        self.origin[kind, c.dim] = c
        return self.tile_value(c)

    def _add_workgroup(self, c: WorkgroupConstraint) -> None:
        axis_user = next(
            (o for (k, d), o in self.origin.items() if k == "workgroup" and self.wg_axis.get(d) == c.workgroup_dim),
            None,
        )
        if c.workgroup_dim is not None and axis_user is not None:
            raise ConstraintError(
                c.loc,
                message=f"{describe(c)} and {describe(axis_user)}{defined_at(axis_user)} both use workgroup_dim "
                f"{c.workgroup_dim}: each grid axis splits one dimension",
            )
        self.wg_tile[c.dim] = self._add("workgroup", c)
        if c.workgroup_dim is None:
            size = self.resolve(c.dim)
            if not size.is_Integer or int(size) != self.wg_tile[c.dim]:
                raise ConstraintError(
                    c.loc,
                    message=f"{describe(c)} covers the whole dimension {c.dim}: bind {c.dim} in subs to its tile "
                    f"{self.wg_tile[c.dim]} (got {c.dim} = {size})",
                )
        else:
            self.wg_axis[c.dim] = c.workgroup_dim

    def tile_value(self, c: Tiled) -> int:
        """``c``'s tile under subs, or a ``ConstraintError`` in the author's terms at ``c``'s line."""
        value = self.resolve(c.tile)
        if value.is_Integer and int(value) > 0:
            return int(value)
        free = sorted(str(s) for s in value.free_symbols)
        if free:
            message = (
                f"{describe(c)}: {', '.join(free)} {'has' if len(free) == 1 else 'have'} no value; bind "
                f"{'it' if len(free) == 1 else 'them'} in wc.compile(..., subs={{{free[0]}: ...}})"
            )
        else:
            message = f"{self.gives(c)}, not a positive integer"
        raise ConstraintError(c.loc, message=message)

    def gives(self, c: Tiled) -> str:
        """``BLOCK_M = 48 gives WaveConstraint(M, BLOCK_M/2) a tile of 24``: the tile's symbols as bound in
        subs, the constraint as written and the tile it comes to."""
        bound = [f"{s} = {self.subs[s]}" for s in sorted(sympy.sympify(c.tile).free_symbols, key=str) if s in self.subs]
        value = self.resolve(c.tile)
        if not bound:
            return f"{describe(c)} has a tile of {value}"
        return f"{', '.join(bound)} give{'s' if len(bound) == 1 else ''} {describe(c)} a tile of {value}"

    def tile_origin(self, dim, per_wave: bool = True) -> Tiled | None:
        """The constraint that sets ``wave_extent(dim)`` (``workgroup_extent`` when not ``per_wave``)."""
        kinds = ("wave", "workgroup", "loop") if per_wave else ("workgroup", "loop")
        return next((self.origin[k, dim] for k in kinds if (k, dim) in self.origin), None)

    def explain(self, dim, per_wave: bool = True) -> str:
        """Where the tile of ``dim`` comes from, in the author's terms (``gives``, plus the constraint's line)."""
        c = self.tile_origin(dim, per_wave)
        if c is None:
            return f"no constraint tiles {dim}"
        return f"{self.gives(c)}{defined_at(c)}"

    def resolve(self, expr) -> sympy.Expr:
        expr = sympy.sympify(expr)
        hit = self._resolved.get(expr)
        if hit is None:
            hit = self._resolved[expr] = expr.subs(self.subs)
        return hit

    def resolve_int(self, expr, what: str) -> int:
        return _int(self.resolve(expr), what)

    def _check_waves(self) -> None:
        self.waves_per_axis = [1, 1, 1]
        for dim, tile in self.wave_tile.items():
            wc = self.origin["wave", dim]
            if dim not in self.wg_axis:
                raise ConstraintError(
                    wc.loc,
                    message=f"{describe(wc)}: waves split a workgroup's tile, but no WorkgroupConstraint gives {dim} "
                    f"a grid axis (add WorkgroupConstraint({dim}, <tile>, 0, 1 or 2))",
                )
            if self.wg_tile[dim] % tile:
                raise ConstraintError(
                    wc.loc,
                    message=f"{self.gives(wc)}, which does not divide the workgroup tile {self.wg_tile[dim]} of "
                    f"{dim}: {self.explain(dim, per_wave=False)}",
                )
            self.waves_per_axis[self.wg_axis[dim]] = self.wg_tile[dim] // tile
        # With a warpgroup MMA type a WaveConstraint tiles per group of waves (4 on Hopper): ``waves``
        # counts the groups and every group has ``group_waves`` waves of ``threads_per_wave`` lanes.
        self.group_waves = self.mma_type.spec.group_waves if self.mma_type is not None else 1
        self.waves = self.waves_per_axis[0] * self.waves_per_axis[1] * self.waves_per_axis[2]
        self.threads = self.waves * self.group_waves * self.threads_per_wave
        if self.threads > 1024:
            splits = [self.origin["wave", d] for d in self.wave_tile]
            raise ConstraintError(
                splits[0].loc if splits else None,
                message=f"{' and '.join(self.gives(c) for c in splits)}: {self.waves} waves"
                f"{f' of {self.group_waves}' if self.group_waves > 1 else ''} x {self.threads_per_wave} threads = "
                f"{self.threads} threads per workgroup exceed the limit of 1024",
            )

    @property
    def lanes(self) -> int:
        """Threads that one layout unit (a wave, or a warpgroup for warpgroup MMA types) spreads over:
        the range of ``$LANE``."""
        return self.group_waves * self.threads_per_wave

    def trip_count(self, dim, end=None) -> sympy.Expr:
        """Iterations of the loop that tiles ``dim``: ``ceil(size / loop tile)`` (the last may be partial),
        or ``ceil(min(size, end) / loop tile)`` for a loop that stops early at coordinate ``end``."""
        stop = self.resolve(dim)
        if end is not None:
            stop = sympy.Min(stop, self.resolve_tile_starts(end))
        return sympy.ceiling(stop / self.loop_tile[dim])

    def loop_bounds(self, dim, start=None, end=None) -> tuple[sympy.Expr, sympy.Expr]:
        """(first, stop) iterations of a loop over ``dim`` that covers coordinates [start, end): ``first =
        floor(start / tile)`` (0 by default), ``stop = trip_count(dim, end)``."""
        first = sympy.Integer(0)
        if start is not None:
            first = sympy.floor(self.resolve_tile_starts(start) / self.loop_tile[dim])
        return first, self.trip_count(dim, end)

    def resolve_tile_starts(self, expr) -> sympy.Expr:
        """``expr`` with every ``wc.tile_start(d)`` replaced by the workgroup's offset along ``d``."""
        expr = self.resolve(expr)
        starts = {tile_start_symbol(d): self.base_offset(d, False, per_wave=False) for d in self.wg_tile}
        return expr.subs(starts)

    def workgroup_extent(self, dim) -> int | None:
        """Extent of ``dim`` one workgroup covers per loop iteration (None: not distributed)."""
        return self.wg_tile.get(dim, self.loop_tile.get(dim))

    def wave_extent(self, dim) -> int | None:
        """Extent of ``dim`` one wave covers per loop iteration (None: not distributed)."""
        return self.wave_tile.get(dim, self.workgroup_extent(dim))

    def base_offset(self, dim, in_loop: bool, per_wave: bool = True) -> sympy.Expr:
        """First coordinate of ``dim`` owned by the current wave (workgroup + wave + loop offsets), or by
        the workgroup when ``per_wave`` is False."""
        off = sympy.Integer(0)
        if dim in self.wg_axis:
            axis = self.wg_axis[dim]
            off += WORKGROUP[axis] * self.wg_tile[dim]
            if dim in self.wave_tile and per_wave:
                off += WAVE[axis] * self.wave_tile[dim]
        if dim in self.loop_tile and in_loop:
            off += induction_symbol(dim) * self.loop_tile[dim]
        return off

    def grid(self, sizes: dict) -> tuple:
        """Launch grid as sympy expressions of the (dynamic) dimension symbols."""
        grid = [sympy.Integer(1)] * 3
        for dim, axis in self.wg_axis.items():
            grid[axis] = sympy.ceiling(self.resolve(sizes.get(dim, dim)) / self.wg_tile[dim])
        return tuple(grid)
