"""mypy plugin: a DSL tensor annotation means the traced value a kernel body sees.

``Memory[M, K, f16]``, ``Register[M, N, f32]`` and ``Scalar[f32]`` are subscripted with values (symbols,
dtypes), which no type checker accepts as type arguments; inside a ``@wc.wave`` kernel or an
``@wc.iterate`` body an argument so annotated is a :class:`wavec.frontend.tracing.Value`, so that is the
type given to each such annotation (tracing checks the subscription itself).  ``frontend/types.py``
imports ``Value`` under ``TYPE_CHECKING``, so it is known wherever the DSL types are.  Enable with
``plugins = ["wavec.mypy_plugin"]`` under ``[tool.mypy]``.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.plugin import AnalyzeTypeContext, Plugin
from mypy.types import Type

_DSL_TYPES = frozenset(f"wavec.frontend.types.{name}" for name in ("Memory", "Register", "Scalar"))


def _traced_value(ctx: AnalyzeTypeContext) -> Type:
    return ctx.api.named_type("wavec.frontend.tracing.Value", [])


class WavecPlugin(Plugin):
    def get_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        return _traced_value if fullname in _DSL_TYPES else None


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point."""
    return WavecPlugin
