"""wavec runtime: artifacts, the compile cache, argument binding and the CUDA launcher.

Importing this package imports only the standard library and :mod:`wavec.errors` / :mod:`wavec.knobs`:
torch is imported when a binding plan is built and ``cuda.bindings.driver`` when a
:class:`CudaKernel` is built, so a cache hit never pulls in the MLIR bindings or IREE.
"""

from wavec.runtime.artifact import ArgSpec, Artifact, KernelMetadata
from wavec.runtime.binding import BindingPlan, bind_arguments, compile_grid, grid_for, plan_for
from wavec.runtime.cache import DiskCache, cache_key, canonical, default_cache
from wavec.runtime.launcher import CudaKernel
from wavec.runtime.trace import TracedLaunch, trace_launches
from wavec.runtime.variants import reset_variant_report, variant_report

__all__ = [
    "TracedLaunch",
    "trace_launches",
    "ArgSpec",
    "Artifact",
    "KernelMetadata",
    "BindingPlan",
    "bind_arguments",
    "compile_grid",
    "grid_for",
    "plan_for",
    "DiskCache",
    "cache_key",
    "canonical",
    "default_cache",
    "CudaKernel",
    "variant_report",
    "reset_variant_report",
]
