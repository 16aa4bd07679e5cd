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

from dataclasses import dataclass, replace
from typing import Any

import wavec as wc
from wavec.errors import ArgumentError, OutOfBoundsError
from wavec.kernels import fused_moe_kernels as fk
from wavec.kernels.fastpath import Decisions, tensor_key
from wavec.kernels.indexing import hopper_target
from wavec.kernels.moe_align import MAX_EXPERTS
from wavec.kernels.moe_routing import topk_softmax
from wavec.knobs import knobs
from wavec.tuning.plan import mma_type_for

DTYPES = {"float16": wc.f16, "bfloat16": wc.bf16}
ACTIVATIONS = ("silu", "gelu")
DISPATCH = ("routing_aware", "static")
SWAP_BLOCK_MS = (8, 16, 32)  # swap-AB token blocks: the wgmma N axis (64 rows and up keep mma.sync's M axis)
SWAP_BLOCK_NS = (64, 128, 256)  # swap-AB weight rows: one to four warpgroups of m64
SWAP_TARGET = "sm_90a"
SWAP_MIN_TOKEN_TILE = 2 * fk.SWAP_THREADS  # token-tile elements: a warpgroup's copy moves 4 bytes a thread or more
WGMMA_BLOCK_MS = (64, 128)  # wgmma with the token block on M: one or two warpgroups of 64 rows
WGMMA_BLOCK_NS = (64, 128)  # its up-projection N tile (two accumulators: 256 would not fit the registers)
WGMMA_BLOCK_N_DOWNS = (64, 128, 256)


@dataclass(frozen=True, slots=True)
class MoeConfig:
    """Tiles of both GEMMs: the token block ``block_m`` (also the routing's padding), the up-projection's
    N tile over I (two accumulators: half the down-projection's), the down-projection's N tile over H,
    the K step, the pipeline stages and ``group_m``, the token blocks launched together along N (L2
    reuse of an expert's weight tiles; 1: row-major order).  ``swap``: both GEMMs on sm_90a ``wgmma``
    with the weight rows as the instruction's M operand and the token block (8, 16 or 32) as its N
    operand (``fused_moe_kernels.swap_tiles``; N tiles multiples of 64, ``swap_warpgroups`` warpgroups).
    ``split_k``: the down-projection's K (I) in that many slices on a third grid axis, each adding its
    partial atomically (``fused_moe_kernels.split_tiles``): at least 1, at most the K steps
    ``ceil(I / block_k)`` (checked with the shapes), with ``deterministic=False`` only (docs/moe.md
    "Split-K" says why).  ``wgmma``: both GEMMs on sm_90a ``wgmma`` with the token block (64 or 128) on the
    instruction's M axis, one warpgroup per 64 tokens (``fused_moe_kernels.wgmma_tiles``)."""

    block_m: int
    block_n: int
    block_n_down: int
    block_k: int
    stages: int
    group_m: int = 1
    swap: bool = False
    split_k: int = 1
    wgmma: bool = False

    @classmethod
    def parse(cls, config: Any) -> MoeConfig:
        """A ``MoeConfig``, or a dict with ``BLOCK_M``/``BLOCK_N``/``BLOCK_K``/``stages``/``GROUP_M``/``SWAP``/
        ``SPLIT_K``/``WGMMA`` (vLLM's ``BLOCK_SIZE_M``/``BLOCK_SIZE_N``/``BLOCK_SIZE_K``/``num_stages``/
        ``GROUP_SIZE_M`` too; ``BLOCK_N_DOWN`` defaults to ``BLOCK_N``, ``GROUP_M`` to 1, ``SWAP`` and ``WGMMA``
        to False, ``SPLIT_K`` to 1)."""
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
        known = {"BLOCK_M", "BLOCK_N", "BLOCK_N_DOWN", "BLOCK_K", "stages", "GROUP_M", "SWAP", "SPLIT_K", "WGMMA"}
        if set(c) - known or not {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(c):
            raise _bad(
                "config",
                "needs BLOCK_M, BLOCK_N, BLOCK_K (optional BLOCK_N_DOWN, stages, GROUP_M, SWAP, SPLIT_K, WGMMA), "
                f"got {sorted(config)}",
            )
        down = c.get("BLOCK_N_DOWN", c["BLOCK_N"])
        flags = (c.get("SWAP", False), c.get("SPLIT_K", 1), c.get("WGMMA", False))
        got = cls(c["BLOCK_M"], c["BLOCK_N"], down, c["BLOCK_K"], c["stages"], c.get("GROUP_M", 1), *flags)
        got.check()
        return got

    def check(self) -> None:
        for name, flag in (("SWAP", self.swap), ("WGMMA", self.wgmma)):
            if type(flag) is not bool:
                raise _bad("config", f"{name} must be True or False, got {flag!r}")
        if self.swap and self.wgmma:
            raise _bad("config", "SWAP (tokens on wgmma's N axis) and WGMMA (tokens on its M axis) exclude each other")
        if type(self.split_k) is not int or self.split_k < 1:
            raise _bad("config", f"SPLIT_K must be an int >= 1, got {self.split_k!r}")
        tiles = (
            (SWAP_BLOCK_MS, SWAP_BLOCK_NS, SWAP_BLOCK_NS) if self.swap
            else (WGMMA_BLOCK_MS, WGMMA_BLOCK_NS, WGMMA_BLOCK_N_DOWNS) if self.wgmma
            else ((16, 32, 64, 128), (32, 64, 128), (32, 64, 128, 256))
        )  # fmt: skip
        kind = " with SWAP" if self.swap else " with WGMMA" if self.wgmma else ""
        for name, v, allowed in (
            ("BLOCK_M", self.block_m, tiles[0]),
            ("BLOCK_N", self.block_n, tiles[1]),
            ("BLOCK_N_DOWN", self.block_n_down, tiles[2]),
            ("BLOCK_K", self.block_k, (16, 32, 64, 128)),
            ("stages", self.stages, (1, 2, 3, 4, 5)),
            ("GROUP_M", self.group_m, (1, 2, 4, 8, 16, 32, 64)),
        ):
            if type(v) is not int or v not in allowed:
                raise _bad("config", f"{name} must be one of {allowed}{kind}, got {v!r}")
        if self.swap and self.block_m * self.block_k < SWAP_MIN_TOKEN_TILE:
            raise _bad(
                "config",
                f"BLOCK_M x BLOCK_K must be at least {SWAP_MIN_TOKEN_TILE} with SWAP (4-byte copies of the token "
                f"tile by a warpgroup), got {self.block_m} x {self.block_k}",
            )

    def check_split(self, inter: int, deterministic: bool) -> None:
        """The split-K rule that needs the call: at most one slice per K step of I."""
        steps = -(-inter // self.block_k)
        if self.split_k > steps:
            raise _bad(
                "config",
                f"SPLIT_K {self.split_k} exceeds the down-projection's K steps (I = {inter} in steps of BLOCK_K "
                f"{self.block_k}: {steps})",
            )

    def unsplit(self) -> MoeConfig:
        """This configuration with ``split_k`` 1 (a table's split choice serving a deterministic call)."""
        return replace(self, split_k=1)

    def subs(self, down: bool) -> dict:
        n = self.block_n_down if down else self.block_n
        split = self.split_k if down and self.split_k > 1 else 0
        return fk.gemm_subs(self.block_m, n, self.block_k, self.stages, self.group_m, split)

    def swap_waves(self, down: bool) -> int | None:
        """The warpgroups of one swap-AB GEMM (``make_up``/``make_down``'s ``swap_waves``), else None."""
        if not self.swap:
            return None
        return fk.swap_warpgroups(self.block_m, self.block_n_down if down else self.block_n, self.block_k)

    @property
    def instruction(self) -> str:
        """The GEMMs' matrix instruction: "wgmma" (swap-AB or ``wgmma``: sm_90a only) or "mma_sync"."""
        return "wgmma" if self.swap or self.wgmma else "mma_sync"

    def make_gemm(self, down: bool, dtype, top_k: int, target: str | None, *, activation: str = "silu",
                  weighted_input: bool = False, deterministic: bool = True) -> wc.WaveKernel:  # fmt: skip
        """This configuration's ``moe_down`` (``down``) or ``moe_up`` for ``target``."""
        tpw, mma = mma_type_for(self.instruction, dtype, target)
        wgmma_waves = self.block_m // fk.SWAP_ROWS if self.wgmma else None
        if down:
            return fk.make_down(
                dtype, top_k, not weighted_input, deterministic, tpw, mma, self.block_m, self.swap_waves(True),
                self.split_k > 1, wgmma_waves,
            )  # fmt: skip
        return fk.make_up(
            dtype, top_k, activation, weighted_input, tpw, mma, self.block_m, self.swap_waves(False), wgmma_waves
        )

    def label(self) -> str:
        """``m64n64d128k64s3`` (``g8`` appended when GROUP_M > 1, ``w`` for swap-AB on wgmma, ``h`` for the
        token block on wgmma's M axis, ``x4`` for split-K over 4 slices): a short name for tables and logs."""
        g = f"g{self.group_m}" if self.group_m > 1 else ""
        w = "w" if self.swap else "h" if self.wgmma else ""
        x = f"x{self.split_k}" if self.split_k > 1 else ""
        return f"m{self.block_m}n{self.block_n}d{self.block_n_down}k{self.block_k}s{self.stages}{g}{w}{x}"


SWAP_STATIC = MoeConfig(8, 64, 128, 128, 3, swap=True)  # the static rule's decode tiles on sm_90a
SWAP_MIN_CTAS = 64  # the least up-projection grid (active experts x I tiles) the static rule swaps
SPLIT_STATIC = MoeConfig(16, 64, 128, 64, 3, split_k=4)  # the static rule's split-K decode tiles on sm_90a
# the static rule's large token blocks on sm_90a: wgmma from 32 tokens per expert (balanced), the 128-token
# block from 96; on an H200 1.00-1.74x the mma.sync tiles over six models x T 128-4096 (session 18,
# docs/moe.md "Large token blocks on wgmma"); below 32 the mma.sync tiles were as fast or faster
WGMMA_STATIC = MoeConfig(64, 128, 128, 64, 4, wgmma=True)
WGMMA_LARGE = MoeConfig(128, 128, 256, 64, 4, wgmma=True)
WGMMA_MIN_TOKENS, WGMMA_LARGE_TOKENS = 32, 96
DEEP_K = 4096  # a K (reduction) at least this deep: 4 stages pay; with a sub-wave down grid, split-K does
SUB_WAVE = 0.5  # a decode grid below this share of the SMs is "far below one wave"


def static_config(
    tokens: int, top_k: int, experts: int, wgmma: bool = False, inter: int = 0, hidden: int = 0, sms: int = 0
) -> MoeConfig:
    """The static choice: BLOCK_M the smallest of 16, 32, 64, 128 holding the tokens per expert at
    balanced routing (T*k/E; 128 beyond), so decode pads little and prefill uses large tiles; the other
    tiles follow from it (``tiles_for_block``).  ``wgmma`` (an sm_90a GPU of ``sms`` SMs):
    ``SPLIT_STATIC`` where the split-K region rule holds at this T (a down grid of the active experts x
    ``hidden`` / 128 tiles below ``SUB_WAVE`` of the SMs, ``inter`` at least ``DEEP_K``: Mixtral at T = 1;
    on an H200 1.24-1.28x its unsplit tiles in one run, deterministic combine; swap-AB, timed in another run,
    took 141 us at Mixtral-TP2 where this takes 113, docs/moe.md);
    else up to 8 tokens per expert take ``SWAP_STATIC``, swap-AB with the token block on wgmma's N axis,
    where the up-projection over ``inter`` has ``SWAP_MIN_CTAS`` tiles or more at balanced routing (on an
    H200 1.06-1.22x the mma.sync tiles at T = 1-32 for OLMoE, Qwen3-30B-A3B, DeepSeek-V2-Lite and Mixtral;
    0.87x at DeepSeek-V3-TP8's T = 1, 8 experts x 4 tiles of I = 256; docs/moe.md); from
    ``WGMMA_MIN_TOKENS`` tokens per expert ``WGMMA_STATIC``, from ``WGMMA_LARGE_TOKENS`` ``WGMMA_LARGE``
    (the token block on wgmma's M axis)."""
    per_expert = tokens * top_k / max(experts, 1)
    active = min(experts, tokens * top_k)
    if wgmma and split_region(active, hidden, inter, sms):
        return SPLIT_STATIC
    ctas = active * -(-inter // SWAP_STATIC.block_n)
    if wgmma and per_expert <= SWAP_STATIC.block_m and ctas >= SWAP_MIN_CTAS:
        return SWAP_STATIC
    if wgmma and per_expert >= WGMMA_MIN_TOKENS:
        return WGMMA_LARGE if per_expert >= WGMMA_LARGE_TOKENS else WGMMA_STATIC
    return tiles_for_block(next((b for b in (16, 32, 64) if per_expert <= b), 128))


def split_region(active: int, hidden: int, inter: int, sms: int) -> bool:
    """Split-K's region (the static rule's and the tuner's, ``tuning.moe.regions``): a deep I (at least
    ``DEEP_K``) under a down-projection grid of ``active`` experts x ``hidden`` / 128 tiles that fills less
    than ``SUB_WAVE`` of the ``sms`` SMs."""
    down_ctas = active * -(-hidden // SPLIT_STATIC.block_n_down)
    return inter >= DEEP_K and 0 < down_ctas < SUB_WAVE * sms


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
    if expert_map.device.type == "cpu":
        check_map_values(expert_map, s.experts)
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
    """The compiled launches of one configuration."""

    up: Any
    down: Any
    combine: Any


def plan_kernels(s: _Shape, cfg: MoeConfig, flags: tuple, device: Any, backend: str | None) -> _Plan:
    """``moe_up``, ``moe_down`` and (deterministic) ``moe_combine`` for ``cfg``, compiled once per key."""
    activation, weighted_input, deterministic, _mapped = flags
    checked = knobs.check_bounds  # in the keys: kernels compiled with the checks differ
    target = _target(backend, device)
    # wgmma (swap-AB or not) is sm_90a-only: the emulator runs the sm_90a module; a CUDA device was checked
    gemm_target = SWAP_TARGET if cfg.instruction == "wgmma" else target
    tpw, _mma = mma_type_for(cfg.instruction, s.dtype, gemm_target)
    gemm = dict(activation=activation, weighted_input=weighted_input, deterministic=deterministic)

    def base(c: MoeConfig) -> tuple:
        return (s.dtype.name, s.top_k, c, gemm_target, backend, checked)

    up = _compiled(
        ("up", activation, weighted_input, *base(cfg.unsplit())),  # one up-projection for every split
        lambda: cfg.make_gemm(False, s.dtype, s.top_k, gemm_target, **gemm), cfg.subs(False), gemm_target, backend,
    )  # fmt: skip
    down = _compiled(
        ("down", weighted_input, deterministic, *base(cfg)),
        lambda: cfg.make_gemm(True, s.dtype, s.top_k, gemm_target, **gemm), cfg.subs(True), gemm_target, backend,
    )  # fmt: skip
    combine = None
    if deterministic:
        split = cfg.split_k > 1
        combine = _compiled(
            ("combine", s.dtype.name, s.top_k, cfg.split_k, target, backend, checked),
            lambda: fk.make_combine(s.dtype, tpw, split=split),
            fk.combine_subs(s.top_k, tpw, split=cfg.split_k),
            target, backend,
        )  # fmt: skip
    return _Plan(up, down, combine)


def remap_kernel(mapped: bool, device: Any, backend: str | None) -> Any:
    """The ``moe_remap`` kernel when the ids go through a map (``expert_map``, or the bounds check on CUDA)."""
    checked = knobs.check_bounds
    if not (mapped or (checked and getattr(device, "type", None) == "cuda")):
        return None
    target = _target(backend, device)
    tpw, _mma = mma_type_for("mma_sync", wc.bf16, target)
    return _compiled(
        ("remap", target, backend, checked), lambda: fk.make_remap(tpw), fk.remap_subs(tpw), target, backend
    )


def check_swap_target(device: Any, backend: str | None) -> None:
    """Swap-AB and WGMMA configurations run on wgmma: a CUDA device must be an sm_90a GPU (CPU tensors run
    the sm_90a module on the emulator)."""
    from wavec.compiler import default_backend

    if getattr(device, "type", None) == "cuda" and (backend or default_backend()) != "emulator":
        if _target(backend, device) != SWAP_TARGET:
            raise _bad("config", f"SWAP / WGMMA run on wgmma: needs an {SWAP_TARGET} (Hopper) GPU, got {device}")


def check_id_values(topk_ids: Any, route_experts: int) -> None:
    """The emulator's check of every id against [0, route_experts) (a GPU's ids are checked only by
    ``WAVEC_CHECK_BOUNDS=1``'s ``moe_remap``)."""
    if topk_ids.numel():
        lo, hi = int(topk_ids.min()), int(topk_ids.max())
        if lo < 0 or hi >= route_experts:
            raise _bad("topk_ids", f"holds {lo if lo < 0 else hi}, outside [0, {route_experts})")


def check_map_values(expert_map: Any, experts: int) -> None:
    if expert_map.numel() and not ((expert_map >= -1) & (expert_map < experts)).all():
        raise _bad("expert_map", f"values must be local experts in [0, {experts}) or -1")


def bad_ids(route_experts: int, e: OutOfBoundsError) -> ArgumentError:
    return _bad("topk_ids", f"holds an expert id outside [0, {route_experts}) (WAVEC_CHECK_BOUNDS): {e}")


_IDENTITY: dict = {}


def identity(experts: int, device: Any) -> Any:
    """``arange(experts)`` as int32 on ``device``: the map of the bounds-checked remap without ``expert_map``."""
    import torch

    key = (experts, device)
    if key not in _IDENTITY:
        _IDENTITY[key] = torch.arange(experts, dtype=torch.int32, device=device)
    return _IDENTITY[key]


_DECIDED = Decisions("fused_experts")  # (tensor keys, options) -> moe_step.Step


def fused_experts(
    hidden, w1, w2, topk_weights, topk_ids, *, activation: str = "silu", apply_router_weight_on_input: bool = False,
    global_num_experts: int = -1, expert_map=None, dispatch: str = "routing_aware", config=None,
    deterministic: bool = True, out=None, backend: str | None = None,
):  # fmt: skip
    """The MoE experts of vLLM's ``fused_experts`` (module docstring): hidden [T, H] bf16/f16, w1 [E, 2I,
    H] (gate rows first), w2 [E, H, I], topk_weights [T, k] f32/bf16/f16, topk_ids [T, k] int32/int64
    (global ids with ``expert_map`` [global_E] int32: local id or -1 to skip).  Returns ``out`` (a new
    [T, H] tensor of hidden's dtype when None).  CPU tensors run on the emulator.  A repeated call (same
    tensor keys and options) is one lookup and the prepared launches (``moe_step``)."""
    key = (
        tensor_key(hidden),
        tensor_key(w1),
        tensor_key(w2),
        tensor_key(topk_weights),
        tensor_key(topk_ids),
        tensor_key(expert_map),
        tensor_key(out),
        activation,
        apply_router_weight_on_input,
        global_num_experts,
        dispatch,
        config if config is None or type(config) is MoeConfig else _config_key(config),
        deterministic,
        backend,
        knobs.check_bounds,
        type(apply_router_weight_on_input),
        type(global_num_experts),
        type(deterministic),
    )  # fmt: skip  (the types: 1 and 1.0 hash as True does; the full path refuses them)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _step(hidden, w1, w2, topk_weights, topk_ids, activation,
                                           apply_router_weight_on_input, global_num_experts, expert_map, dispatch,
                                           config, deterministic, out, backend))  # fmt: skip
    return run(hidden, w1, w2, topk_weights, topk_ids, expert_map, out)


def _config_key(config: Any) -> Any:
    """A dict's items (hashable when its values are), else the object in a list: never remembered, so
    the full path validates it and raises."""
    return tuple(config.items()) if isinstance(config, dict) else [config]


def _step(hidden, w1, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, global_num_experts,
          expert_map, dispatch, config, deterministic, out, backend):  # fmt: skip
    """Validate a call in full and build its ``moe_step.Step`` (which checks the emulator's ids on every
    call)."""
    from wavec.kernels.moe_step import Step

    s = _check_shapes(hidden, w1, w2, topk_weights, topk_ids)
    route_experts = _check_options(s, activation, global_num_experts, expert_map, dispatch, hidden.device)
    if out is not None:
        _tensor("out", out, 2, (hidden.dtype,), hidden.device)
        if tuple(out.shape) != (s.tokens, s.hidden) or not out.is_contiguous():
            raise _bad("out", f"must be a contiguous [{s.tokens}, {s.hidden}] tensor, got {list(out.shape)}")
    explicit = None if config is None else MoeConfig.parse(config)
    if explicit is not None and explicit.instruction == "wgmma":
        check_swap_target(hidden.device, backend)
    for arg, flag in (("apply_router_weight_on_input", apply_router_weight_on_input), ("deterministic", deterministic)):
        if type(flag) is not bool:
            raise _bad(arg, f"must be a bool, got {flag!r}")
    if explicit is not None:
        explicit.check_split(s.inter, deterministic)
    flags = (activation, apply_router_weight_on_input, deterministic, expert_map is not None)
    return Step(s, flags, route_experts, explicit, dispatch, hidden, topk_weights, topk_ids, expert_map, out, backend)


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
