"""``CompiledKernel``: what ``wc.compile`` returns — an artifact bound to a backend, callable on tensors."""

from __future__ import annotations

from typing import Any

from ..errors import LaunchError
from .artifact import Artifact


class CompiledKernel:
    """Call with torch tensors in argument order (outputs included; they are written in place)."""

    def __init__(self, artifact: Artifact, backend: str, stats: Any = None) -> None:
        self.artifact = artifact
        self.backend = backend
        self.stats = stats
        self.metadata = artifact.metadata
        self._impl = None

    def _load(self):
        if self.backend == "cuda":
            from .launcher import CudaKernel

            return CudaKernel(self.artifact)
        if self.backend == "emulator":
            from ..emulator.launch import EmulatorKernel

            return EmulatorKernel(self.artifact)
        raise LaunchError(kernel=self.metadata.kernel, message=(
            f"backend {self.backend!r} cannot run here (no AMD GPU runtime is wired up); "
            "compile with backend='emulator' to run it on the CPU"))

    def __call__(self, *tensors: Any) -> None:
        impl = self._impl
        if impl is None:
            impl = self._impl = self._load()
        impl(*tensors)

    @property
    def mlir(self) -> str:
        return self.artifact.mlir

    def __repr__(self) -> str:
        m = self.metadata
        return (f"<wavec kernel {m.kernel} [{self.artifact.target}/{self.artifact.format}, {self.backend}] "
                f"block={m.block} dynamic={list(m.constants)}>")
