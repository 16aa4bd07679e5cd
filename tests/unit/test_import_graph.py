"""The package import directions of DESIGN §2 that have been broken before: checked, not hoped for.

* No module of ``wavec/runtime`` imports ``wavec.emulator``, not even in a function body (the emulator
  registers itself as a runtime backend, :mod:`wavec.runtime.backends`, which imports it by name).
* ``wavec/emulator`` imports nothing from ``wavec.codegen`` (shared markers live in :mod:`wavec.abi`).
* A cache hit of ``wc.compile`` imports neither IREE's MLIR bindings nor the emulator.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import wavec

PACKAGE = Path(wavec.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, absolute module name)`` of each import statement in ``path``, wherever it stands;
    ``from m import x`` yields ``m`` and ``m.x``."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    nodes: list[ast.AST] = list(tree.body)
    while nodes:
        node = nodes.pop()
        nodes.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{a.name}") for a in node.names)


def _offenders(package: str, banned: str) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in sorted((PACKAGE / package).rglob("*.py"))
        for line, name in _imports(path)
        if name == banned or name.startswith(banned + ".")
    ]


def test_import_scanner_resolves_relative_imports() -> None:
    names = {name for _, name in _imports(PACKAGE / "emulator" / "launch.py")}
    assert {"wavec.runtime.artifact", "wavec.abi.SMS_NAME"} <= names
    assert _offenders("emulator", "wavec.runtime")  # the scanner does find imports (the allowed direction)


def test_runtime_does_not_import_the_emulator() -> None:
    assert _offenders("runtime", "wavec.emulator") == []


def test_emulator_imports_nothing_from_codegen() -> None:
    assert _offenders("emulator", "wavec.codegen") == []


def test_cache_hit_imports_neither_iree_nor_the_emulator() -> None:
    from wavec.kernels.elementwise import DEFAULT_SUBS, make_copy

    assert not wavec.compile(make_copy(wavec.f16), DEFAULT_SUBS, backend="cuda").stats.cached
    code = (
        "import sys, wavec\n"
        "from wavec.kernels.elementwise import DEFAULT_SUBS, make_copy\n"
        "k = wavec.compile(make_copy(wavec.f16), DEFAULT_SUBS, backend='cuda')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('iree', 'mlir') or m.startswith('wavec.em'))\n"
        "print(k.stats.cached, bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True []"
