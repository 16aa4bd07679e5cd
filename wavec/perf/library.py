"""wavec's library kernels as the performance model sees them: compiled for a GPU's target on the CPU (the
emulator backend: no device needed), with the tensor shapes of a launch.

Requires: the MLIR compiler (``wc.compile`` on a cache miss); ptxas only for the register count.

Guarantees: :func:`library_launch` returns a :class:`Launch` (compiled kernel, tensor shapes, integer
scalars, views) for ``gemm`` (M,N,K; the ``matmul`` plan of the shape without split-K, C in the inputs'
dtype), ``attention`` (B,H,S,D[,KVH[,SKV]]), ``softmax``, ``rms_norm`` and ``layer_norm`` (M,N, contiguous
rows at a 16-byte boundary: the odd-row kernel of ``rows_odd`` where the library takes it, with its
tables, scalars and the views of x that ``decompose(views=)`` counts once), ``moe_up`` and ``moe_down``
(T,H,I,E: ``fused_experts``' two GEMMs at the static rule's mma.sync tiles, the performance model's MoE
family, under a routing: uniform, Zipf-skewed or an expert histogram, ``moe_ids``), compiled exactly as
the library compiles them for that target; a bad kernel name, shape count, mma kind or routing raises
:class:`~wavec.errors.OptionError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from ..errors import OptionError
from .gpus import GPUSpec

__all__ = ["KERNELS", "Launch", "library_launch", "target_for"]


class Launch(NamedTuple):
    """A library launch as ``decompose(compiled, *shapes, views=views, **scalars)`` takes it."""

    compiled: Any
    shapes: list[Any]  # a shape each, or an integer tensor's values where the kernel reads them (MoE's routing)
    scalars: Mapping[str, int] = MappingProxyType({})
    views: tuple[int, ...] | None = None


KERNELS = ("gemm", "attention", "softmax", "rms_norm", "layer_norm", "moe_up", "moe_down")
_TARGETS = {"sm_90": "sm_90", "sm_80": "sm_80", "sm_89": "sm_80", "sm_100": "sm_90", "gfx942": "gfx942"}
_ARITY = {
    "gemm": (3,), "attention": (4, 5, 6), "softmax": (2,), "rms_norm": (2,), "layer_norm": (2,), "moe_up": (4,),
    "moe_down": (4,),
}  # fmt: skip


def target_for(gpu: GPUSpec, mma: str) -> str:
    """The wavec target that runs on ``gpu``: wgmma needs sm_90a (Hopper); sm_89 and sm_100 run the sm_80 /
    sm_90 mma.sync code."""
    if mma == "wgmma":
        if gpu.arch != "sm_90":
            raise OptionError(option="mma", message=f"wgmma runs on Hopper (sm_90) only, not on {gpu.name}")
        return "sm_90a"
    return _TARGETS[gpu.arch]


def library_launch(
    kernel: str, sizes: tuple[int, ...], gpu: GPUSpec, dtype: str = "f16", mma: str = "mma_sync", causal: bool = False,
    top_k: int = 8, routing: str = "uniform",
) -> Launch:  # fmt: skip
    import wavec as wc

    if kernel not in KERNELS:
        raise OptionError(option="kernel", message=f"unknown library kernel {kernel!r}; known: {', '.join(KERNELS)}")
    if len(sizes) not in _ARITY[kernel]:
        raise OptionError(option="shapes", message=f"{kernel} takes {' or '.join(map(str, _ARITY[kernel]))} sizes")
    if mma not in ("mma_sync", "wgmma"):
        raise OptionError(option="mma", message=f"mma must be mma_sync or wgmma, got {mma!r}")
    target = target_for(gpu, mma)
    wdtype = getattr(wc, dtype)
    if kernel == "gemm":
        return _gemm(sizes, gpu, wdtype, mma, target)
    if kernel == "attention":
        return _attention(sizes, wdtype, mma, causal, target)
    if kernel.startswith("moe_"):
        return _moe(kernel, sizes, gpu, dtype, top_k, routing)
    return _rows(kernel, sizes, wdtype, target)


def moe_ids(tokens: int, experts: int, top_k: int, routing: str) -> np.ndarray:
    """[tokens, top_k] expert ids, distinct per token: ``uniform`` or ``zipfA`` (``cases.moe_routing``, seed
    0), or ``counts:c0/c1/...`` (how many of the ``tokens * top_k`` slots each expert takes, each at most
    ``tokens``: filled slot by slot down the tokens, so an expert's run never meets one token twice)."""
    from .cases import moe_routing

    if top_k < 1 or top_k > experts:
        raise OptionError(option="topk", message=f"top-k must be in [1, {experts}] (the experts), got {top_k}")
    if not routing.startswith("counts:"):
        return moe_routing(tokens, experts, top_k, routing, 0)
    try:
        counts = [int(c) for c in routing[len("counts:") :].split("/")]
    except ValueError:
        raise OptionError(option="routing", message=f"counts:c0/c1/... expects integers, got {routing!r}") from None
    problem = None
    if len(counts) != experts:
        problem = f"needs {experts} counts (one per expert), got {len(counts)}"
    elif sum(counts) != tokens * top_k:
        problem = f"must sum to T * k = {tokens * top_k}, got {sum(counts)}"
    elif min(counts) < 0 or max(counts) > tokens:
        problem = f"each count must be in 0..{tokens} (an expert takes a token once), got {min(counts)}..{max(counts)}"
    if problem:
        raise OptionError(option="routing", message=f"counts:c0/c1/... {problem}")
    slots = np.repeat(np.arange(experts, dtype=np.int32), counts)
    return np.ascontiguousarray(slots.reshape(top_k, tokens).T)


def _moe(kernel: str, sizes: tuple[int, ...], gpu: GPUSpec, dtype: str, top_k: int, routing: str) -> Launch:
    from wavec.kernels.fused_moe import static_config

    from .cases import Case, compile_case, moe_bindings, target_of

    t, h, inter, e = sizes
    cfg = static_config(t, top_k, e)  # (wgmma=False: the mma.sync tiles the MoE family was trained on)
    config = f"bm={cfg.block_m};bn={cfg.block_n};bnd={cfg.block_n_down};bk={cfg.block_k};st={cfg.stages};k={top_k}"
    case = Case("moe", kernel, dtype, f"{config};dist=uniform;seed=0", f"{t}x{h}x{inter}x{e}")
    binds, _scalars = moe_bindings(case, moe_ids(t, e, top_k, routing))
    shapes = [b.data if b.data is not None else b.shape for b in binds]
    return Launch(compile_case(case, target_of(case, gpu)), shapes)


def _gemm(sizes: tuple[int, ...], gpu: GPUSpec, dtype: Any, mma: str, target: str) -> Launch:
    import wavec as wc
    from wavec.kernels.gemm import build_gemm
    from wavec.tuning.plan import GemmRequest, plan_matmul

    m, n, k = sizes
    plan = plan_matmul(m, n, k, GemmRequest(mma=mma, split=1), gpu.name)
    # C in the inputs' dtype, as ``matmul`` writes it by default
    compiled = wc.compile(build_gemm(plan, dtype, dtype, target), plan.subs, target=target, backend="emulator")
    return Launch(compiled, [(m, k), (n, k)])


def _attention(sizes: tuple[int, ...], dtype: Any, mma: str, causal: bool, target: str) -> Launch:
    import wavec as wc
    from wavec.kernels import attention as A

    b, h, s, d, *rest = sizes
    kvh = rest[0] if rest else h
    skv = rest[1] if len(rest) > 1 else s
    subs, waves = A.attention_config(d, s, None, mma, causal)
    kernel = A.make_attention(dtype, "bhsd", causal, waves, mma, split_epilogue=A.SPLIT_EPILOGUE[mma])
    compiled = wc.compile(kernel, subs, target=target, backend="emulator")
    return Launch(compiled, [(b, h, s, d), (b, kvh, skv, d), (b, kvh, skv, d)])


def _rows(kind: str, sizes: tuple[int, ...], dtype: Any, target: str) -> Launch:
    import wavec as wc
    from wavec.kernels import rows as R
    from wavec.kernels import rows_odd as O

    m, n = sizes
    vectors = {"softmax": 0, "rms_norm": 1, "layer_norm": 2}[kind]
    if O.odd_config(dtype, n, kind, n) is None or not O.starts_fit(m, n, n):
        compiled = wc.compile(*R.kernel_for(kind, dtype, n), target=target, backend="emulator")
        return Launch(compiled, [(m, n)] + [(n,)] * vectors)
    return _odd_rows(kind, m, n, vectors, dtype, target)


def _odd_rows(kind: str, m: int, n: int, vectors: int, dtype: Any, target: str) -> Launch:
    """``rows_odd``'s launch for contiguous rows [m, n] at a 16-byte boundary: ``odd_args`` on meta tensors."""
    import torch

    from wavec.kernels import rows_odd as O
    from wavec.runtime.trace import storage_groups

    tdt = dtype.torch()
    x = torch.empty(m, n, dtype=tdt, device="meta")
    vec = 16 // x.element_size()
    tables = O.uses_tables(kind, m, n, x.element_size())
    compiled = O.odd_kernel(kind, dtype, n, n, "emulator", tables, target=target)
    given = [torch.empty(n, dtype=tdt, device="meta") for _ in range(vectors)]  # (the weight and bias apart)
    if tables:
        given += [O.shifted_table(v, vec, (n - vec + 1) // vec) for v in given]
    inner = torch.empty(O.inner_size(kind, dtype, n, n), dtype=torch.int8, device="meta")
    starts = torch.empty(m, dtype=torch.int32, device="meta")
    out = torch.empty(-(-m * n // vec) * vec, dtype=tdt, device="meta")
    args = O.odd_args(x, out, 0, starts, inner, tuple(given), (), O.odd_reread(dtype, n, kind, n, tables))
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return Launch(compiled, [tuple(t.shape) for t in tensors], {"n": n, "gap": 0}, storage_groups(tensors))
