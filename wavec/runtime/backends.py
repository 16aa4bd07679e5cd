"""The backend registry: which launcher runs an artifact for each backend name.

A backend registers ``factory(artifact) -> launcher`` with :func:`register_backend` when its module is
imported; ``launcher(*tensors)`` runs the kernel on all its arguments (outputs written in place).  The
runtime knows only the *name* of the module that provides each backend and imports it the first time
the backend is asked for, so ``runtime`` never imports ``emulator`` (which imports ``runtime``: no
cycle) and a CUDA run never loads the emulator or the MLIR bindings it needs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .artifact import Artifact

__all__ = ["BACKENDS", "LauncherFactory", "launcher_factory", "register_backend"]

LauncherFactory = Callable[[Artifact], Callable[..., Any]]

# Backend name -> the module whose import registers its launcher (None: wavec compiles for it, but no
# launcher for it exists in this package).
_PROVIDERS: dict[str, str | None] = {"cuda": "wavec.runtime.launcher", "rocm": None, "emulator": "wavec.emulator"}
BACKENDS = tuple(_PROVIDERS)
_FACTORIES: dict[str, LauncherFactory] = {}


def register_backend(name: str, factory: LauncherFactory) -> None:
    """Make ``CompiledKernel(artifact, name)`` run through ``factory(artifact)`` (the last one wins)."""
    _FACTORIES[name] = factory


def launcher_factory(name: str) -> LauncherFactory | None:
    """The factory registered for ``name``, importing its provider module first if needed; else None."""
    factory = _FACTORIES.get(name)
    provider = _PROVIDERS.get(name)
    if factory is None and provider is not None:
        importlib.import_module(provider)
        factory = _FACTORIES.get(name)
    return factory
