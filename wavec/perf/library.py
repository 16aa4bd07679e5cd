"""wavec's library kernels as the performance model sees them: compiled for a GPU's target on the CPU (the
emulator backend: no device needed), with the tensor shapes of a launch.

Requires: the MLIR compiler (``wc.compile`` on a cache miss); ptxas only for the register count.

Guarantees: :func:`library_launch` returns ``(compiled kernel, tensor shapes)`` for ``gemm`` (M,N,K; the
``matmul`` plan of the shape without split-K, C in the inputs' dtype), ``attention`` (B,H,S,D[,KVH[,SKV]]), ``softmax``,
``rms_norm`` and ``layer_norm`` (M,N), compiled exactly as the library compiles them for that target;
a bad kernel name, shape count or mma kind raises :class:`~wavec.errors.OptionError`.
"""

from __future__ import annotations

from typing import Any

from ..errors import OptionError
from .gpus import GPUSpec

__all__ = ["KERNELS", "library_launch", "target_for"]

KERNELS = ("gemm", "attention", "softmax", "rms_norm", "layer_norm")
_TARGETS = {"sm_90": "sm_90", "sm_80": "sm_80", "sm_89": "sm_80", "sm_100": "sm_90", "gfx942": "gfx942"}
_ARITY = {"gemm": (3,), "attention": (4, 5, 6), "softmax": (2,), "rms_norm": (2,), "layer_norm": (2,)}


def target_for(gpu: GPUSpec, mma: str) -> str:
    """The wavec target that runs on ``gpu``: wgmma needs sm_90a (Hopper); sm_89 and sm_100 run the sm_80 /
    sm_90 mma.sync code."""
    if mma == "wgmma":
        if gpu.arch != "sm_90":
            raise OptionError(option="mma", message=f"wgmma runs on Hopper (sm_90) only, not on {gpu.name}")
        return "sm_90a"
    return _TARGETS[gpu.arch]


def library_launch(
    kernel: str, sizes: tuple[int, ...], gpu: GPUSpec, dtype: str = "f16", mma: str = "mma_sync", causal: bool = False
) -> tuple[Any, list[tuple[int, ...]]]:
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
    return _rows(kernel, sizes, wdtype, target)


def _gemm(sizes: tuple[int, ...], gpu: GPUSpec, dtype: Any, mma: str, target: str) -> tuple[Any, list]:
    import wavec as wc
    from wavec.kernels.gemm import build_gemm
    from wavec.tuning.plan import GemmRequest, plan_matmul

    m, n, k = sizes
    plan = plan_matmul(m, n, k, GemmRequest(mma=mma, split=1), gpu.name)
    # C in the inputs' dtype, as ``matmul`` writes it by default
    compiled = wc.compile(build_gemm(plan, dtype, dtype, target), plan.subs, target=target, backend="emulator")
    return compiled, [(m, k), (n, k)]


def _attention(sizes: tuple[int, ...], dtype: Any, mma: str, causal: bool, target: str) -> tuple[Any, list]:
    import wavec as wc
    from wavec.kernels import attention as A

    b, h, s, d, *rest = sizes
    kvh = rest[0] if rest else h
    skv = rest[1] if len(rest) > 1 else s
    subs, waves = A.attention_config(d, s, None, mma, causal)
    kernel = A.make_attention(dtype, "bhsd", causal, waves, mma, split_epilogue=A.SPLIT_EPILOGUE[mma])
    compiled = wc.compile(kernel, subs, target=target, backend="emulator")
    return compiled, [(b, h, s, d), (b, kvh, skv, d), (b, kvh, skv, d)]


def _rows(kind: str, sizes: tuple[int, ...], dtype: Any, target: str) -> tuple[Any, list]:
    import wavec as wc
    from wavec.kernels import rows as R

    m, n = sizes
    compiled = wc.compile(*R.kernel_for(kind, dtype, n), target=target, backend="emulator")
    vectors = {"softmax": 0, "rms_norm": 1, "layer_norm": 2}[kind]
    return compiled, [(m, n)] + [(n,)] * vectors
