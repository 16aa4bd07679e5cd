"""A C launcher for ``WAVEC_LAUNCH_API=c``: libcuda's ``cuLaunchKernel`` called from a CPython extension of
one function, built on first use with the system C compiler (as Triton builds its launchers), instead of
through ctypes' foreign-function layer (docs/performance.md, "Host path").

Requires: a C compiler (``$CC``, else ``cc``) and Python's headers (``sysconfig``'s include directory); the
address of the function to call (libcuda's ``cuLaunchKernel``, or any function of its signature).

Guarantees:

* :func:`module` compiles ``SOURCE`` once per source and interpreter into the wavec cache directory
  (``<cache>/launch/``; written to a temporary name, then renamed: concurrent processes do not see a
  half-written file) and loads it; a failed build raises a ``LaunchError`` with the compiler's message
  and the fixes (install a compiler and the headers, or ``WAVEC_LAUNCH_API=ctypes``).  Nothing falls back.
* ``launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)`` has ctypes' call shape: each pointer
  an int, None or a ``ctypes.c_void_p``, the seven sizes ints; it calls the target set by
  ``set_target(address)`` and returns its ``CUresult`` as an int (-1 with no target set).
  ``noop_address()`` is a C function of the same signature that returns 0 (to time the call itself).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from wavec.errors import LaunchError

__all__ = ["SOURCE", "module", "libcuda_launch", "toolchain"]

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         void *, void **, void **);
static launch_fn target = NULL;

static int noop(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shared, void *stream, void **params, void **extra) {
  return 0;
}

/* an int, None or a ctypes.c_void_p (whose value is an int or None) */
static int as_pointer(PyObject *o, void **out) {
  if (o == Py_None) { *out = NULL; return 0; }
  if (PyLong_Check(o)) {
    *out = PyLong_AsVoidPtr(o);
    return (*out == NULL && PyErr_Occurred()) ? -1 : 0;
  }
  PyObject *v = PyObject_GetAttrString(o, "value");
  if (v == NULL) return -1;
  int rc = as_pointer(v, out);
  Py_DECREF(v);
  return rc;
}

static PyObject *set_target(PyObject *self, PyObject *address) {
  void *p;
  if (as_pointer(address, &p) < 0) return NULL;
  target = (launch_fn)p;
  Py_RETURN_NONE;
}

static PyObject *noop_address(PyObject *self, PyObject *unused) {
  return PyLong_FromVoidPtr((void *)noop);
}

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 11) {
    PyErr_Format(PyExc_TypeError, "launch takes 11 arguments (cuLaunchKernel's), got %zd", nargs);
    return NULL;
  }
  void *f, *stream, *params, *extra;
  unsigned dims[7];
  if (as_pointer(args[0], &f) < 0) return NULL;
  for (int i = 0; i < 7; i++) {
    unsigned long v = PyLong_AsUnsignedLong(args[1 + i]);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    if (v > 0xffffffffUL) { PyErr_SetString(PyExc_OverflowError, "a launch size exceeds 32 bits"); return NULL; }
    dims[i] = (unsigned)v;
  }
  if (as_pointer(args[8], &stream) < 0 || as_pointer(args[9], &params) < 0 || as_pointer(args[10], &extra) < 0)
    return NULL;
  if (target == NULL) return PyLong_FromLong(-1);
  int rc = target(f, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], stream, (void **)params,
                  (void **)extra);
  return PyLong_FromLong(rc);
}

static PyMethodDef methods[] = {
  {"set_target", set_target, METH_O, "set_target(address): the function launch() calls"},
  {"noop_address", noop_address, METH_NOARGS, "the address of a C function of cuLaunchKernel's shape returning 0"},
  {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "cuLaunchKernel's eleven arguments"},
  {NULL, NULL, 0, NULL}
};

static struct PyModuleDef definition = {PyModuleDef_HEAD_INIT, "_wavec_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wavec_launch(void) { return PyModule_Create(&definition); }
"""

_LOADED: dict[str, Any] = {}


def _cache_dir() -> Path:
    from wavec.knobs import knobs

    return Path(knobs.cache_dir) / "launch"


def module() -> Any:
    """The built extension (module docstring), compiled on first use."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    tag = hashlib.sha256((SOURCE + sys.version + suffix).encode()).hexdigest()[:16]
    hit = _LOADED.get(tag)
    if hit is not None:
        return hit
    path = _cache_dir() / f"_wavec_launch_{tag}{suffix}"
    if not path.exists():
        _build(path)
    spec = importlib.util.spec_from_file_location("_wavec_launch", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _LOADED[tag] = mod
    return mod


def toolchain() -> tuple[str, Path]:
    """(the C compiler to run: ``$CC``, else ``cc``; Python's include directory) of the build."""
    return os.environ.get("CC") or "cc", Path(sysconfig.get_paths()["include"])


def _build(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.with_name(f"{path.name}.{os.getpid()}.c")  # (per process: concurrent builds do not share it)
    src.write_text(SOURCE)
    cc, include = toolchain()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    cmd = [cc, "-O2", "-shared", "-fPIC", f"-I{include}", str(src), "-o", str(tmp)]
    fix = "install a C compiler and Python's headers (python3-dev), or set WAVEC_LAUNCH_API=ctypes"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        message = f"WAVEC_LAUNCH_API=c: cannot run {cc!r} ({exc}); {fix}"
        raise LaunchError(kernel="(launcher)", message=message) from None
    finally:
        src.unlink(missing_ok=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = (proc.stderr or proc.stdout).strip()[-600:]
        message = f"WAVEC_LAUNCH_API=c: building the C launcher failed: {tail}; {fix}"
        raise LaunchError(kernel="(launcher)", message=message)
    os.replace(tmp, path)


def libcuda_launch(lib: Any) -> Any:
    """The extension's ``launch``, calling ``lib``'s (libcuda's, loaded by ctypes) ``cuLaunchKernel``."""
    mod = module()
    mod.set_target(ctypes.cast(lib.cuLaunchKernel, ctypes.c_void_p).value)
    return mod.launch
