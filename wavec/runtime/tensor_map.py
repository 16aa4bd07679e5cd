"""TMA tensor maps: what a kernel asks for (:class:`TensorMapSpec`), what one call gives it
(:class:`TensorMap`), and the 128-byte encodings the kernel reads from its tensor-map binding.

Requires: only the standard library (the CUDA encoder loads libcuda itself), so the emulator and the unit
tests need no CUDA driver and a cache hit stays cheap.

Guarantees:

* A kernel that loads tiles with TMA lists one :class:`TensorMapSpec` per (tensor, box) and gets one extra
  ReadOnly binding after the tensors: ``128 x len(specs)`` bytes, map ``i`` at byte ``128 i``.  IREE's
  kernel ABI passes only pointers and i32 constants, so a ``CUtensorMap`` cannot be a
  ``__grid_constant__`` parameter; the kernel reads each map through its global address, after a
  ``fence.proxy.tensormap::generic.acquire.sys`` (so what the host wrote is what the TMA unit reads).
* :func:`describe` makes a call's :class:`TensorMap` or raises :class:`~wavec.errors.ArgumentError` when
  TMA cannot describe the tensor: 16-byte aligned address, every stride a multiple of 16 bytes below
  2^40 (PTX ISA, "Tensor-map"; ``cuTensorMapEncodeTiled``).
* :func:`encode_cuda` encodes with the driver's ``cuTensorMapEncodeTiled`` (tiled, no interleave, the
  spec's swizzle, 256-byte L2 promotion, zero fill out of bounds); :func:`encode_emulated` /
  :func:`decode_emulated` are wavec's own 128-byte layout of the same fields, for the CPU emulator.
* :class:`TensorMapCache` keeps the encoded buffer of each distinct (pointers, shapes, strides), so
  repeated calls cost one dict lookup; cached buffers are never rewritten, and past ``limit`` entries a
  call's buffer is not cached (freed, stream-ordered, after a later call).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wavec.errors import ArgumentError, LaunchError

__all__ = [
    "MAP_BYTES",
    "TensorMapSpec",
    "TensorMap",
    "describe",
    "encode_cuda",
    "encode_emulated",
    "decode_emulated",
    "TensorMapCache",
    "SWIZZLES",
]

MAP_BYTES = 128
SWIZZLES = (0, 32, 64, 128)  # bytes of the swizzle span (0: none)
MAX_BOX = 256  # elements per box dimension
_ELEM_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i32": 4, "i8": 1}
_MAGIC = b"WCTMAP02"
_HEADER = struct.Struct("<8sIIII")  # magic, arg, element bytes, rank, swizzle
_DIM = struct.Struct("<IQH")  # size (< 2^32), byte stride (< 2^40), box (<= 256): 14 bytes, rank 5 fits
MAX_RANK = 5  # cuTensorMapEncodeTiled: tile mode, 1..5 dimensions


@dataclass(frozen=True, slots=True)
class TensorMapSpec:
    """One tensor map a kernel needs: binding ``arg`` (a tensor of ``dtype``) tiled in boxes of ``box``
    elements (innermost dimension first; the innermost box is at most ``swizzle`` bytes when swizzled)."""

    arg: int
    dtype: str
    box: tuple[int, ...]
    swizzle: int

    def __post_init__(self) -> None:
        if self.dtype not in _ELEM_BYTES or self.swizzle not in SWIZZLES or not 0 < len(self.box) <= MAX_RANK:
            raise ValueError(f"invalid TensorMapSpec {self} (rank 1..{MAX_RANK})")
        if any(not 0 < b <= MAX_BOX for b in self.box):
            raise ValueError(f"TensorMapSpec box {self.box}: every dimension must be 1..{MAX_BOX}")
        if self.swizzle and self.box[0] * self.elem_bytes > self.swizzle:
            raise ValueError(
                f"TensorMapSpec: an inner box of {self.box[0] * self.elem_bytes} bytes is wider than "
                f"the {self.swizzle}-byte swizzle span"
            )

    @property
    def elem_bytes(self) -> int:
        return _ELEM_BYTES[self.dtype]

    @property
    def box_bytes(self) -> int:
        return self.elem_bytes * math.prod(self.box)

    def to_json(self) -> dict[str, Any]:
        return {"arg": self.arg, "dtype": self.dtype, "box": list(self.box), "swizzle": self.swizzle}

    @staticmethod
    def from_json(d: dict[str, Any]) -> TensorMapSpec:
        return TensorMapSpec(int(d["arg"]), str(d["dtype"]), tuple(int(b) for b in d["box"]), int(d["swizzle"]))


@dataclass(frozen=True, slots=True)
class TensorMap:
    """A tensor map of one call: ``dims`` and byte ``strides`` innermost first (``strides[0]`` is the
    element size: the innermost dimension is contiguous), the tensor's global ``address``."""

    spec: TensorMapSpec
    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]


def describe(
    spec: TensorMapSpec, address: int, shape: Sequence[int], strides: Sequence[int], kernel: str = "?", arg: str = "?"
) -> TensorMap:
    """The map of a tensor at ``address`` with ``shape``/``strides`` (in elements, outermost first, as
    torch gives them); raises :class:`ArgumentError` when TMA cannot describe it."""
    n, rank = spec.elem_bytes, len(spec.box)

    def bad(message: str) -> ArgumentError:
        return ArgumentError(kernel=kernel, arg=arg, message=message)

    if len(shape) != rank:
        raise bad(f"a TMA tensor map of rank {rank} cannot describe a rank-{len(shape)} tensor")
    dims = tuple(int(s) for s in reversed(shape))
    byte_strides = tuple(int(s) * n for s in reversed(strides))
    if byte_strides[0] != n:
        raise bad(
            f"TMA needs the last dimension contiguous, got strides {tuple(strides)} (elements); call .contiguous()"
        )
    if address % 16:
        raise bad(
            f"TMA needs a 16-byte aligned global address, got 0x{address:x}; pass a tensor that starts at an "
            "aligned address, e.g. .clone()"
        )
    for d, s in enumerate(byte_strides[1:], 1):
        if s % 16 or s >= 2**40:
            raise bad(
                f"TMA needs every stride a multiple of 16 bytes (and below 2^40), got {s} bytes for dimension "
                f"{rank - 1 - d} (shape {tuple(shape)}); pad the last dimension to a multiple of {16 // n} elements"
            )
    if any(not 0 < d < 2**32 for d in dims):
        raise bad(f"TMA needs every dimension in 1..2^32-1, got shape {tuple(shape)}")
    return TensorMap(spec, address, dims, byte_strides)


# CUtensorMapDataType / CUtensorMapSwizzle values (cuda.h)
_CU_DTYPES = {"f16": 6, "f32": 7, "bf16": 9, "i32": 3, "i8": 0}  # i8: UINT8, the map only moves bytes
_CU_SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
_CU_INTERLEAVE_NONE, _CU_L2_PROMOTION_256B, _CU_OOB_FILL_NONE = 0, 3, 0
_encoder: Any = None


def _cu_encode_tiled() -> Any:
    """``cuTensorMapEncodeTiled`` of libcuda through ctypes (plain C types: no binding-specific wrappers)."""
    global _encoder
    if _encoder is None:
        import ctypes

        fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
        u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p]
        fn.argtypes += [ctypes.c_int] * 4  # interleave, swizzle, L2 promotion, out-of-bounds fill
        fn.restype = ctypes.c_int
        _encoder = fn
    return _encoder


def encode_cuda(m: TensorMap, kernel: str = "?") -> bytes:
    """The 128-byte ``CUtensorMap`` of ``m`` from the driver's ``cuTensorMapEncodeTiled``."""
    import ctypes

    spec, rank = m.spec, len(m.dims)
    out = (ctypes.c_uint64 * 16)()
    err = _cu_encode_tiled()(
        ctypes.addressof(out),
        _CU_DTYPES[spec.dtype],
        rank,
        m.address,
        (ctypes.c_uint64 * rank)(*m.dims),
        (ctypes.c_uint64 * max(rank - 1, 1))(*m.strides[1:]),
        (ctypes.c_uint32 * rank)(*spec.box),
        (ctypes.c_uint32 * rank)(*[1] * rank),
        _CU_INTERLEAVE_NONE,
        _CU_SWIZZLES[spec.swizzle],
        _CU_L2_PROMOTION_256B,
        _CU_OOB_FILL_NONE,
    )
    if err:
        raise LaunchError(kernel=kernel, message=f"cuTensorMapEncodeTiled({m}) returned CUresult {err}")
    return bytes(out)


def encode_emulated(m: TensorMap) -> bytes:
    """wavec's 128-byte layout of ``m`` for the emulator: header, then (size, byte stride, box) per dim."""
    spec = m.spec
    out = _HEADER.pack(_MAGIC, spec.arg, spec.elem_bytes, len(m.dims), spec.swizzle) + struct.pack("<Q", m.address)
    out += b"".join(_DIM.pack(d, s, b) for d, s, b in zip(m.dims, m.strides, spec.box))
    if len(out) > MAP_BYTES:
        raise ValueError(f"a rank-{len(m.dims)} map does not fit in {MAP_BYTES} bytes")
    return out.ljust(MAP_BYTES, b"\0")


def decode_emulated(raw: bytes) -> tuple[int, int, int, int, tuple, tuple, tuple]:
    """(arg, element bytes, swizzle, address, dims, byte strides, box) of an :func:`encode_emulated` map;
    ``ValueError`` when ``raw`` is not one."""
    magic, arg, elem, rank, swizzle = _HEADER.unpack_from(raw, 0)
    if magic != _MAGIC or not 0 < rank <= 5 or swizzle not in SWIZZLES:
        raise ValueError("not a wavec tensor map (uninitialised or corrupt 128-byte entry)")
    (address,) = struct.unpack_from("<Q", raw, _HEADER.size)
    fields = [_DIM.unpack_from(raw, _HEADER.size + 8 + i * _DIM.size) for i in range(rank)]
    dims, strides, box = (tuple(f[j] for f in fields) for j in range(3))
    return arg, elem, swizzle, address, dims, strides, box


class TensorMapCache:
    """Encoded map buffers per distinct (address, shape, strides) of the mapped tensors, at most ``limit``.
    ``encode(TensorMap) -> bytes``; ``upload(raw, device) -> (handle keeping it alive, device address)``."""

    def __init__(
        self,
        specs: Sequence[TensorMapSpec],
        encode: Callable[[TensorMap], bytes],
        upload: Callable[[bytes, Any], tuple[Any, int]],
        kernel: str = "?",
        names: Sequence[str] = (),
        limit: int = 1024,
    ) -> None:
        self.specs = tuple(specs)
        self.encode, self.upload, self.kernel, self.limit = encode, upload, kernel, limit
        self.names = tuple(names)
        self._cache: dict[tuple, tuple[Any, int]] = {}
        self._last: Any = None  # the latest uncached buffer (the allocator frees it in stream order later)

    def address(self, tensors: Sequence[Any], addresses: Sequence[int], device: Any) -> int:
        """Device address of the map buffer for ``tensors`` (whose base addresses are ``addresses``)."""
        key = tuple((addresses[s.arg], tuple(tensors[s.arg].shape), tuple(tensors[s.arg].stride())) for s in self.specs)
        hit = self._cache.get(key)
        if hit is not None:
            return hit[1]
        raw = b"".join(
            self.encode(describe(s, addr, shape, strides, self.kernel, self._name(s.arg)))
            for s, (addr, shape, strides) in zip(self.specs, key)
        )
        entry = self.upload(raw, device)
        if len(self._cache) < self.limit:
            self._cache[key] = entry
        else:
            self._last = entry
        return entry[1]

    def _name(self, arg: int) -> str:
        return self.names[arg] if arg < len(self.names) else f"#{arg}"
