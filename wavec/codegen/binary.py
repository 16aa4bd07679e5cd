"""Parse the executable container IREE 3.13 writes for ``--compile-mode=hal-executable``.

Requires: the standard library only (a machine that only runs cached kernels can read an artifact).
Guarantees: :func:`parse_executable` returns a :class:`GpuBinary` (PTX text for CUDA, HSACO ELF bytes for
ROCm) with one :class:`ExportInfo` per export, in ordinal order; every offset is bounds-checked, so a
truncated, corrupt or unexpected blob raises :class:`~wavec.errors.ToolchainError`, never an
``IndexError`` or a wrong result.

Layout (checked against real blobs; ``cuda_executable_def.fbs`` / ``hip_executable_def.fbs`` in
iree-org/iree): a 64-byte header (magic ``CDA1`` / ``HIP1``, u32 version 0, u64 payload size, zeros), then
a FlatBuffer with the same identifier::

    table ExecutableDef { exports:[ExportDef]; modules:[ModuleDef]; source_files:[SourceFileDef]; }
    table ExportDef { module_ordinal:uint32; kernel_name:string; block_dims:BlockDims (struct u32 x,y,z);
                      block_shared_memory_size:uint32; constant_count:uint32; binding_flags:[uint64]; ... }
    table ModuleDef { ptx_image:string }   // CUDA;  ROCm: { hsaco_image:string }
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wavec.errors import ToolchainError

__all__ = ["ExportInfo", "GpuBinary", "parse_executable", "HEADER_BYTES"]

HEADER_BYTES = 64
_MAGIC = {"ptx": b"CDA1", "hsaco": b"HIP1"}
_ELF_MAGIC = b"\x7fELF"

# Field slots (declaration order) of the tables above.
_EXE_EXPORTS, _EXE_MODULES = 0, 1
_EXP_MODULE, _EXP_NAME, _EXP_BLOCK, _EXP_SHARED, _EXP_CONSTANTS, _EXP_BINDINGS = range(6)
_MOD_IMAGE = 0


@dataclass(frozen=True, slots=True)
class ExportInfo:
    """Launch metadata of one kernel: entry name, block dims, dynamic shared bytes, ABI counts."""

    name: str
    block: tuple[int, int, int]
    shared_bytes: int
    constant_count: int
    binding_count: int
    module_ordinal: int = 0


@dataclass(frozen=True, slots=True)
class GpuBinary:
    """A GPU image and its exports.  ``image`` is ``str`` (PTX) or ``bytes`` (HSACO)."""

    format: str
    image: bytes | str
    exports: tuple[ExportInfo, ...]

    def export(self, name: str) -> ExportInfo:
        for e in self.exports:
            if e.name == name:
                return e
        raise KeyError(f"no export {name!r}; have {[e.name for e in self.exports]}")


def _bad(what: str) -> ToolchainError:
    return ToolchainError(message=f"malformed IREE executable: {what}")


class _FlatBuffer:
    """Bounds-checked reads from one FlatBuffer (little-endian, 32-bit offsets)."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def _unpack(self, fmt: str, pos: int) -> int:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.buf):
            raise _bad(f"read of {size} bytes at offset {pos} outside a {len(self.buf)}-byte buffer")
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def u16(self, pos: int) -> int:
        return self._unpack("<H", pos)

    def u32(self, pos: int) -> int:
        return self._unpack("<I", pos)

    def i32(self, pos: int) -> int:
        return self._unpack("<i", pos)

    def root(self) -> int:
        return self.u32(0)

    def field(self, table: int, slot: int) -> int | None:
        """Absolute position of field ``slot`` of the table at ``table``; ``None`` when absent."""
        vtable = table - self.i32(table)
        vt_size = self.u16(vtable)
        if vt_size < 4 or vt_size % 2:
            raise _bad(f"vtable size {vt_size} at offset {vtable}")
        entry = 4 + 2 * slot
        if entry + 2 > vt_size:
            return None
        rel = self.u16(vtable + entry)
        if rel == 0:
            return None
        if rel >= self.u16(vtable + 2):
            raise _bad(f"field {slot} at offset {rel} beyond its table")
        return table + rel

    def deref(self, pos: int) -> int:
        """Follow the unsigned offset stored at ``pos``."""
        return pos + self.u32(pos)

    def scalar_u32(self, table: int, slot: int, default: int = 0) -> int:
        pos = self.field(table, slot)
        return default if pos is None else self.u32(pos)

    def vector(self, table: int, slot: int, elem_bytes: int) -> tuple[int, int]:
        """(position of element 0, length) of a vector field; (0, 0) when absent."""
        pos = self.field(table, slot)
        if pos is None:
            return 0, 0
        vec = self.deref(pos)
        length = self.u32(vec)
        if vec + 4 + elem_bytes * length > len(self.buf):
            raise _bad(f"vector of {length} elements at offset {vec} overruns the buffer")
        return vec + 4, length

    def table_vector(self, table: int, slot: int) -> list[int]:
        start, length = self.vector(table, slot, 4)
        return [self.deref(start + 4 * i) for i in range(length)]

    def bytes_field(self, table: int, slot: int) -> bytes | None:
        """A ``string`` (or ``[ubyte]``) field as raw bytes; ``None`` when absent."""
        pos = self.field(table, slot)
        if pos is None:
            return None
        start = self.deref(pos)
        length = self.u32(start)
        if start + 4 + length > len(self.buf):
            raise _bad(f"string of {length} bytes at offset {start} overruns the buffer")
        return self.buf[start + 4 : start + 4 + length]


def _payload(blob: bytes, fmt: str) -> bytes:
    """Check the 64-byte header and return the FlatBuffer payload."""
    magic = _MAGIC.get(fmt)
    if magic is None:
        raise ToolchainError(message=f"unknown binary format {fmt!r}; expected one of {sorted(_MAGIC)}")
    if len(blob) < HEADER_BYTES + 8:
        raise _bad(f"{len(blob)} bytes is shorter than the header")
    if blob[:4] != magic:
        raise _bad(f"magic {blob[:4]!r}, expected {magic!r}")
    version, size = struct.unpack_from("<IQ", blob, 4)
    if version != 0:
        raise _bad(f"container version {version} (wavec reads version 0 of IREE 3.13)")
    payload = blob[HEADER_BYTES:]
    if size > len(payload):
        raise _bad(f"header says {size} payload bytes, only {len(payload)} present (truncated)")
    payload = payload[:size]
    if payload[4:8] != magic:
        raise _bad(f"FlatBuffer identifier {payload[4:8]!r}, expected {magic!r}")
    return payload


def _parse_export(fb: _FlatBuffer, table: int, ordinal: int) -> ExportInfo:
    raw_name = fb.bytes_field(table, _EXP_NAME)
    if raw_name is None:
        raise _bad(f"export {ordinal} has no kernel name")
    block_pos = fb.field(table, _EXP_BLOCK)
    block = (1, 1, 1) if block_pos is None else (fb.u32(block_pos), fb.u32(block_pos + 4), fb.u32(block_pos + 8))
    _, binding_count = fb.vector(table, _EXP_BINDINGS, 8)
    return ExportInfo(
        name=raw_name.decode("utf-8", "replace"),
        block=block,
        shared_bytes=fb.scalar_u32(table, _EXP_SHARED),
        constant_count=fb.scalar_u32(table, _EXP_CONSTANTS),
        binding_count=binding_count,
        module_ordinal=fb.scalar_u32(table, _EXP_MODULE),
    )


def parse_executable(blob: bytes, fmt: str) -> GpuBinary:
    """Parse an IREE 3.13 executable; ``fmt`` is ``Target.binary_format`` (``"ptx"`` or ``"hsaco"``).

    Only single-module executables are supported (wavec emits one variant per executable).
    """
    fb = _FlatBuffer(_payload(bytes(blob), fmt))
    root = fb.root()
    exports = tuple(_parse_export(fb, t, i) for i, t in enumerate(fb.table_vector(root, _EXE_EXPORTS)))
    modules = fb.table_vector(root, _EXE_MODULES)
    if len(modules) != 1:
        raise _bad(f"{len(modules)} modules; wavec expects exactly one")
    image = fb.bytes_field(modules[0], _MOD_IMAGE)
    if not image:
        raise _bad("the module has no image")
    for e in exports:
        if e.module_ordinal != 0:
            raise _bad(f"export {e.name} refers to module {e.module_ordinal}")
        if min(e.block) < 1:
            raise _bad(f"export {e.name} has block dims {e.block}")
    if fmt == "ptx":
        text = image.decode("utf-8", "replace")
        if ".entry" not in text:
            raise _bad("the PTX image has no .entry")
        return GpuBinary(format=fmt, image=text, exports=exports)
    if not image.startswith(_ELF_MAGIC):
        raise _bad("the HSACO image is not an ELF file")
    return GpuBinary(format=fmt, image=image, exports=exports)
