"""Compile one ``hal.executable`` module to IREE's serialized GPU executable (in-process or subprocess).

Requires: ``iree-base-compiler==3.13.0`` (imported lazily); a module that is exactly one ``hal.executable``
whose variant carries ``Target.attr_text()``.  Guarantees: :func:`compile_hal_executable` returns the
bytes of ``--compile-mode=hal-executable`` (read them with :mod:`wavec.codegen.binary`), in-process
through ``iree.compiler.api`` and ``ireeCompilerInvocationOutputHALExecutable`` (ctypes), one
``Session`` per thread; diagnostics become the :class:`~wavec.errors.CompileError`; ``WAVEC_DUMP_DIR``
dumps the module and the image.  :func:`compile_hal_executable_subprocess` does the same via ``iree-compile``.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from wavec.errors import CompileError, ToolchainError
from wavec.knobs import knobs
from wavec.target import Target

__all__ = ["compile_hal_executable", "compile_hal_executable_subprocess", "iree_compile_path", "last_compile_seconds"]

# Severity values of ``iree_compiler_diagnostic_severity_t`` (embedding_api.h).
_SEVERITY = {0: "note", 1: "warning", 2: "error", 3: "remark"}
_DIAG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p)

_tls = threading.local()
_api_lock = threading.Lock()
_api: Any = None  # the iree.compiler.api.ctypes_dl module once initialised


def _load_api() -> Any:
    """Import ``iree.compiler.api`` once and declare the ctypes signatures it does not declare."""
    global _api
    with _api_lock:
        if _api is not None:
            return _api
        try:
            from iree.compiler.api import ctypes_dl
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ToolchainError(message=f"iree-base-compiler is not importable: {e}") from e
        output = ctypes_dl._dylib.ireeCompilerInvocationOutputHALExecutable
        output.restype = ctypes.c_void_p
        output.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        diagnostics = ctypes_dl._dylib.ireeCompilerInvocationEnableCallbackDiagnostics
        diagnostics.restype = None
        diagnostics.argtypes = [ctypes.c_void_p, ctypes.c_int, _DIAG_CALLBACK, ctypes.c_void_p]
        _api = ctypes_dl
        return _api


def _session() -> Any:
    """The calling thread's compiler session (sessions are not shared between threads)."""
    api = _load_api()
    session = getattr(_tls, "session", None)
    if session is None:
        session = api.Session()
        _tls.session = session
        _SESSIONS.append(session)
    return session


_SESSIONS: list[Any] = []


@atexit.register
def _close_sessions() -> None:
    """Close sessions while the compiler library is still loaded (else ``Session.__del__`` fails noisily
    at interpreter exit)."""
    while _SESSIONS:
        try:
            _SESSIONS.pop().close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _error_text(api: Any, err_p: int | None) -> str | None:
    if not err_p:
        return None
    lib = api._dylib
    text = lib.ireeCompilerErrorGetMessage(err_p).decode("utf-8", "replace")
    lib.ireeCompilerErrorDestroy(err_p)
    return text


def _run_invocation(api: Any, session: Any, source_bytes: bytes, name: str, diags: list[str]) -> bytes | None:
    """Parse, run the HAL-executable pipeline and serialize; ``None`` on failure (``diags`` says why)."""

    @_DIAG_CALLBACK
    def on_diag(severity: int, message: bytes, size: int, _user: int) -> None:
        text = ctypes.string_at(message, size).decode("utf-8", "replace")
        diags.append(f"{_SEVERITY.get(severity, 'diag')}: {text}")

    lib = api._dylib
    inv = api.Invocation(session)
    try:
        lib.ireeCompilerInvocationEnableCallbackDiagnostics(inv._inv_p, 0, on_diag, None)
        source = api.Source.wrap_buffer(session, source_bytes, buffer_name=name)
        if not inv.parse_source(source):
            diags.insert(0, "failed to parse the module")
            return None
        if not inv.execute(api.PipelineType.IREE_COMPILER_PIPELINE_HAL_EXECUTABLE):
            diags.insert(0, "the HAL executable pipeline failed")
            return None
        output = api.Output.open_membuffer()
        try:
            err = _error_text(api, lib.ireeCompilerInvocationOutputHALExecutable(inv._inv_p, output._output_p))
            if err is not None:
                diags.insert(0, f"serializing the executable failed: {err}")
                return None
            return bytes(output.map_memory())
        finally:
            output.close()
    finally:
        inv.close()


def compile_hal_executable(module_text: str, target: Target, *, kernel: str) -> bytes:
    """Compile ``module_text`` (one ``hal.executable``) in-process; return IREE's executable bytes.

    Raises :class:`CompileError` carrying every diagnostic when IREE rejects the module.
    """
    api = _load_api()
    session = _session()
    dump_file(kernel, target, "mlir", module_text.encode())
    diags: list[str] = []
    start = time.perf_counter()
    # A NUL-terminated buffer lets IREE parse without copying.
    blob = _run_invocation(api, session, module_text.encode() + b"\0", f"{kernel}.mlir", diags)
    _tls.last_seconds = time.perf_counter() - start
    if blob is None:
        raise CompileError(kernel=kernel, target=target.name, message=_format_diags(diags))
    _dump_image(kernel, target, blob)
    return blob


def last_compile_seconds() -> float | None:
    """Wall time of this thread's last :func:`compile_hal_executable` call (for timing reports)."""
    return getattr(_tls, "last_seconds", None)


def _format_diags(diags: list[str]) -> str:
    return "\n".join(d.rstrip() for d in diags) if diags else "(IREE reported no diagnostic)"


def iree_compile_path() -> str:
    """Path of the ``iree-compile`` executable shipped in the iree-base-compiler wheel."""
    try:
        from iree.compiler import _mlir_libs
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ToolchainError(message=f"iree-base-compiler is not importable: {e}") from e
    for folder in _mlir_libs.__path__:
        exe = Path(folder) / "iree-compile"
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    raise ToolchainError(message=f"no iree-compile executable in {list(_mlir_libs.__path__)}")


def compile_hal_executable_subprocess(
    module_text: str, target: Target, *, kernel: str, extra_flags: tuple[str, ...] = ()
) -> bytes:
    """Same result as :func:`compile_hal_executable`, via `iree-compile --compile-mode=hal-executable`."""
    exe = iree_compile_path()
    dump_file(kernel, target, "mlir", module_text.encode())
    with tempfile.TemporaryDirectory(prefix="wavec-iree-") as tmp:
        src = Path(tmp) / f"{_safe(kernel)}.mlir"
        out = Path(tmp) / f"{_safe(kernel)}.bin"
        src.write_text(module_text)
        cmd = [exe, "--compile-mode=hal-executable", str(src), "-o", str(out), *extra_flags]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ToolchainError(message=f"running {exe} failed: {e}") from e
        if proc.returncode != 0 or not out.is_file():
            message = (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
            raise CompileError(kernel=kernel, target=target.name, message=message)
        blob = out.read_bytes()
    _dump_image(kernel, target, blob)
    return blob


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "kernel"


def dump_file(kernel: str, target: Target, ext: str, data: bytes) -> None:
    """Write ``data`` as ``<kernel>.<target>.<ext>`` under ``WAVEC_DUMP_DIR`` (nothing when unset)."""
    folder = knobs.dump_dir
    if not folder:
        return
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{_safe(kernel)}.{target.name}.{ext}").write_bytes(data)


def _dump_image(kernel: str, target: Target, blob: bytes) -> None:
    if not knobs.dump_dir:
        return
    from wavec.codegen.binary import parse_executable

    image = parse_executable(blob, target.binary_format).image
    dump_file(kernel, target, target.binary_format, image.encode() if isinstance(image, str) else image)
