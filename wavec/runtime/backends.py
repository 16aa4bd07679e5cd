"""The backend registry: ``register_backend(name, factory)``, ``factory(artifact) -> launcher``.

The runtime knows each backend's providing module by name only and imports it when the backend is first
asked for; the module registers its launcher on import.  So ``runtime`` never imports ``emulator`` (which
imports ``runtime``) and a CUDA run never loads the emulator or its MLIR bindings.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .artifact import Artifact

LauncherFactory = Callable[[Artifact], Callable[..., Any]]
# backend -> the module whose import registers it (None: wavec compiles for it but has no launcher)
_PROVIDERS: dict[str, str | None] = {"cuda": "wavec.runtime.launcher", "rocm": None, "emulator": "wavec.emulator"}
BACKENDS = tuple(_PROVIDERS)
_FACTORIES: dict[str, LauncherFactory] = {}


def register_backend(name: str, factory: LauncherFactory) -> None:
    """Make ``CompiledKernel(artifact, name)`` run through ``factory(artifact)`` (the last one wins)."""
    _FACTORIES[name] = factory


def launcher_factory(name: str) -> LauncherFactory | None:
    """The factory registered for ``name``, importing its provider first if needed; None if there is none."""
    provider = _PROVIDERS.get(name)
    if name not in _FACTORIES and provider is not None:
        importlib.import_module(provider)
    return _FACTORIES.get(name)
