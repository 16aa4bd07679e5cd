"""Every environment knob wavec reads, declared once and typed (after Triton's ``knobs.py``).

Read a knob as ``knobs.cache_dir`` etc.; the value is looked up at each access, so tests may
``monkeypatch.setenv`` freely.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Knob(Generic[T]):
    env: str
    default: T
    parse: Callable[[str], T]
    doc: str

    def get(self) -> T:
        raw = os.environ.get(self.env)
        return self.default if raw is None or raw == "" else self.parse(raw)


def _bool(raw: str) -> bool:
    return raw.strip().lower() in ("1", "true", "yes", "on")


def _path(raw: str) -> Path:
    return Path(raw).expanduser()


KNOBS: dict[str, Knob] = {
    "cache_dir": Knob(
        "WAVEC_CACHE_DIR", Path.home() / ".cache" / "wavec", _path, "directory of the on-disk compile cache"
    ),
    "cache_disable": Knob("WAVEC_CACHE_DISABLE", False, _bool, "never read or write the disk cache"),
    "backend": Knob(
        "WAVEC_BACKEND", None, str, "force a backend: cuda, rocm or emulator (default: cuda when a GPU is visible)"
    ),
    "ptxas": Knob("WAVEC_PTXAS", None, str, "path of the ptxas executable to use"),
    "dump_dir": Knob("WAVEC_DUMP_DIR", None, str, "write every emitted MLIR module and PTX here"),
    "tune_workers": Knob(
        "WAVEC_TUNE_WORKERS", 0, int, "processes that compile autotuning candidates (0: one per CPU core less one)"
    ),
    "check_bounds": Knob(
        "WAVEC_CHECK_BOUNDS",
        False,
        _bool,
        "compile a check of every data-dependent index (0 <= index < size); the launcher synchronises after the "
        "kernel and raises OutOfBoundsError (part of the compile cache key)",
    ),
    "verify_ir": Knob("WAVEC_VERIFY_IR", True, _bool, "run the trace and layout verifiers between passes"),
}


class _Knobs:
    def __getattr__(self, name: str):
        try:
            return KNOBS[name].get()
        except KeyError:
            raise AttributeError(f"no wavec knob {name!r}; known: {sorted(KNOBS)}") from None


knobs = _Knobs()
