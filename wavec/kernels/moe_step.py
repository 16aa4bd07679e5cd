"""The prepared step of ``fused_experts``: what one set of tensor keys and options decides, decided once
(docs/performance.md, "Host path"; docs/moe.md, "Host path").

Requires: a call that passed ``fused_moe``'s validation (shapes, options, ``out``, ``config``), its tensors
and its options.

Guarantees:

* ``Step(...)`` holds the sizes, the flags, the tile choice (``moe_dispatch.picker``: the explicit
  ``config``, the table's static choice, the static rule, or the routing-aware choice on the device, each
  counted per call as before; a split-K choice serves a deterministic call through f32 rows per slice) and, per
  configuration met, the compiled kernels' prepared launches
  (``CompiledKernel.prepare``), built on that configuration's first call.  A call does no validation, no
  planning and no host synchronisation beyond the routing-aware choice's one read.
* Intermediates (the int32 and local ids, f32 weights, the routing's buffers, the intermediate rows, the
  per-slot rows or the f32 accumulator) live in workspaces cached per (configuration, thread, current
  stream): launches queued on one stream by one thread run in order, so a workspace is never used by two
  calls at once.  Nothing of a workspace is returned: the output is ``out`` or a fresh tensor.  A workspace
  past ``BUDGET`` (``fastpath.WorkspaceBudget``: per workspace, and held by all steps together) is allocated per call
  (prefill sizes: the GPU time dwarfs the allocation).
* On the emulator (CPU tensors) every call checks the ids (and ``expert_map``'s values) against the
  experts before any launch, as the emulator's padded buffers would not catch them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from wavec.errors import OutOfBoundsError
from wavec.kernels import fused_moe as fm
from wavec.kernels import moe_align
from wavec.kernels import moe_dispatch as md
from wavec.kernels.fastpath import WorkspaceBudget

BUDGET = WorkspaceBudget()  # 16 MiB a (configuration, thread, stream), 512 MiB over every step


class _Front:
    """The configuration-independent buffers of one (thread, stream): ids as int32 [T, k] (when topk_ids
    is int64 or not dense), local ids [T, k] (``moe_remap``), weights as f32 [T, k] (when not f32 dense)."""

    __slots__ = ("ids", "local", "weights", "__weakref__")

    def __init__(self, step: Step) -> None:
        import torch

        def new(need: bool, dtype: Any) -> Any:
            return torch.empty(step.s.tokens, step.s.top_k, dtype=dtype, device=step.device) if need else None

        self.ids = new(step.convert_ids, torch.int32)
        self.local = new(step.remap is not None, torch.int32)
        self.weights = new(step.convert_weights, torch.float32)


class _Back:
    """The buffers of one configuration: the routing's (``moe_align``), the intermediate [rows, I], and the
    per-slot rows [T*k + 1, H] (deterministic; split-K: f32 [(T*k + 1) * S, H], a row per slot and slice)
    or the f32 accumulator [T + 1, H] with its first T rows."""

    __slots__ = ("align", "sorted_grid", "expert_ids", "inter", "rows", "y", "acc", "acc_t", "__weakref__")

    def __init__(self, step: Step, lanes: _Lanes) -> None:
        import torch

        s, device = step.s, step.device
        self.align = lanes.align.buffers()
        sorted_ids, self.expert_ids, _ntp, _counts = lanes.align.views(self.align)
        self.sorted_grid = sorted_ids[: lanes.rows]
        self.inter = torch.empty(lanes.rows, s.inter, dtype=step.dtype, device=device)
        self.rows: Any = None
        self.y: Any = None
        self.acc: Any = None
        self.acc_t: Any = None
        if step.deterministic and lanes.split > 1:  # f32 partials per (token, slot, slice), then padding's
            slots = s.tokens * s.top_k * lanes.split
            self.rows = torch.empty(slots + lanes.split, s.hidden, dtype=torch.float32, device=device)
            self.y = self.rows[:slots].view(s.tokens, s.top_k * lanes.split, s.hidden)
        elif step.deterministic:
            self.rows = torch.empty(s.tokens * s.top_k + 1, s.hidden, dtype=step.dtype, device=device)
            self.y = self.rows[: s.tokens * s.top_k].view(s.tokens, s.top_k, s.hidden)
        else:
            self.acc = torch.empty(s.tokens + 1, s.hidden, dtype=torch.float32, device=device)  # row T: scratch
            self.acc_t = self.acc[: s.tokens]

    def nbytes(self) -> int:
        held = [t.untyped_storage() for t in (*self.align, self.inter, self.rows, self.acc) if t is not None]
        return sum({s.data_ptr(): s.nbytes() for s in held}.values())  # the routing's views share one


class _Lanes:
    """One configuration's prepared launches: the routing, ``moe_up``, ``moe_down``, ``moe_combine``."""

    __slots__ = ("align", "rows", "split", "up", "down", "combine", "backs")

    def __init__(self, step: Step, cfg: fm.MoeConfig) -> None:
        s = step.s
        bins = s.experts + step.skip
        example = _example_ids(step)
        self.align = moe_align.new_call(example, bins, cfg.block_m, step.backend)
        self.rows = fm.grid_rows(s.tokens * s.top_k, bins, cfg.block_m)
        self.split = cfg.split_k
        self.up: Any = None  # the prepared launches, on the configuration's first call
        self.down: Any = None
        self.combine: Any = None
        self.backs: dict[Any, _Back] = {}  # (thread, stream) -> workspace

    def prepare(self, step: Step, cfg: fm.MoeConfig, args: tuple, back: _Back) -> None:
        """The launches, validated on this call's tensors (``CompiledKernel.prepare``)."""
        hidden, w1, w2, weights, ids, result = args
        s = step.s
        plan = fm.plan_kernels(s, cfg, step.flags, step.device, step.backend)
        w1v, flat_w = w1.view(s.experts, 2, s.inter, s.hidden), weights.view(-1)
        grid, experts = back.sorted_grid, back.expert_ids
        self.up = _exact(plan.up.prepare(hidden, grid, experts, w1v, flat_w, back.inter, fresh_outputs=True))
        if step.deterministic:
            self.down = _exact(plan.down.prepare(back.inter, grid, experts, w2, flat_w, back.rows, fresh_outputs=True))
            slots = ids.view(s.tokens, s.top_k)
            self.combine = _exact(plan.combine.prepare(back.y, slots, result, s.experts, fresh_outputs=step.fresh))
        else:
            self.down = _exact(plan.down.prepare(back.inter, grid, experts, w2, flat_w, back.acc, fresh_outputs=True))


def _exact(launch: Any) -> Any:
    """``launch``, or for one that reads more than pointers (TMA tensor maps read shapes and strides) the
    same with its arguments reshaped to the prepared shapes: the step passes ``w1`` [E, 2I, H] and the
    [T, k] ids and weights where the kernels take [E, 2, I, H] and flat vectors."""
    if getattr(launch, "maps", None) is None:
        return launch
    from wavec.runtime.fast_launch import CheckedLaunch

    return CheckedLaunch(launch, launch.shapes)


def _example_ids(step: Step) -> Any:
    import torch

    return torch.empty(step.slots, dtype=torch.int32, device=step.device)


class Step:
    """A prepared ``fused_experts`` call (module docstring): ``step(hidden, w1, w2, topk_weights, topk_ids,
    expert_map, out) -> out or a new [T, H] tensor``."""

    def __init__(
        self, s: Any, flags: tuple, route_experts: int, explicit: Any, dispatch: str, hidden: Any, topk_weights: Any,
        topk_ids: Any, expert_map: Any, out: Any, backend: str | None,
    ) -> None:  # fmt: skip
        import torch

        from wavec.compiler import default_backend

        self.s, self.flags, self.backend = s, flags, backend
        self.device, self.dtype = hidden.device, hidden.dtype
        self.deterministic = flags[2]
        self.skip = 1 if expert_map is not None else 0  # the skip expert E takes the -1 slots
        self.slots = s.tokens * s.top_k
        self.out_shape = (s.tokens, s.hidden)
        self.empty = torch.empty
        self.convert_ids = not (topk_ids.dtype == torch.int32 and topk_ids.is_contiguous())
        self.convert_weights = not (topk_weights.dtype == torch.float32 and topk_weights.is_contiguous())
        self.remap = fm.remap_kernel(expert_map is not None, self.device, backend)
        self.identity = None if expert_map is not None else fm.identity(s.experts, self.device)
        self.remap_launch: Any = None
        self.pick = md.picker(s, explicit, dispatch, self.skip, self.device)
        self.route_experts = route_experts
        self.emulated = (backend or default_backend()) == "emulator"
        self.fresh = out is None  # the output is allocated per call: no overlap check in the combine
        self.cuda = self.device.type == "cuda"
        self.index = self.device.index if self.cuda else 0
        self.stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _no_stream
        self.lanes: dict[Any, _Lanes] = {}
        self.fronts: dict[Any, _Front] = {}

    def __call__(self, hidden: Any, w1: Any, w2: Any, topk_weights: Any, topk_ids: Any, expert_map: Any, out: Any):
        result = out if out is not None else self.empty(self.out_shape, dtype=self.dtype, device=self.device)
        if not self.slots:
            return result
        if self.emulated:
            self._check_values(topk_ids, expert_map)
        ctx = (threading.get_ident(), self.stream(self.index)) if self.cuda else threading.get_ident()
        front = self.fronts.get(ctx) or self._front(ctx)
        ids, weights = topk_ids, topk_weights
        if front.ids is not None:
            front.ids.copy_(topk_ids)
            ids = front.ids
        if front.weights is not None:
            front.weights.copy_(topk_weights)
            weights = front.weights
        if self.remap is not None:
            ids = self._remap(ids, expert_map, front.local)
        cfg = self.pick(ids)
        lanes = self.lanes.get(cfg) or self._lanes(cfg)
        back = lanes.backs.get(ctx) or self._back(ctx, lanes)
        if lanes.up is None:
            lanes.prepare(self, cfg, (hidden, w1, w2, weights, ids, result), back)
        lanes.align.run(ids, back.align)
        grid, experts = back.sorted_grid, back.expert_ids
        lanes.up(hidden, grid, experts, w1, weights, back.inter)  # (pointers: w1 read as [E, 2, I, H])
        if self.deterministic:
            lanes.down(back.inter, grid, experts, w2, weights, back.rows)
            lanes.combine(back.y, ids, result, self.s.experts)
        else:
            back.acc.zero_()
            lanes.down(back.inter, grid, experts, w2, weights, back.acc)
            result.copy_(back.acc_t)
        return result

    def _remap(self, ids: Any, expert_map: Any, local: Any) -> Any:
        """Global ids to local ones (-1 to the skip expert), or the identity map's bounds check (CUDA with
        WAVEC_CHECK_BOUNDS=1: the launch synchronises and reports a bad id)."""
        table = expert_map if expert_map is not None else self.identity
        if self.remap_launch is None:
            self.remap_launch = self.remap.prepare(
                ids.view(-1), table, local.view(-1), self.s.experts, fresh_outputs=True
            )
        try:
            self.remap_launch(ids, table, local, self.s.experts)
        except OutOfBoundsError as e:
            raise fm.bad_ids(self.route_experts, e) from e
        return local

    def _check_values(self, topk_ids: Any, expert_map: Any) -> None:
        fm.check_id_values(topk_ids, self.route_experts)
        if expert_map is not None:
            fm.check_map_values(expert_map, self.s.experts)

    def _front(self, ctx: Any) -> _Front:
        front = _Front(self)
        if len(self.fronts) < 64:  # threads x streams seen; more are served fresh buffers
            self.fronts[ctx] = front
        return front

    def _lanes(self, cfg: fm.MoeConfig) -> _Lanes:
        lanes = self.lanes[cfg] = _Lanes(self, cfg)
        return lanes

    def _back(self, ctx: Any, lanes: _Lanes) -> _Back:
        back = _Back(self, lanes)
        nbytes = back.nbytes()
        if len(lanes.backs) < 64 and BUDGET.keep(back, nbytes):
            lanes.backs[ctx] = back
        return back


def _no_stream(device: int) -> int:
    return 0
