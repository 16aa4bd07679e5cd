"""Cache keys and the compile cache (an in-memory LRU in front of an on-disk store).

Requires: only the standard library and :mod:`wavec.knobs` / :mod:`wavec.errors`; sympy is never imported
(sympy objects are recognised by their module name and serialised through ``str``).

Guarantees:

* :func:`cache_key` is a SHA-256 over a canonical, type-tagged serialisation (dict keys sorted, containers
  walked recursively) of the kernel source, every option, the target and the versions; a value of an
  unknown type raises :class:`~wavec.errors.CacheError` instead of being skipped.
* :meth:`DiskCache.put` writes a temporary file next to the entry and ``os.replace``-s it into place, so
  concurrent writers never expose a partial entry.
* :meth:`DiskCache.get` verifies every disk entry; a corrupt one is deleted with a warning and ``None``
  returned, so the caller recompiles.
* ``WAVEC_CACHE_DISABLE`` turns the disk layer off (read and write); the in-memory LRU stays on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from pathlib import Path, PurePath
from typing import Any

from wavec.errors import CacheError
from wavec.knobs import knobs
from wavec.runtime.artifact import Artifact

__all__ = ["cache_key", "canonical", "DiskCache", "default_cache", "ENTRY_SUFFIX"]

ENTRY_SUFFIX = ".wavec"


def canonical(value: Any, _path: str = "options") -> str:
    """A canonical, type-tagged text for ``value``: equal values give equal text, and values of different
    types never collide (``1`` vs ``"1"`` vs ``1.0`` vs ``True``)."""
    if value is None:
        return "N"
    if isinstance(value, bool):
        return "T" if value else "F"
    if isinstance(value, enum.Enum):  # before int/str: IntEnum / StrEnum members
        return f"E({_qualname(value)}.{value.name})"
    if isinstance(value, int):
        return f"i{int(value)}"
    if isinstance(value, float):
        return f"f{float(value)!r}"
    if isinstance(value, str):
        return f"s{len(value)}:{value}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"b{bytes(value).hex()}"
    if isinstance(value, PurePath):
        return f"p{canonical(str(value))}"
    if isinstance(value, dict):
        items = sorted((canonical(k, _path), canonical(v, f"{_path}[{k!r}]")) for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        tag = "L" if isinstance(value, list) else "U"
        return tag + "[" + ",".join(canonical(v, f"{_path}[{i}]") for i, v in enumerate(value)) + "]"
    if isinstance(value, (set, frozenset)):
        return "S[" + ",".join(sorted(canonical(v, f"{_path}{{}}") for v in value)) + "]"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ",".join(
            f"{f.name}={canonical(getattr(value, f.name), f'{_path}.{f.name}')}" for f in dataclasses.fields(value)
        )
        return f"D({_qualname(value)}:{fields})"
    package = type(value).__module__.split(".", 1)[0]
    if package == "sympy":
        return f"Y({type(value).__name__}:{value})"
    if package == "numpy" and getattr(value, "shape", None) == ():  # numpy scalars
        return f"n{value.dtype}:{canonical(value.item(), _path)}"
    raise CacheError(
        message=f"cannot serialise {_path} of type {type(value).__module__}.{type(value).__qualname__} "
        "into the cache key; add support for it in wavec/runtime/cache.py:canonical"
    )


def _qualname(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def cache_key(*, kernel_source: str, options: dict, target: str, versions: dict) -> str:
    """The hex SHA-256 identifying one compilation."""
    text = canonical(
        {"kernel_source": kernel_source, "options": options, "target": target, "versions": versions}, "key"
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _LRU:
    """A small thread-safe LRU of artifacts."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, Artifact] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Artifact | None:
        with self._lock:
            art = self._items.get(key)
            if art is not None:
                self._items.move_to_end(key)
            return art

    def put(self, key: str, art: Artifact) -> None:
        with self._lock:
            self._items[key] = art
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class DiskCache:
    """The compile cache rooted at ``root``; entries live at ``root/<key[:2]>/<key>.wavec``."""

    def __init__(self, root: Path | str, *, memory_entries: int = 256) -> None:
        self.root = Path(root)
        self.memory = _LRU(memory_entries)

    def path_for(self, key: str) -> Path:
        if len(key) < 3 or not all(c in "0123456789abcdef" for c in key):
            raise CacheError(message=f"invalid cache key {key!r}; expected a hex digest")
        return self.root / key[:2] / f"{key}{ENTRY_SUFFIX}"

    def get(self, key: str) -> Artifact | None:
        """The artifact stored under ``key``, or ``None`` (missing, disabled, or corrupt and removed)."""
        art = self.memory.get(key)
        if art is not None or knobs.cache_disable:
            return art
        path = self.path_for(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            warnings.warn(f"wavec cache: cannot read {path}: {exc}; recompiling", stacklevel=2)
            return None
        try:
            art = Artifact.from_bytes(blob)
        except CacheError as exc:
            with contextlib.suppress(OSError):
                path.unlink()
            warnings.warn(f"wavec cache: removed corrupt entry {path} ({exc}); recompiling", stacklevel=2)
            return None
        self.memory.put(key, art)
        return art

    def put(self, key: str, artifact: Artifact) -> None:
        """Store ``artifact`` under ``key`` (memory always, disk unless disabled; a failed write warns)."""
        self.memory.put(key, artifact)
        if knobs.cache_disable:
            return
        path = self.path_for(key)
        try:
            _atomic_write(path, artifact.to_bytes())
        except OSError as exc:
            warnings.warn(f"wavec cache: cannot write {path}: {exc}", stacklevel=2)

    def clear_memory(self) -> None:
        self.memory.clear()


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_DEFAULT: dict[Path, DiskCache] = {}
_DEFAULT_LOCK = threading.Lock()


def default_cache() -> DiskCache:
    """The process-wide cache for the current ``knobs.cache_dir`` (one instance per directory)."""
    root = Path(knobs.cache_dir)
    with _DEFAULT_LOCK:
        cache = _DEFAULT.get(root)
        if cache is None:
            cache = _DEFAULT[root] = DiskCache(root)
        return cache
