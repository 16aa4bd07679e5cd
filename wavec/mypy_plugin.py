"""mypy plugin: the DSL's tensor annotations mean the traced values a kernel body sees.

``Memory[M, K, f16]``, ``Register[M, N, f32]`` and ``Scalar[f32]`` are subscripted with *values* (sympy
symbols, dtypes), which no type checker accepts as type arguments; but inside a ``@wc.wave`` kernel (or
an ``@wc.iterate`` body) an argument so annotated is a traced :class:`wavec.frontend.tracing.Value`, so
that is the type this plugin gives each such annotation (the subscription itself is checked when the
kernel is traced).  The expression ``Register[M, N, f32](0.0)`` needs no plugin: the types' metaclass
``__getitem__`` methods are typed.  Enable it with ``plugins = ["wavec.mypy_plugin"]`` under
``[tool.mypy]``.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.nodes import MypyFile
from mypy.plugin import AnalyzeTypeContext, Plugin
from mypy.types import Type

_DSL_TYPES = frozenset(f"wavec.frontend.types.{name}" for name in ("Memory", "Register", "Scalar"))
_VALUE_MODULE = "wavec.frontend.tracing"


def _traced_value(ctx: AnalyzeTypeContext) -> Type:
    return ctx.api.named_type(f"{_VALUE_MODULE}.Value", [])


class WavecPlugin(Plugin):
    def get_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        return _traced_value if fullname in _DSL_TYPES else None

    def get_additional_deps(self, file: MypyFile) -> list[tuple[int, str, int]]:
        # A file that names the DSL types must see Value, whichever wavec module it imported them from.
        uses_wavec = file.fullname.startswith("wavec.") or any(
            getattr(i, "id", "").startswith("wavec") or any(n.startswith("wavec") for n, _ in getattr(i, "ids", ()))
            for i in file.imports
        )
        return [(10, _VALUE_MODULE, -1)] if uses_wavec and file.fullname != _VALUE_MODULE else []


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point."""
    return WavecPlugin
