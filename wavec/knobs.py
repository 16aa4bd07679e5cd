"""Every environment knob wavec reads, declared once and typed (after Triton's ``knobs.py``).

Read a knob as ``knobs.cache_dir`` etc.; the value is looked up at each access, so tests may
``monkeypatch.setenv`` freely.  A value a knob does not accept raises :class:`KnobError` naming the
variable and the accepted values (``WAVEC_VERIFY_IR=banana`` is an error, not "off").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from .errors import KnobError

T = TypeVar("T")


@dataclass(frozen=True)
class Knob(Generic[T]):
    env: str
    default: T
    parse: Callable[[str], T]
    doc: str

    accepted: str = ""  # the accepted values, for the error and the listing

    def get(self) -> T:
        raw = os.environ.get(self.env)
        if raw is None or raw == "":
            return self.default
        try:
            return self.parse(raw)
        except ValueError:
            raise KnobError(env=self.env, value=raw, accepted=self.accepted) from None


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
BOOL = "1/true/yes/on or 0/false/no/off"


def _bool(raw: str) -> bool:
    word = raw.strip().lower()
    if word not in _TRUE + _FALSE:
        raise ValueError(raw)
    return word in _TRUE


def _count(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(raw)
    return value


def _launch_api(raw: str) -> str:
    word = raw.strip().lower()
    if word not in LAUNCH_APIS:
        raise ValueError(raw)
    return word


LAUNCH_APIS = ("ctypes", "c", "cuda-python")


def _path(raw: str) -> Path:
    return Path(raw).expanduser()


KNOBS: dict[str, Knob] = {
    "cache_dir": Knob(
        "WAVEC_CACHE_DIR", Path.home() / ".cache" / "wavec", _path, "directory of the on-disk compile cache", "a path"
    ),
    "cache_disable": Knob("WAVEC_CACHE_DISABLE", False, _bool, "never read or write the disk cache", BOOL),
    "backend": Knob(
        "WAVEC_BACKEND",
        None,
        str,  # checked against the registered backends by ``compiler.default_backend``
        "force a backend (default: cuda when a GPU is visible, else the emulator)",
        "cuda, rocm or emulator",
    ),
    "ptxas": Knob("WAVEC_PTXAS", None, str, "path of the ptxas executable to use", "a path"),
    "dump_dir": Knob(
        "WAVEC_DUMP_DIR", None, str, "write every compiled kernel's MLIR and PTX here (cache hits too)", "a path"
    ),
    "tune_workers": Knob(
        "WAVEC_TUNE_WORKERS",
        0,
        _count,
        "processes that compile autotuning candidates (0: one per CPU core less one)",
        "an integer >= 0",
    ),
    "check_bounds": Knob(
        "WAVEC_CHECK_BOUNDS",
        False,
        _bool,
        "compile a check of every data-dependent index (0 <= index < size); the launcher synchronises after the "
        "kernel and raises OutOfBoundsError (part of the compile cache key)",
        BOOL,
    ),
    "launch_api": Knob(
        "WAVEC_LAUNCH_API",
        "c",
        _launch_api,
        "how kernels are launched: libcuda's cuLaunchKernel from a C extension built on first use with the "
        "system compiler (c, the default: no foreign-function layer), through ctypes (one C call), or cuda.bindings' "
        "cuLaunchKernel (its argument conversion layer; loading and attributes always use cuda.bindings)",
        "ctypes, c or cuda-python",
    ),
    "gc_freeze": Knob(
        "WAVEC_GC_FREEZE",
        True,
        _bool,
        "after a compile, collect garbage once and move the objects alive then to the permanent generation "
        "(gc.freeze), so that later full collections do not walk the compiler's and torch's import-time objects "
        "(a pause of 50-150 ms in a hot loop otherwise)",
        BOOL,
    ),
    "warn_variants": Knob(
        "WAVEC_WARN_VARIANTS",
        False,
        _bool,
        "warn the first time each kernel launches a narrow (odd sizes) or strided (views, unaligned addresses) "
        "variant, per reason; wavec.runtime.variant_report() counts those launches either way",
        BOOL,
    ),
    "verify_ir": Knob("WAVEC_VERIFY_IR", True, _bool, "run the trace and layout verifiers between passes", BOOL),
}


# The knobs that change the code a kernel compiles to: every cache of compiled kernels or of decided
# runners keys on them, so setting one between calls takes effect (a kernel compiled with bounds checks is
# not reused without, nor the reverse).
CODE_KNOBS = ("check_bounds",)
_CODE_ENVS = tuple(KNOBS[n].env for n in CODE_KNOBS)


def _code_key() -> Callable[[], Hashable]:
    """``code_key``: the raw settings of ``CODE_KNOBS``, no parsing.  It runs on every library call (the
    runner tables' keys), so with one knob it is one lookup in CPython's encoded environment dict (77 ns
    where ``os.environ.get`` takes 2 us on a loaded core: it re-encodes the name each time)."""
    data, encode = getattr(os.environ, "_data", None), getattr(os.environ, "encodekey", None)
    if not isinstance(data, dict) or encode is None or len(_CODE_ENVS) != 1:
        return lambda: tuple(os.environ.get(e) for e in _CODE_ENVS)
    get, key = data.get, encode(_CODE_ENVS[0])
    return lambda: get(key)


code_key = _code_key()


class _Knobs:
    def __getattr__(self, name: str):
        try:
            return KNOBS[name].get()
        except KeyError:
            raise AttributeError(f"no wavec knob {name!r}; known: {sorted(KNOBS)}") from None


knobs = _Knobs()
