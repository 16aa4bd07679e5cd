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


@pytest.mark.parametrize(
    "address,shape,strides,why",
    [
        (0x1008, (64, 64), (64, 1), "16-byte aligned"),
        (0x1000, (64, 60), (60, 1), "multiple of 16 bytes"),
        (0x1000, (64, 64), (1, 64), "last dimension contiguous"),
        (0x1000, (4, 64, 64), (4096, 64, 1), "rank-3"),
    ],
)
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
        calls.append(
            (
                dtype,
                rank,
                address,
                list(dims[:rank]),
                list(strides[: rank - 1]),
                list(box[:rank]),
                list(estrides[:rank]),
                interleave,
                swizzle,
                l2,
                oob,
            )
        )
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
    assert tm.decode_emulated(uploads[0][tm.MAP_BYTES :])[4] == (64, 512)
    assert cache.address((a, b[:256]), (1 << 40, 2 << 40), None) == 0x2000  # another shape: another map
    assert cache.address((a, b), (1 << 40, 3 << 40), None) == 0x3000  # past the limit: uncached but right
    assert len(cache._cache) == 2
    with pytest.raises(ArgumentError, match="'b'"):
        cache.address((a, b), (1 << 40, (2 << 40) + 8), None)


def test_metadata_round_trip() -> None:
    meta = KernelMetadata(
        kernel="gemm",
        entry="gemm",
        block=(256, 1, 1),
        shared_bytes=1024,
        args=(ArgSpec("a", "f16", ("M", "K"), False),),
        constants=("M", "K"),
        static_symbols=(),
        grid=("M", "1", "1"),
        divisibility=(("K", 8),),
        alignment_bytes=16,
        source="x.py:1",
        tensor_maps=(SPEC,),
    )
    art = Artifact(target="sm_90a", format="cubin", binary=b"\0", metadata=meta, mlir="")
    assert Artifact.from_bytes(art.to_bytes()).metadata.tensor_maps == (SPEC,)
    body = art.to_bytes()[:-32].replace(b'"swizzle":128', b'"swizzle":100')  # same length, valid digest
    with pytest.raises(CacheError, match="malformed"):
        Artifact.from_bytes(body + hashlib.sha256(body).digest())


# ----- rank 4 (attention K/V [B, KVH, N, D] / [B, N, KVH, D]: box 1 along the batch dims) ------------------

KV_BHSD = tm.TensorMapSpec(arg=1, dtype="f16", box=(64, 128, 1, 1), swizzle=128)
KV_BSHD = tm.TensorMapSpec(arg=2, dtype="f16", box=(64, 1, 128, 1), swizzle=128)


def test_describe_rank4_bhsd_and_bshd() -> None:
    m = tm.describe(KV_BHSD, 0x1000, (2, 3, 100, 128), (38400, 12800, 128, 1))
    assert m.dims == (128, 100, 3, 2) and m.strides == (2, 256, 25600, 76800)
    m = tm.describe(KV_BSHD, 0x1000, (2, 100, 3, 128), (38400, 384, 128, 1))
    assert m.dims == (128, 3, 100, 2) and m.strides == (2, 256, 768, 76800)
    assert KV_BSHD.box_bytes == 64 * 128 * 2


def test_describe_rank4_rejects() -> None:
    with pytest.raises(ArgumentError, match="rank-3"):
        tm.describe(KV_BHSD, 0x1000, (3, 100, 128), (12800, 128, 1))
    with pytest.raises(ArgumentError, match="multiple of 16 bytes"):  # rows of 100 f16: 200 bytes
        tm.describe(KV_BHSD, 0x1000, (2, 3, 100, 100), (30000, 10000, 100, 1))
    with pytest.raises(ValueError, match="rank 1..5"):
        tm.TensorMapSpec(0, "f16", (64, 1, 1, 1, 1, 1), 128)


def test_rank4_and_rank5_emulated_and_cuda_encodings(monkeypatch) -> None:
    m = tm.describe(KV_BSHD, 3 << 40, (2, 100, 3, 128), (38400, 384, 128, 1))
    assert tm.decode_emulated(tm.encode_emulated(m)) == (
        2,
        2,
        128,
        3 << 40,
        (128, 3, 100, 2),
        (2, 256, 768, 76800),
        (64, 1, 128, 1),
    )
    five = tm.TensorMapSpec(0, "bf16", (64, 1, 1, 64, 1), 128)
    m5 = tm.describe(five, 1 << 40, (5, 4, 3, 2, 64), (1536, 384, 128, 64, 1))
    assert len(tm.encode_emulated(m5)) == tm.MAP_BYTES and tm.decode_emulated(tm.encode_emulated(m5))[4] == (
        64,
        2,
        3,
        4,
        5,
    )
    calls = []

    def fake(out, dtype, rank, address, dims, strides, box, estrides, *rest):
        calls.append((rank, list(dims[:rank]), list(strides[: rank - 1]), list(box[:rank])))
        return 0

    monkeypatch.setattr(tm, "_encoder", fake)
    tm.encode_cuda(m)
    assert calls == [(4, [128, 3, 100, 2], [256, 768, 76800], [64, 1, 128, 1])]


def test_tma_box_of_attention_tiles() -> None:
    import wavec as wc
    from wavec.passes.hopper.pipeline_tma import tma_box

    B, KVH, N, D = wc.sym.B, wc.sym.KVH, wc.sym.N, wc.sym.D
    assert tma_box((B, KVH, N, D), {N: 128, D: 128}, 2) == (64, 128, 1, 1)
    assert tma_box((B, N, KVH, D), {N: 64, D: 64}, 2) == (64, 1, 64, 1)
    assert tma_box((N, D), {N: 256, D: 64}, 2) == (64, 256)
