"""A whole program's wavec kernels predicted from a launch trace (issue #22's end-to-end figure): run the
program under ``wavec.runtime.trace_launches()``, then :func:`predict_launches` gives each traced launch
the performance model's answer for the GPU, computed from the very artifact and shapes that launched.

Requires: the shipped MLP weights; a traced launch's artifact with its MLIR (every compiled kernel has it).

Guarantees:

* :func:`family_of` maps a traced kernel to its performance-model family, or None where the model does not
  cover it: a kernel of no trained family (a split-KV decode, a scatter, an odd-length row kernel, whose
  predictions were 17-150 % off on H200: docs/perf_model.md), or a
  data-dependent one (the MoE GEMMs: their demand depends on index values a trace does not keep).  The
  GEMM family follows the artifact's matrix instruction (``wgmma`` in its MLIR or not).
* :func:`predict_launches` returns one :class:`Predicted` per launch, in order (``estimate`` None where
  :func:`family_of` is None); launches of one artifact with equal shapes and integer scalars share one
  decomposition.  Float scalars (an epsilon, a scale) do not change a kernel's demand and are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .estimator import Estimate, estimate, launch_values
from .gpus import GPUS, GPUSpec, gpu

__all__ = ["Predicted", "family_of", "predict_launches"]

# kernel name (``KernelMetadata.kernel``) -> family; "gemm" is refined by its instruction
_FAMILIES = {
    "gemm": "gemm",
    "attention": "attention",
    "attention_alibi": "attention",
    "attention_alibi_bh": "attention",
    "softmax_rows": "rows",
    "rms_norm_rows": "rows",
    "layer_norm_rows": "rows",
    # the aligned long rows (one row a workgroup): within the family's error on H200 (docs/perf_model.md)
    "rms_norm_long": "rows",
    "layer_norm_long": "rows",
    "copy": "elementwise",
    "silu_and_mul": "elementwise",
}


@dataclass(frozen=True)
class Predicted:
    """A traced launch's kernel name, family (None: not modelled) and the model's estimate."""

    kernel: str
    family: str | None
    estimate: Estimate | None


def family_of(artifact: Any) -> str | None:
    """The performance-model family of ``artifact``'s kernel, or None (module docstring)."""
    family = _FAMILIES.get(artifact.metadata.kernel)
    if family == "gemm":
        return "gemm_wgmma" if "wgmma" in artifact.mlir else "gemm_mma_sync"
    return family


def _int_scalars(scalars: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in scalars.items() if isinstance(v, int) and not isinstance(v, bool)}


def _estimate(
    artifact: Any, shapes: tuple, scalars: dict[str, int], spec: GPUSpec, key: str, family: str, views=None
) -> Estimate:
    from .decompose import decompose
    from .features import features
    from .schedule import schedule

    decomp = decompose(artifact, *shapes, gpu=spec, views=views, **scalars)
    feats = features(decomp, schedule(decomp, spec))
    return estimate(launch_values(decomp, feats), spec, key, family)


def predict_launches(launches: Sequence[Any], gpu_name: str) -> list[Predicted]:
    """The model's estimate of every traced launch (``wavec.runtime.TracedLaunch``) on ``gpu_name``."""
    spec = gpu(gpu_name)
    key = next(k for k, v in GPUS.items() if v == spec)
    done: dict[tuple, Estimate] = {}
    out = []
    for launch in launches:
        family = family_of(launch.artifact)
        if family is None:
            out.append(Predicted(launch.kernel, None, None))
            continue
        scalars = _int_scalars(launch.scalars)
        memo = (id(launch.artifact), launch.shapes, tuple(sorted(scalars.items())), launch.views)
        if memo not in done:
            done[memo] = _estimate(launch.artifact, launch.shapes, scalars, spec, key, family, launch.views)
        out.append(Predicted(launch.kernel, family, done[memo]))
    return out
