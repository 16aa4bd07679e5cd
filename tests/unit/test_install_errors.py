"""A missing dependency is an error that names the ``pip install`` providing it (issue #24)."""

from __future__ import annotations

import subprocess
import sys

import wavec as wc
from wavec.kernels.elementwise import make_copy


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_without_torch_names_the_install() -> None:
    r = _run("import sys; sys.modules['torch'] = None\nimport wavec")
    assert r.returncode != 0 and "wavec needs PyTorch: pip install torch" in r.stderr


def test_compile_without_the_mlir_compiler_names_the_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "iree", None)
    monkeypatch.setitem(sys.modules, "iree.compiler", None)
    try:
        wc.compile(make_copy(), {wc.sym.BLOCK_M: 4, wc.sym.BLOCK_N: 512}, backend="emulator", cache=False)
    except wc.WavecError as exc:
        assert "pip install 'iree-base-compiler==3.13.0'" in str(exc)
    else:
        raise AssertionError("compile without iree.compiler did not raise")
