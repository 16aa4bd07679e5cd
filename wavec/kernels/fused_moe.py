"""Fused mixture-of-experts layer: ``fused_experts`` (vLLM's keywords) and ``fused_moe`` (DESIGN §14).

``fused_experts(hidden, w1, w2, topk_weights, topk_ids)`` computes, for every token t and slot s of its
top-k, ``weight[t, s] * w2[e] @ act(w1[e, :I] @ x_t) * (w1[e, I:] @ x_t)`` with ``e = topk_ids[t, s]``,
summed over the slots.  The launches (``fused_moe_kernels``; no host synchronisation):

1. with ``expert_map``: ``moe_remap``, global ids to local ones (-1: another rank's expert, skipped);
2. ``moe_align_block_size`` at the token block BLOCK_M: the (token, slot) rows sorted by expert;
3. ``moe_up``: the gathered rows times the expert's gate and up halves, ``act(gate) * up`` in sorted order;
4. ``moe_down``: times ``w2`` of the block's expert, weighted; then the combine over the top-k:
   ``deterministic=True`` stores one row per (token, slot) and ``moe_combine`` sums each token's k rows
   in f32 in slot order (bitwise reproducible); ``deterministic=False`` adds into a zeroed f32 [T + 1, H]
   with atomics (order unspecified) and casts it (``torch.zeros`` and ``copy_``: two library launches).

The tiles come from ``config``, else from the fitted table of this shape on this device
(``python -m wavec tune moe``; ``moe_dispatch``): ``dispatch="routing_aware"`` (the default) chooses
from the expert histogram of this call's routing (one read of the chosen id: the only host
synchronisation), ``dispatch="static"`` the table's best at balanced routing for T.  Without a table both
take ``static_config`` (a rule of T*k/E, the tokens per expert at balanced routing), counted in
``moe_dispatch.dispatch_report()`` and warned about once per shape.  Bad arguments are an
``ArgumentError`` naming the argument before any launch; ``out`` is written only by the last launch.
Expert ids outside [0, E) (or [0, global_num_experts) with ``expert_map``): CPU tensors (the emulator)
are checked before the routing kernel; on the GPU the kernels check them only with
``WAVEC_CHECK_BOUNDS=1`` (docs/moe.md says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import wavec as wc
from wavec.errors import ArgumentError, OutOfBoundsError
from wavec.kernels import fused_moe_kernels as fk
from wavec.kernels.indexing import hopper_target
from wavec.kernels.moe_align import MAX_EXPERTS, moe_align_block_size
from wavec.kernels.moe_routing import topk_softmax
from wavec.knobs import knobs
from wavec.tuning.plan import mma_type_for

DTYPES = {"float16": wc.f16, "bfloat16": wc.bf16}
ACTIVATIONS = ("silu", "gelu")
DISPATCH = ("routing_aware", "static")


@dataclass(frozen=True, slots=True)
class MoeConfig:
    """Tiles of both GEMMs: the token block ``block_m`` (also the routing's padding), the up-projection's
    N tile over I (two accumulators: half the down-projection's), the down-projection's N tile over H,
    the K step, the pipeline stages and ``group_m``, the token blocks launched together along N (L2
    reuse of an expert's weight tiles; 1: row-major order)."""

    block_m: int
    block_n: int
    block_n_down: int
    block_k: int
    stages: int
    group_m: int = 1

    @classmethod
    def parse(cls, config: Any) -> MoeConfig:
        """A ``MoeConfig``, or a dict with ``BLOCK_M``/``BLOCK_N``/``BLOCK_K``/``stages``/``GROUP_M`` (vLLM's
        ``BLOCK_SIZE_M``/``BLOCK_SIZE_N``/``BLOCK_SIZE_K``/``num_stages``/``GROUP_SIZE_M`` too;
        ``BLOCK_N_DOWN`` defaults to ``BLOCK_N``, ``GROUP_M`` to 1)."""
        if isinstance(config, MoeConfig):
            config.check()
            return config
        if not isinstance(config, dict):
            raise _bad("config", f"must be a MoeConfig or a dict, got {type(config).__name__}")
        aliases = {
            "BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N", "BLOCK_SIZE_K": "BLOCK_K", "GROUP_SIZE_M": "GROUP_M"
        }  # fmt: skip
        c = {aliases.get(k, k): v for k, v in config.items() if k != "num_warps"}
        c["stages"] = c.pop("num_stages", c.get("stages", 3))
        known = {"BLOCK_M", "BLOCK_N", "BLOCK_N_DOWN", "BLOCK_K", "stages", "GROUP_M"}
        if set(c) - known or not {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(c):
            raise _bad(
                "config",
                f"needs BLOCK_M, BLOCK_N, BLOCK_K (optional BLOCK_N_DOWN, stages, GROUP_M), got {sorted(config)}",
            )
        down = c.get("BLOCK_N_DOWN", c["BLOCK_N"])
        got = cls(c["BLOCK_M"], c["BLOCK_N"], down, c["BLOCK_K"], c["stages"], c.get("GROUP_M", 1))
        got.check()
        return got

    def check(self) -> None:
        for name, v, allowed in (
            ("BLOCK_M", self.block_m, (16, 32, 64, 128)),
            ("BLOCK_N", self.block_n, (32, 64, 128)),
            ("BLOCK_N_DOWN", self.block_n_down, (32, 64, 128, 256)),
            ("BLOCK_K", self.block_k, (16, 32, 64, 128)),
            ("stages", self.stages, (1, 2, 3, 4, 5)),
            ("GROUP_M", self.group_m, (1, 2, 4, 8, 16, 32, 64)),
        ):
            if type(v) is not int or v not in allowed:
                raise _bad("config", f"{name} must be one of {allowed}, got {v!r}")

    def subs(self, down: bool) -> dict:
        n = self.block_n_down if down else self.block_n
        return fk.gemm_subs(self.block_m, n, self.block_k, self.stages, self.group_m)

    def label(self) -> str:
        """``m64n64d128k64s3`` (``g8`` appended when GROUP_M > 1): a short name for tables and logs."""
        g = f"g{self.group_m}" if self.group_m > 1 else ""
        return f"m{self.block_m}n{self.block_n}d{self.block_n_down}k{self.block_k}s{self.stages}{g}"


def static_config(tokens: int, top_k: int, experts: int) -> MoeConfig:
    """The static choice: BLOCK_M the smallest of 16, 32, 64, 128 holding the tokens per expert at
    balanced routing (T*k/E; 128 beyond), so decode pads little and prefill uses large tiles; the other
    tiles follow from it (``tiles_for_block``)."""
    per_expert = tokens * top_k / max(experts, 1)
    return tiles_for_block(next((b for b in (16, 32, 64) if per_expert <= b), 128))


def tiles_for_block(block_m: int) -> MoeConfig:
    """N tiles of 64 (up: two accumulators) and 128 (down) from BLOCK_M 64 up, 32 and 64 below (a decode
    grid wants CTAs: T = 1, k = 8 over I = 768 is 8 x 24 up-projection tiles); K steps of 64 (32 at
    BLOCK_M 128: registers), 3 stages.  Every one compiles without spills for sm_80 and sm_90a
    (``tests/binary/test_fused_moe_compile.py``)."""
    if block_m < 64:
        return MoeConfig(block_m, 32, 64, 64, 3)
    return MoeConfig(block_m, 64, 128, 32 if block_m == 128 else 64, 3)


def grid_rows(numel: int, experts: int, block_m: int) -> int:
    """The sorted rows the GEMMs cover: whole blocks up to the most the routing can fill, ``numel`` ids
    plus ``block_m - 1`` padding for each of at most ``min(experts, numel)`` non-empty experts (decode:
    T = 1, k = 8, E = 64, BLOCK_M 16 is 8 blocks, not the 60 the sorted ids hold)."""
    most = -(-(numel + min(experts, numel) * (block_m - 1)) // block_m)
    return min(most, (numel + experts * (block_m - 1)) // block_m) * block_m


def _bad(arg: str, message: str) -> ArgumentError:
    return ArgumentError(kernel="fused_experts", arg=arg, message=message)


def _tensor(arg: str, t: Any, dims: int, dtypes: tuple, device: Any) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise _bad(arg, f"must be a tensor, got {type(t).__name__}")
    names = [str(d).removeprefix("torch.") for d in dtypes]
    if t.dim() != dims or t.dtype not in dtypes:
        raise _bad(arg, f"must be a {dims}-D tensor of {names}, got {t.dim()}-D {str(t.dtype).removeprefix('torch.')}")
    if device is not None and t.device != device:
        raise _bad(arg, f"is on {t.device} but hidden is on {device}")


@dataclass(frozen=True, slots=True)
class _Shape:
    tokens: int
    hidden: int
    inter: int
    experts: int
    top_k: int
    dtype: Any


def _check_shapes(hidden: Any, w1: Any, w2: Any, topk_weights: Any, topk_ids: Any) -> _Shape:
    """The sizes of valid tensors, or an ``ArgumentError`` naming the first bad one."""
    import torch

    _tensor("hidden", hidden, 2, (torch.bfloat16, torch.float16), None)
    dev, dt = hidden.device, hidden.dtype
    _tensor("w1", w1, 3, (dt,), dev)
    _tensor("w2", w2, 3, (dt,), dev)
    _tensor("topk_weights", topk_weights, 2, (torch.float32, torch.bfloat16, torch.float16), dev)
    _tensor("topk_ids", topk_ids, 2, (torch.int32, torch.int64), dev)
    tokens, h = hidden.shape
    experts, two_i, h1 = w1.shape
    if h1 != h:
        raise _bad("w1", f"must be [E, 2I, {h}] (hidden's size {h} last), got {list(w1.shape)}")
    if two_i % 2 or two_i == 0:
        raise _bad("w1", f"dim 1 is 2I (gate rows, then up rows): must be even and positive, got {two_i}")
    if tuple(w2.shape) != (experts, h, two_i // 2):
        raise _bad(
            "w2", f"must be [E, H, I] = {[experts, h, two_i // 2]} (from w1 {list(w1.shape)}), got {list(w2.shape)}"
        )
    if topk_ids.shape[0] != tokens or topk_ids.shape[1] < 1:
        raise _bad("topk_ids", f"must be [T = {tokens}, k >= 1], got {list(topk_ids.shape)}")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise _bad("topk_weights", f"must have topk_ids' shape {list(topk_ids.shape)}, got {list(topk_weights.shape)}")
    if not 1 <= experts <= MAX_EXPERTS - 1:
        raise _bad("w1", f"must hold 1..{MAX_EXPERTS - 1} experts, got {experts}")
    if h % 8 or (two_i // 2) % 8:
        raise _bad("w1", f"H and I must be multiples of 8 (16-byte rows), got H = {h}, I = {two_i // 2}")
    for arg, t in (("hidden", hidden), ("w1", w1), ("w2", w2)):
        if not t.is_contiguous():
            raise _bad(arg, "must be contiguous (row-major); call .contiguous()")
    return _Shape(tokens, h, two_i // 2, experts, topk_ids.shape[1], DTYPES[str(dt).removeprefix("torch.")])


def _check_options(s: _Shape, activation: Any, global_num_experts: Any, expert_map: Any, dispatch: Any, device) -> int:
    """The number of ids the routing sees (E, or global_num_experts with ``expert_map``)."""
    import torch

    if activation not in ACTIVATIONS:
        raise _bad("activation", f"must be one of {ACTIVATIONS}, got {activation!r}")
    if dispatch not in DISPATCH:
        raise _bad("dispatch", f"must be one of {DISPATCH}, got {dispatch!r}")
    if type(global_num_experts) is not int:
        raise _bad("global_num_experts", f"must be an int, got {global_num_experts!r}")
    if expert_map is None:
        if global_num_experts not in (-1, s.experts):
            raise _bad(
                "global_num_experts", f"is {global_num_experts} but w1 holds {s.experts} experts and no expert_map"
            )
        return s.experts
    _tensor("expert_map", expert_map, 1, (torch.int32,), device)
    ge = expert_map.shape[0]
    if global_num_experts not in (-1, ge) or not 1 <= ge <= MAX_EXPERTS:
        raise _bad(
            "expert_map", f"has {ge} entries; must be global_num_experts ({global_num_experts}), at most {MAX_EXPERTS}"
        )
    if expert_map.device.type == "cpu" and ge and not ((expert_map >= -1) & (expert_map < s.experts)).all():
        raise _bad("expert_map", f"values must be local experts in [0, {s.experts}) or -1")
    return ge


_COMPILED: dict = {}
_TARGETS: dict = {}


def _target(backend: str | None, device: Any) -> str | None:
    """sm_90a on a Hopper GPU (vector reductions for the atomic combine), else the default; once per
    device (the capability query is host work on every call otherwise)."""
    key = (backend, device)
    if key not in _TARGETS:
        _TARGETS[key] = hopper_target(backend, device)
    return _TARGETS[key]


def _compiled(key: tuple, make, subs: dict, target: str | None, backend: str | None):
    if key not in _COMPILED:
        _COMPILED[key] = wc.compile(make(), subs, target=target, backend=backend)
    return _COMPILED[key]


@dataclass(frozen=True, slots=True)
class _Plan:
    """The compiled launches of one call."""

    up: Any
    down: Any
    combine: Any


def _plan(s: _Shape, cfg: MoeConfig, flags: tuple, device: Any, backend: str | None) -> _Plan:
    activation, weighted_input, deterministic, _mapped = flags
    checked = knobs.check_bounds  # in the keys: kernels compiled with the checks differ
    target = _target(backend, device)
    tpw, mma = mma_type_for("mma_sync", s.dtype, target)
    base = (s.dtype.name, s.top_k, cfg, target, backend, checked)
    up = _compiled(
        ("up", activation, weighted_input, *base),
        lambda: fk.make_up(s.dtype, s.top_k, activation, weighted_input, tpw, mma, cfg.block_m),
        cfg.subs(False), target, backend,
    )  # fmt: skip
    down = _compiled(
        ("down", weighted_input, deterministic, *base),
        lambda: fk.make_down(s.dtype, s.top_k, not weighted_input, deterministic, tpw, mma, cfg.block_m),
        cfg.subs(True), target, backend,
    )  # fmt: skip
    combine = None
    if deterministic:
        combine = _compiled(
            ("combine", s.dtype.name, s.top_k, target, backend, checked), lambda: fk.make_combine(s.dtype, tpw),
            fk.combine_subs(s.top_k, tpw),
            target, backend,
        )  # fmt: skip
    return _Plan(up, down, combine)


def _remap(mapped: bool, device: Any, backend: str | None) -> Any:
    """The ``moe_remap`` kernel when the ids go through a map (``expert_map``, or the bounds check on CUDA)."""
    checked = knobs.check_bounds
    if not (mapped or (checked and getattr(device, "type", None) == "cuda")):
        return None
    target = _target(backend, device)
    tpw, _mma = mma_type_for("mma_sync", wc.bf16, target)
    return _compiled(
        ("remap", target, backend, checked), lambda: fk.make_remap(tpw), fk.remap_subs(tpw), target, backend
    )


def _choose(s: _Shape, config: Any, dispatch: str, local: Any, skip: int, device: Any) -> MoeConfig:
    """The tiles of this call: ``config``; else the static choice; else the routing-aware choice of the
    fitted table for this shape on this device (``moe_dispatch``), the static rule where none exists
    (counted and warned about, never silent)."""
    from wavec.kernels import moe_dispatch as md

    if config is not None:
        md.count_config()
        return md.chose(config)
    shape, table = md.lookup(s.experts, s.top_k, s.hidden, s.inter, s.dtype.name, device)
    if dispatch == "static":
        return md.chose(md.static_choice(shape, table, s.tokens, device))
    if table is None:
        return md.chose(md.fallback(shape, s.tokens, device))
    return md.chose(md.choose(table, local, s.experts, s.experts + skip, s.tokens))


def _local_ids(remap: Any, topk_ids: Any, expert_map: Any, s: _Shape, route_experts: int) -> Any:
    """int32 ids the routing sorts: local experts, with the skip expert E for -1 (``expert_map``).  CPU
    ids are range-checked here; CUDA ids with ``WAVEC_CHECK_BOUNDS=1`` by ``moe_remap``'s bounds check
    (through the identity map when there is no ``expert_map``), which the launcher reports after it."""
    import torch

    ids = topk_ids.reshape(-1)
    if ids.device.type == "cpu" and ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < route_experts):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise _bad("topk_ids", f"holds {bad}, outside [0, {route_experts})")
    ids = ids.to(torch.int32).contiguous()
    if remap is None:
        return ids
    table = expert_map if expert_map is not None else _identity(s.experts, ids.device)
    local = torch.empty_like(ids)
    try:
        remap(ids, table, local, s.experts)
    except OutOfBoundsError as e:
        raise _bad("topk_ids", f"holds an expert id outside [0, {route_experts}) (WAVEC_CHECK_BOUNDS): {e}") from e
    return local


_IDENTITY: dict = {}


def _identity(experts: int, device: Any) -> Any:
    import torch

    key = (experts, device)
    if key not in _IDENTITY:
        _IDENTITY[key] = torch.arange(experts, dtype=torch.int32, device=device)
    return _IDENTITY[key]


def fused_experts(
    hidden, w1, w2, topk_weights, topk_ids, *, activation: str = "silu", apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1, expert_map=None, dispatch: str = "routing_aware", config=None,
    deterministic: bool = True, out=None, backend: str | None = None,
):  # fmt: skip
    """The MoE experts of vLLM's ``fused_experts`` (module docstring): hidden [T, H] bf16/f16, w1 [E, 2I,
    H] (gate rows first), w2 [E, H, I], topk_weights [T, k] f32/bf16/f16, topk_ids [T, k] int32/int64
    (global ids with ``expert_map`` [global_E] int32: local id or -1 to skip).  Returns ``out`` (a new
    [T, H] tensor of hidden's dtype when None).  CPU tensors run on the emulator."""
    import torch

    s = _check_shapes(hidden, w1, w2, topk_weights, topk_ids)
    route_experts = _check_options(s, activation, global_num_experts, expert_map, dispatch, hidden.device)
    if out is not None:
        _tensor("out", out, 2, (hidden.dtype,), hidden.device)
        if tuple(out.shape) != (s.tokens, s.hidden) or not out.is_contiguous():
            raise _bad("out", f"must be a contiguous [{s.tokens}, {s.hidden}] tensor, got {list(out.shape)}")
    explicit = None if config is None else MoeConfig.parse(config)
    for arg, flag in (("apply_router_weight_on_input", apply_router_weight_on_input), ("deterministic", deterministic)):
        if type(flag) is not bool:
            raise _bad(arg, f"must be a bool, got {flag!r}")
    flags = (activation, apply_router_weight_on_input, deterministic, expert_map is not None)
    result = out if out is not None else hidden.new_empty(s.tokens, s.hidden)
    if s.tokens == 0:
        return result
    local = _local_ids(_remap(expert_map is not None, hidden.device, backend), topk_ids, expert_map, s, route_experts)
    skip = 1 if expert_map is not None else 0  # the skip expert E takes the -1 slots
    cfg = _choose(s, explicit, dispatch, local, skip, hidden.device)
    plan = _plan(s, cfg, flags, hidden.device, backend)
    sorted_ids, expert_ids, _total, _counts = moe_align_block_size(
        local, s.experts + skip, cfg.block_m, backend=backend
    )
    sorted_ids = sorted_ids[: grid_rows(s.tokens * s.top_k, s.experts + skip, cfg.block_m)]
    weights = topk_weights.reshape(-1).to(torch.float32).contiguous()
    inter = hidden.new_empty(sorted_ids.numel(), s.inter)
    plan.up(hidden, sorted_ids, expert_ids, w1.view(s.experts, 2, s.inter, s.hidden), weights, inter)
    if deterministic:
        rows = hidden.new_empty(s.tokens * s.top_k + 1, s.hidden)  # row T*k: the padding rows' zeros
        plan.down(inter, sorted_ids, expert_ids, w2, weights, rows)
        y = rows[: s.tokens * s.top_k].view(s.tokens, s.top_k, s.hidden)
        plan.combine(y, local.view(s.tokens, s.top_k), result, s.experts)
    else:
        acc = torch.zeros(s.tokens + 1, s.hidden, dtype=torch.float32, device=hidden.device)  # row T: scratch
        plan.down(inter, sorted_ids, expert_ids, w2, weights, acc)
        result.copy_(acc[: s.tokens])
    return result


def fused_moe(hidden, w1, w2, router_logits, top_k: int, renormalize: bool, **kwargs: Any):
    """``topk_softmax(router_logits, top_k, renormalize)`` (f32 softmax over E, top-k, optionally divided
    by their sum), then ``fused_experts`` with ``kwargs``."""
    import torch

    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 2:
        raise _bad("router_logits", "must be a 2-D tensor [T, E]")
    if isinstance(w1, torch.Tensor) and w1.dim() == 3 and router_logits.shape[1] != w1.shape[0]:
        raise _bad("router_logits", f"has {router_logits.shape[1]} experts but w1 holds {w1.shape[0]}")
    weights, ids = topk_softmax(router_logits, top_k, renormalize, backend=kwargs.get("backend"))
    return fused_experts(hidden, w1, w2, weights, ids, **kwargs)


def reference(hidden, w1, w2, topk_weights, topk_ids, *, activation: str = "silu",
              apply_router_weight_on_input: bool = False, expert_map=None):  # fmt: skip
    """The layer in f32 on the tensors' device, one expert at a time (a [T, H] f32 tensor)."""
    import torch

    x, w1, w2, wts = hidden.float(), w1.float(), w2.float(), topk_weights.float()
    ids = topk_ids.long() if expert_map is None else expert_map.long()[topk_ids.long()]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    inter = w1.shape[1] // 2
    act = torch.nn.functional.silu if activation == "silu" else torch.nn.functional.gelu
    for e in range(w1.shape[0]):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if not tok.numel():
            continue
        w = wts[tok, slot][:, None]
        xe = x[tok] * w if apply_router_weight_on_input else x[tok]
        h = xe @ w1[e].T
        y = (act(h[:, :inter]) * h[:, inter:]) @ w2[e].T
        out.index_add_(0, tok, y if apply_router_weight_on_input else y * w)
    return out


def dispatch_report() -> dict:
    """How this process's ``fused_experts`` calls chose their tiles (``moe_dispatch.dispatch_report``):
    routing-aware, from a table's static choice, the static rule (with the fallbacks for shapes without a
    fitted table, per table key), explicit ``config=``, under a CUDA-graph capture; and the latest choice."""
    from wavec.kernels import moe_dispatch

    return moe_dispatch.dispatch_report()
