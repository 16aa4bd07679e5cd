"""Compiled kernel artifacts and their self-checking on-disk container.

Requires: only the standard library (no MLIR bindings, IREE, torch or numpy), so a cache hit stays cheap.

Guarantees:

* :class:`ArgSpec`, :class:`KernelMetadata` and :class:`Artifact` are frozen, slotted and hashable.
* ``Artifact.from_bytes(a.to_bytes()) == a`` for every valid artifact.
* ``Artifact.from_bytes`` raises :class:`~wavec.errors.CacheError` on any blob that is truncated, corrupt,
  of another container version, or whose header does not describe a valid artifact; it never returns a
  half-read artifact.

Container layout (all integers little-endian)::

    magic       8 bytes   b"WAVECART"
    version     u32       FORMAT_VERSION
    header_len  u32
    binary_len  u64
    mlir_len    u64
    header      header_len bytes of UTF-8 JSON: {"target", "format", "metadata"}
    binary      binary_len bytes
    mlir        mlir_len bytes of UTF-8
    digest      32 bytes  SHA-256 of everything before it
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

from wavec.errors import CacheError
from wavec.frontend.dtypes import TORCH_NAMES
from wavec.runtime.tensor_map import TensorMapSpec

__all__ = ["ArgSpec", "KernelMetadata", "Artifact", "DTYPES", "FORMATS", "FORMAT_VERSION", "MAGIC"]

MAGIC = b"WAVECART"
FORMAT_VERSION = 1
DTYPES = tuple(n for n in TORCH_NAMES if n != "i1")  # element types a tensor argument may have
FORMATS = ("cubin", "ptx", "hsaco")

_PREFIX = struct.Struct("<8sIIQQ")
_PLAIN_FIELDS = (("kernel", str), ("entry", str), ("shared_bytes", int), ("alignment_bytes", int), ("source", str))
_DIGEST_LEN = 32


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One kernel binding (a tensor argument); ``shape`` entries are symbol names or static ints.

    ``strides``: empty for a dense row-major binding; in a strided variant, per dimension the launch
    constant that carries its stride (in elements) or 1 (an innermost stride the kernel takes as 1).
    ``multiple``: the outer strides and the base pointer's offset, in elements, must be multiples of it
    (the longest run the kernel accesses the binding's rows in; strided variants only).
    """

    name: str
    dtype: str
    shape: tuple[str | int, ...]
    is_output: bool
    strides: tuple[str | int, ...] = ()
    multiple: int = 1

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> ArgSpec:
        return ArgSpec(
            name=_typed(d["name"], str, "arg name"),
            dtype=_typed(d["dtype"], str, "arg dtype"),
            shape=tuple(x if isinstance(x, str) else _typed(x, int, "shape entry") for x in d["shape"]),
            is_output=_typed(d["is_output"], bool, "arg is_output"),
            strides=tuple(x if isinstance(x, str) else _typed(x, int, "stride entry") for x in d.get("strides", [])),
            multiple=_typed(d.get("multiple", 1), int, "arg multiple"),
        )


@dataclass(frozen=True, slots=True)
class KernelMetadata:
    """Everything the launcher needs besides the binary.

        ``constants``: the dynamic symbols, the scalar arguments, then (a strided variant) the tensors' strides
    (``ArgSpec.strides``), one i32 each after the pointers;
        ``scalars``: the by-value arguments ``(name, dtype)``, after the tensors (an f32 as its bits); ``grid``:
        three Python integer expressions over symbol names; ``divisibility``: ``(symbol, divisor)`` pairs that
        must hold at launch; base pointers are multiples of ``alignment_bytes``; ``source``: ``file:line`` of
        the definition; ``tensor_maps``: read from one extra binding after the tensors (``tensor_map.py``);
        ``bounds_checks``: with ``WAVEC_CHECK_BOUNDS``, per checked access (its id in the bounds record, one
        more binding after those) ``(file:line, source code, op, memory argument, dimension)`` (``runtime/bounds.py``);
        ``signature``: every argument's name in the order of the kernel's ``def`` (scalars may stand anywhere
        there; the bindings above stay tensors first), the order a call's positional arguments follow;
        ``cluster``: thread-block cluster dimensions, launched with ``cuLaunchKernelEx`` when not all 1.
    """

    kernel: str
    entry: str
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[ArgSpec, ...]
    constants: tuple[str, ...]
    static_symbols: tuple[tuple[str, int], ...]
    grid: tuple[str, str, str]
    divisibility: tuple[tuple[str, int], ...]
    alignment_bytes: int
    source: str
    registers: int | None = None
    spills: int | None = None
    scalars: tuple[tuple[str, str], ...] = ()
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    bounds_checks: tuple[tuple[str, str, str, str, str], ...] = ()
    signature: tuple[str, ...] = ()
    cluster: tuple[int, int, int] = (1, 1, 1)

    @property
    def label(self) -> str:
        """How errors name the kernel: its name and where it is defined."""
        return f"{self.kernel} (defined at {self.source})" if self.source else self.kernel

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> KernelMetadata:
        block = tuple(_typed(x, int, "block") for x in d["block"])
        grid = tuple(_typed(x, str, "grid") for x in d["grid"])
        if len(block) != 3 or len(grid) != 3:
            raise CacheError(message="metadata: block and grid must have 3 entries")
        return KernelMetadata(
            **{name: _typed(d[name], kind, name) for name, kind in _PLAIN_FIELDS},
            block=block,
            args=tuple(ArgSpec.from_json(a) for a in d["args"]),
            constants=tuple(_typed(x, str, "constants") for x in d["constants"]),
            static_symbols=_pairs(d["static_symbols"], "static_symbols"),
            grid=grid,
            divisibility=_pairs(d["divisibility"], "divisibility"),
            registers=_opt_int(d.get("registers"), "registers"),
            spills=_opt_int(d.get("spills"), "spills"),
            scalars=tuple(
                (_typed(n, str, "scalar name"), _typed(t, str, "scalar dtype")) for n, t in d.get("scalars", [])
            ),
            tensor_maps=tuple(TensorMapSpec.from_json(m) for m in d.get("tensor_maps", [])),
            bounds_checks=tuple(_strings(c, 5, "bounds_checks") for c in d.get("bounds_checks", [])),
            signature=tuple(_typed(n, str, "signature") for n in d.get("signature", [])),
            cluster=_cluster(d.get("cluster", [1, 1, 1])),
        )


@dataclass(frozen=True, slots=True)
class Artifact:
    """A compiled kernel: the binary, its launch metadata and the exact MLIR module compiled."""

    target: str
    format: str
    binary: bytes
    metadata: KernelMetadata
    mlir: str

    def to_bytes(self) -> bytes:
        """Serialise into the self-describing container described in the module docstring."""
        header = json.dumps(
            {"target": self.target, "format": self.format, "metadata": self.metadata.to_json()},
            sort_keys=True,
            separators=(",", ":"),
        ).encode("utf-8")
        mlir = self.mlir.encode("utf-8")
        body = b"".join(
            [
                _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), len(self.binary), len(mlir)),
                header,
                bytes(self.binary),
                mlir,
            ]
        )
        return body + hashlib.sha256(body).digest()

    @staticmethod
    def from_bytes(blob: bytes) -> Artifact:
        """Parse and verify a container; raises :class:`CacheError` on anything but a valid one."""
        blob = bytes(blob)
        if len(blob) < _PREFIX.size + _DIGEST_LEN:
            raise CacheError(message=f"artifact truncated ({len(blob)} bytes)")
        magic, version, hlen, blen, mlen = _PREFIX.unpack_from(blob, 0)
        if magic != MAGIC:
            raise CacheError(message=f"not a wavec artifact (magic {magic!r})")
        if version != FORMAT_VERSION:
            raise CacheError(message=f"artifact container version {version}, expected {FORMAT_VERSION}")
        end = _PREFIX.size + hlen + blen + mlen
        if len(blob) != end + _DIGEST_LEN:
            raise CacheError(message=f"artifact is {len(blob)} bytes, its header says {end + _DIGEST_LEN}")
        if hashlib.sha256(blob[:end]).digest() != blob[end:]:
            raise CacheError(message="artifact checksum mismatch (corrupt entry)")
        pos = _PREFIX.size
        header_raw = blob[pos : pos + hlen]
        binary = blob[pos + hlen : pos + hlen + blen]
        mlir_raw = blob[pos + hlen + blen : end]
        try:
            header = json.loads(header_raw.decode("utf-8"))
            artifact = Artifact(
                target=_typed(header["target"], str, "target"),
                format=_typed(header["format"], str, "format"),
                binary=binary,
                metadata=KernelMetadata.from_json(header["metadata"]),
                mlir=mlir_raw.decode("utf-8"),
            )
        except CacheError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CacheError(message=f"artifact header is malformed: {type(exc).__name__}: {exc}") from exc
        if artifact.format not in FORMATS:
            raise CacheError(message=f"artifact format {artifact.format!r} is not one of {FORMATS}")
        return artifact


def _typed(value: Any, kind: type, what: str) -> Any:
    # bool is an int subclass: reject it where an int is wanted, and vice versa.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CacheError(message=f"metadata: {what} should be {kind.__name__}, got {value!r}")
    return value


def _to_json(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON values: tuples as lists, nested specs by their ``to_json``."""

    def value(v: Any) -> Any:
        if isinstance(v, tuple):
            return [value(x) for x in v]
        return v.to_json() if hasattr(v, "to_json") else v

    return {f.name: value(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _cluster(item: Any) -> tuple[int, int, int]:
    if not isinstance(item, list) or len(item) != 3:
        raise CacheError(message=f"metadata: cluster should be a list of 3 ints, got {item!r}")
    x, y, z = (_typed(v, int, "cluster") for v in item)
    return (x, y, z)


def _opt_int(value: Any, what: str) -> int | None:
    return None if value is None else _typed(value, int, what)


def _strings(item: Any, n: int, what: str) -> tuple:
    if not isinstance(item, list) or len(item) != n:
        raise CacheError(message=f"metadata: {what} entries should be lists of {n} strings, got {item!r}")
    return tuple(_typed(x, str, what) for x in item)


def _pairs(items: Any, what: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in items:
        if not isinstance(item, list) or len(item) != 2:
            raise CacheError(message=f"metadata: {what} entries should be [name, int], got {item!r}")
        out.append((_typed(item[0], str, what), _typed(item[1], int, what)))
    return tuple(out)
