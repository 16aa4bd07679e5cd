"""CPU emulator of wavec kernels: runs the kernel's MLIR lane by lane, exactly as the GPU would.

``run_kernel(module_text, entry, bindings=..., constants=..., grid=..., block=...)`` runs one launch;
:class:`EmulatedKernel` parses and compiles once and can be called many times.  Importing this package
registers :class:`EmulatorKernel` as the runtime's "emulator" backend (:mod:`wavec.runtime.backends`).
"""

from __future__ import annotations

from wavec.emulator.interp import OPS, EmulatedKernel, run_kernel
from wavec.emulator.launch import EmulatorKernel  # registers the "emulator" runtime backend

__all__ = ["OPS", "EmulatedKernel", "EmulatorKernel", "load_ops", "run_kernel"]


def load_ops() -> None:
    """Import the op modules so that their handlers register themselves in :data:`OPS`."""
    from wavec.emulator import (  # noqa: F401
        ops_amdgpu,
        ops_arith,
        ops_atomic,
        ops_gpu,
        ops_memref,
        ops_nvgpu,
        ops_nvvm,
        ops_scf,
        ops_tma,
        ops_vector,
    )
