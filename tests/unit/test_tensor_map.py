"""Unit tier for TMA tensor maps (``wavec/runtime/tensor_map.py``): what a launch may describe and the
errors for what it may not, the emulator's 128-byte encoding, the arguments handed to the driver's
``cuTensorMapEncodeTiled`` (through a stand-in: no CUDA driver needed), the per-tensors cache, and the
specs' round trip through an artifact."""

from __future__ import annotations

import ctypes
import hashlib

import pytest
import torch

from wavec.errors import ArgumentError, CacheError, LaunchError
from wavec.runtime import tensor_map as tm
from wavec.runtime.artifact import ArgSpec, Artifact, KernelMetadata

SPEC = tm.TensorMapSpec(arg=1, dtype="bf16", box=(64, 256), swizzle=128)


def test_describe_innermost_first() -> None:
    m = tm.describe(SPEC, 0x7F00_0000_0200, (1000, 264), (264, 1))
    assert (m.address, m.dims, m.strides) == (0x7F00_0000_0200, (264, 1000), (2, 528))
    assert SPEC.box_bytes == 64 * 256 * 2 and SPEC.elem_bytes == 2


@pytest.mark.parametrize("address,shape,strides,why", [
    (0x1008, (64, 64), (64, 1), "16-byte aligned"),
    (0x1000, (64, 60), (60, 1), "multiple of 16 bytes"),
    (0x1000, (64, 64), (1, 64), "last dimension contiguous"),
    (0x1000, (4, 64, 64), (4096, 64, 1), "rank-3"),
])
def test_describe_rejects_what_tma_cannot_read(address: int, shape, strides, why: str) -> None:
    with pytest.raises(ArgumentError, match=why):
        tm.describe(SPEC, address, shape, strides, "k", "b")


def test_spec_checks_and_json() -> None:
    with pytest.raises(ValueError, match="1..256"):
        tm.TensorMapSpec(0, "f16", (64, 512), 128)
    with pytest.raises(ValueError, match="wider than"):
        tm.TensorMapSpec(0, "f32", (64, 64), 128)  # 256-byte inner box, 128-byte swizzle span
    assert tm.TensorMapSpec.from_json(SPEC.to_json()) == SPEC


def test_emulated_encoding_round_trip() -> None:
    m = tm.describe(SPEC, 3 << 40, (130, 72), (72, 1))
    raw = tm.encode_emulated(m)
    assert len(raw) == tm.MAP_BYTES
    assert tm.decode_emulated(raw) == (1, 2, 128, 3 << 40, (72, 130), (2, 144), (64, 256))
    with pytest.raises(ValueError, match="not a wavec tensor map"):
        tm.decode_emulated(bytes(tm.MAP_BYTES))


def test_encode_cuda_arguments(monkeypatch) -> None:
    """The driver gets: dtype enum, rank, address, dims and byte strides innermost first (the innermost
    stride implied), the box, unit element strides, no interleave, the 128-byte swizzle (3), 256-byte L2
    promotion (3), zero fill (0); its 128 bytes are returned as they are."""
    calls = []

    def fake(out, dtype, rank, address, dims, strides, box, estrides, interleave, swizzle, l2, oob):
        calls.append((dtype, rank, address, list(dims[:rank]), list(strides[:rank - 1]), list(box[:rank]),
                      list(estrides[:rank]), interleave, swizzle, l2, oob))
        ctypes.memmove(out, bytes(range(128)), 128)
        return 0

    monkeypatch.setattr(tm, "_encoder", fake)
    raw = tm.encode_cuda(tm.describe(SPEC, 0x1000, (4096, 8192), (8192, 1)))
    assert raw == bytes(range(128))
    assert calls == [(9, 2, 0x1000, [8192, 4096], [16384], [64, 256], [1, 1], 0, 3, 3, 0)]
    monkeypatch.setattr(tm, "_encoder", lambda *a: 1)
    with pytest.raises(LaunchError, match="CUresult 1"):
        tm.encode_cuda(tm.describe(SPEC, 0x1000, (64, 64), (64, 1)), "k")


def test_cache_per_tensors() -> None:
    specs = (tm.TensorMapSpec(0, "f16", (64, 128), 128), SPEC)
    uploads = []

    def upload(raw: bytes, device):
        uploads.append(raw)
        return raw, 0x1000 * len(uploads)

    cache = tm.TensorMapCache(specs, tm.encode_emulated, upload, "k", ["a", "b"], limit=2)
    a, b = torch.empty(256, 64, dtype=torch.float16), torch.empty(512, 64, dtype=torch.bfloat16)
    assert cache.address((a, b), (1 << 40, 2 << 40), None) == 0x1000
    assert cache.address((a, b), (1 << 40, 2 << 40), None) == 0x1000  # same tensors: no new upload
    assert len(uploads) == 1 and len(uploads[0]) == 2 * tm.MAP_BYTES
    assert tm.decode_emulated(uploads[0][tm.MAP_BYTES:])[4] == (64, 512)
    assert cache.address((a, b[:256]), (1 << 40, 2 << 40), None) == 0x2000  # another shape: another map
    assert cache.address((a, b), (1 << 40, 3 << 40), None) == 0x3000  # past the limit: uncached but right
    assert len(cache._cache) == 2
    with pytest.raises(ArgumentError, match="'b'"):
        cache.address((a, b), (1 << 40, (2 << 40) + 8), None)


def test_metadata_round_trip() -> None:
    meta = KernelMetadata(kernel="gemm", entry="gemm", block=(256, 1, 1), shared_bytes=1024,
                          args=(ArgSpec("a", "f16", ("M", "K"), False),), constants=("M", "K"), static_symbols=(),
                          grid=("M", "1", "1"), divisibility=(("K", 8),), alignment_bytes=16, source="x.py:1",
                          tensor_maps=(SPEC,))
    art = Artifact(target="sm_90a", format="cubin", binary=b"\0", metadata=meta, mlir="")
    assert Artifact.from_bytes(art.to_bytes()).metadata.tensor_maps == (SPEC,)
    body = art.to_bytes()[:-32].replace(b'"swizzle":128', b'"swizzle":100')  # same length, valid digest
    with pytest.raises(CacheError, match="malformed"):
        Artifact.from_bytes(body + hashlib.sha256(body).digest())
