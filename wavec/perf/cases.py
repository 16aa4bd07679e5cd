"""One row of the performance-model dataset as a reproducible kernel launch: the kernel (family, dtype,
configuration) and its launch sizes, compiled the same way on the GPU machine (which times it) and on the
CPU (which decomposes it into features).

Requires: the MLIR compiler for :func:`compile_case`; torch (CPU) for MoE routing (``moe_align.reference``).

Guarantees: a :class:`Case` is plain strings (``config`` is ``key=value`` pairs joined by ``;``, ``shape``
sizes joined by ``x``), so a CSV row names it completely; :func:`compile_case` builds exactly the kernel the
row was timed with, for an explicit target (``target_of``: sm_90a for wgmma and MoE on Hopper, as the
library picks it, else the GPU's own); :func:`bindings` gives every tensor of the launch (shape, dtype,
whether it is written, and the values of integer tensors: MoE's sorted ids and block experts, computed on
the CPU from a seeded routing) and the scalars, in binding order.  A bad family, kernel or configuration
raises :class:`~wavec.errors.OptionError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionError
from .gpus import GPUSpec

__all__ = [
    "Case",
    "Binding",
    "FAMILIES",
    "compile_case",
    "kernel_key",
    "bindings",
    "target_of",
    "gemm_config",
    "parse_config",
]

FAMILIES = ("gemm_mma_sync", "gemm_wgmma", "attention", "rows", "elementwise", "moe")
KERNELS = {
    "gemm_mma_sync": ("gemm",),
    "gemm_wgmma": ("gemm",),
    "attention": ("attention",),
    "rows": ("softmax", "rms_norm", "layer_norm"),
    "elementwise": ("copy", "silu_and_mul"),
    "moe": ("moe_up", "moe_down"),
}


@dataclass(frozen=True)
class Case:
    family: str
    kernel: str
    dtype: str
    config: str
    shape: str

    def params(self) -> dict[str, str]:
        return parse_config(self.config)

    def sizes(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.shape.split("x"))

    def check(self) -> None:
        if self.family not in KERNELS or self.kernel not in KERNELS[self.family]:
            raise OptionError(option="case", message=f"unknown family/kernel {self.family}/{self.kernel}")
        if self.dtype not in ("f16", "bf16"):
            raise OptionError(option="case", message=f"dtype must be f16 or bf16, got {self.dtype!r}")


@dataclass(frozen=True)
class Binding:
    """One tensor of a launch: its shape and dtype name, whether the kernel writes it, and (integer
    tensors the kernel reads to decide what to do) its values."""

    shape: tuple[int, ...]
    dtype: str
    output: bool = False
    data: np.ndarray | None = None


def parse_config(config: str) -> dict[str, str]:
    out = {}
    for item in filter(None, config.split(";")):
        key, eq, value = item.partition("=")
        if not eq:
            raise OptionError(option="config", message=f"expected key=value items joined by ';', got {config!r}")
        out[key] = value
    return out


def _join(items: dict[str, Any]) -> str:
    return ";".join(f"{k}={v}" for k, v in items.items())


def gemm_config(plan: Any, c_f32: bool = False) -> str:
    """A ``GemmPlan`` (split 1) as a case configuration; C in the inputs' dtype (``matmul``'s default) or,
    with ``c_f32``, in f32 (the tuner's timings)."""
    s = plan.schedule
    flags = {"ws": s.warp_specialize, "pe": s.persistent, "se": s.split_epilogue, "pf": s.prefetch_fragments}
    head = {"bm": plan.block_m, "bn": plan.block_n, "bk": plan.block_k, "st": plan.stages, "gm": plan.group_m}
    tail = {"c": "f32"} if c_f32 else {}
    return _join({**head, "w": f"{plan.waves[0]}x{plan.waves[1]}", **{k: int(v) for k, v in flags.items()}, **tail})


def _gemm_plan(p: dict[str, str], mma: str) -> Any:
    from ..tuning.plan import GemmPlan, schedule

    w0, w1 = (int(x) for x in p["w"].split("x"))
    flags = {"warp_specialize": "ws", "persistent": "pe", "split_epilogue": "se", "prefetch_fragments": "pf"}
    sched = schedule(**{name: p.get(key, "0") == "1" for name, key in flags.items()})
    bm, bn, bk, st, gm = (int(p[k]) for k in ("bm", "bn", "bk", "st", "gm"))
    return GemmPlan(bm, bn, bk, st, gm, (w0, w1), mma, sched)


def target_of(case: Case, gpu: GPUSpec) -> str:
    """The target the case runs on ``gpu``: wgmma kernels and (on Hopper) MoE's GEMMs sm_90a, as the
    library compiles them there; everything else the GPU's mma.sync target (``library.target_for``)."""
    from .library import target_for

    params = case.params()
    wgmma = case.family == "gemm_wgmma" or params.get("mma") == "wgmma"
    if case.family == "moe" and gpu.arch == "sm_90":
        return "sm_90a"
    return target_for(gpu, "wgmma" if wgmma else "mma_sync")


_COMPILED: dict = {}


ROUTING_KEYS = ("dist", "seed")  # MoE's routing: the launch's data, not the kernel


def kernel_key(case: Case) -> tuple[str, str, str, str]:
    """What decides the compiled kernel: family, kernel, dtype and the configuration without routing (and
    attention's head dim, which its kernels are compiled for)."""
    params = {k: v for k, v in case.params().items() if k not in ROUTING_KEYS}
    if case.family == "attention":
        params["d"] = str(case.sizes()[-1])
    config = _join(params)
    return (case.family, case.kernel, case.dtype, config)


def compile_case(case: Case, target: str, backend: str = "emulator") -> Any:
    """The compiled kernel of ``case`` for ``target`` (memoised per process by ``kernel_key``)."""
    case.check()
    key = (*kernel_key(case), target, backend)
    if key not in _COMPILED:
        _COMPILED[key] = _compile(case, target, backend)
    return _COMPILED[key]


def _compile(case: Case, target: str, backend: str) -> Any:
    import wavec as wc

    p, dtype = case.params(), getattr(wc, case.dtype)
    if case.family.startswith("gemm"):
        from ..kernels.gemm import build_gemm

        plan = _gemm_plan(p, "wgmma" if case.family == "gemm_wgmma" else "mma_sync")
        out = wc.f32 if p.get("c") == "f32" else dtype
        return wc.compile(build_gemm(plan, dtype, out, target), plan.subs, target=target, backend=backend)
    if case.family == "attention":
        from ..kernels import attention as A

        mma, causal = p["mma"], p["causal"] == "1"
        d = case.sizes()[-1]
        subs, waves = A.attention_config(d, None, (int(p["bm"]), int(p["bn"]), int(p["w"]), int(p["st"])), mma)
        kernel = A.make_attention(dtype, "bhsd", causal, waves, mma, split_epilogue=A.SPLIT_EPILOGUE[mma])
        return wc.compile(kernel, subs, target=target, backend=backend)
    if case.family == "rows":
        from ..kernels import rows as R

        block_n, loop, vec, waves = int(p["bn"]), p["loop"] == "1", int(p["vec"]), int(p["wpr"])
        extra = {"block_n": block_n} if case.kernel == "layer_norm" else {}
        kernel = R.MAKERS[case.kernel](dtype, loop=loop, vec=vec, waves_per_row=waves, **extra)
        return wc.compile(kernel, {R.BLOCK_N: block_n}, target=target, backend=backend)
    if case.family == "elementwise":
        from ..kernels import elementwise as E

        subs = {E.BLOCK_M: int(p["bm"]), E.BLOCK_N: int(p["bn"])}
        if case.kernel == "copy":
            return wc.compile(E.make_copy(dtype), subs, target=target, backend=backend)
        return wc.compile(
            E.make_silu_and_mul(dtype, vec=int(p["vec"])), {**subs, E.TWO: 2}, target=target, backend=backend
        )
    return _compile_moe(case, p, dtype, target, backend)


def _compile_moe(case: Case, p: dict[str, str], dtype: Any, target: str, backend: str) -> Any:
    import wavec as wc

    from ..kernels import fused_moe_kernels as fk
    from ..tuning.plan import mma_type_for

    tpw, mma = mma_type_for("mma_sync", dtype, target)
    bm, top_k = int(p["bm"]), int(p["k"])
    if case.kernel == "moe_up":
        kernel = fk.make_up(dtype, top_k, "silu", False, tpw, mma, bm)
        subs = fk.gemm_subs(bm, int(p["bn"]), int(p["bk"]), int(p["st"]))
    else:
        kernel = fk.make_down(dtype, top_k, True, True, tpw, mma, bm)
        subs = fk.gemm_subs(bm, int(p["bnd"]), int(p["bk"]), int(p["st"]))
    return wc.compile(kernel, subs, target=target, backend=backend)


# ----------------------------------------------------------------------------- launches


def bindings(case: Case) -> tuple[list[Binding], list[float]]:
    """(tensors in binding order, scalars) of the case's launch."""
    case.check()
    sz, dt = case.sizes(), case.dtype
    if case.family.startswith("gemm"):
        m, n, k = sz
        c = case.params().get("c", dt)
        return [Binding((m, k), dt), Binding((n, k), dt), Binding((m, n), c, True)], []
    if case.family == "attention":
        b, h, kvh, s, d = sz
        q, kv = Binding((b, h, s, d), dt), Binding((b, kvh, s, d), dt)
        return [q, kv, kv, Binding((b, h, s, d), dt, True)], [1.0 / math.sqrt(d)]
    if case.family == "rows":
        m, n = sz
        vectors = {"softmax": 0, "rms_norm": 1, "layer_norm": 2}[case.kernel]
        scalars = [] if case.kernel == "softmax" else [1e-5, 1.0 / n]
        return [Binding((m, n), dt), *[Binding((n,), dt)] * vectors, Binding((m, n), dt, True)], scalars
    if case.family == "elementwise":
        m, n = sz
        src = Binding((m, n), dt) if case.kernel == "copy" else Binding((m, 2, n), dt)
        return [src, Binding((m, n), dt, True)], []
    return _moe_bindings(case)


def moe_routing(tokens: int, experts: int, top_k: int, dist: str, seed: int) -> np.ndarray:
    """[tokens, top_k] distinct expert ids per token: ``uniform``, or ``zipfA`` (expert popularity
    proportional to rank^-A, as skewed real routers are), from a fixed seed."""
    rng = np.random.default_rng(seed)
    weight: np.ndarray = np.ones(experts)
    if dist.startswith("zipf"):
        weight = (1.0 / np.arange(1, experts + 1) ** float(dist[4:]))[rng.permutation(experts)]
    elif dist != "uniform":
        raise OptionError(option="config", message=f"routing dist must be uniform or zipfA, got {dist!r}")
    # Gumbel top-k: k distinct experts per token, each drawn in proportion to its weight
    keys = np.log(weight)[None, :] + rng.gumbel(size=(tokens, experts))
    return np.argsort(-keys, axis=1)[:, :top_k].astype(np.int32)


def _moe_bindings(case: Case) -> tuple[list[Binding], list[float]]:
    p = case.params()
    t, _h, _inter, e = case.sizes()
    return moe_bindings(case, moe_routing(t, e, int(p["k"]), p["dist"], int(p["seed"])))


def moe_bindings(case: Case, ids: np.ndarray) -> tuple[list[Binding], list[float]]:
    """The MoE case's launch for the expert ids ``ids`` [T, k] (the routing: its sorted ids and expert
    blocks as data bindings)."""
    import torch

    from ..kernels.fused_moe import grid_rows
    from ..kernels.moe_align import reference

    t, h, inter, e = case.sizes()
    p = case.params()
    bm, top_k, dt = int(p["bm"]), int(p["k"]), case.dtype
    sorted_ids, expert_ids, _total, _counts = reference(torch.from_numpy(ids), e, bm)
    rows = grid_rows(t * top_k, e, bm)
    sorted_np, experts_np = sorted_ids[:rows].numpy(), expert_ids.numpy()
    routed = [Binding(sorted_np.shape, "i32", data=sorted_np), Binding(experts_np.shape, "i32", data=experts_np)]
    weights = Binding((t * top_k,), "f32")
    if case.kernel == "moe_up":
        out = Binding((rows, inter), dt, True)
        return [Binding((t, h), dt), *routed, Binding((e, 2, inter, h), dt), weights, out], []
    out = Binding((t * top_k + 1, h), dt, True)
    return [Binding((rows, inter), dt), *routed, Binding((e, h, inter), dt), weights, out], []


def decompose_case(case: Case, gpu: GPUSpec, compiled: Any = None) -> Any:
    """``decompose`` of the case's launch on ``gpu`` (compiling it for ``target_of`` unless given)."""
    from .decompose import decompose

    kernel = compiled if compiled is not None else compile_case(case, target_of(case, gpu))
    binds, _scalars = bindings(case)
    shapes = [b.data if b.data is not None else b.shape for b in binds]
    return decompose(kernel, *shapes, gpu=gpu)
