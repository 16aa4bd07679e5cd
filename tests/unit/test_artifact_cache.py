"""Artifact container, cache keys and the disk cache (no GPU needed)."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import multiprocessing
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from wavec.errors import CacheError
from wavec.runtime.artifact import FORMAT_VERSION, MAGIC, ArgSpec, Artifact, KernelMetadata
from wavec.runtime.cache import DiskCache, cache_key, canonical


def make_meta(**over) -> KernelMetadata:
    fields = dict(
        kernel="gemm",
        entry="gemm_entry",
        block=(256, 1, 1),
        shared_bytes=65536,
        args=(
            ArgSpec("a", "f16", ("M", "K"), False),
            ArgSpec("b", "f16", ("N", "K"), False),
            ArgSpec("c", "f32", ("M", "N"), True),
        ),
        constants=("M", "N"),
        static_symbols=(("K", 64),),
        grid=("(M + 127) // 128", "(N + 127) // 128", "1"),
        divisibility=(("M", 128), ("N", 128)),
        alignment_bytes=16,
        source="kernels/gemm.py:12",
        registers=128,
        spills=0,
    )
    fields.update(over)
    return KernelMetadata(**fields)


def make_artifact(mlir: str = "module {}\n", binary: bytes = b"\x7fELF\x00\x01binary\xff") -> Artifact:
    return Artifact(target="sm_90", format="cubin", binary=binary, metadata=make_meta(), mlir=mlir)


# ------------------------------------------------------------------------------------------- artifact


def test_round_trip() -> None:
    art = make_artifact(mlir="hal.executable @k { // ünïcode\n}")
    blob = art.to_bytes()
    assert blob.startswith(MAGIC)
    back = Artifact.from_bytes(blob)
    assert back == art
    assert isinstance(back.metadata.block, tuple) and isinstance(back.metadata.args[0].shape, tuple)
    assert hash(back) == hash(art)


def test_round_trip_optional_fields_none() -> None:
    art = dataclasses.replace(make_artifact(), metadata=make_meta(registers=None, spills=None, constants=()))
    assert Artifact.from_bytes(art.to_bytes()) == art


@pytest.mark.parametrize("cut", [0, 1, 7, 20, 31, 60, -33, -1])
def test_truncated_blob_raises(cut: int) -> None:
    blob = make_artifact().to_bytes()
    with pytest.raises(CacheError):
        Artifact.from_bytes(blob[:cut])


def test_every_flipped_byte_is_detected() -> None:
    blob = bytearray(make_artifact().to_bytes())
    for pos in range(0, len(blob), 7):
        bad = bytearray(blob)
        bad[pos] ^= 0x40
        with pytest.raises(CacheError):
            Artifact.from_bytes(bytes(bad))


def _with_digest(body: bytes) -> bytes:
    return body + hashlib.sha256(body).digest()


def test_other_version_rejected() -> None:
    blob = make_artifact().to_bytes()[:-32]
    body = blob[:8] + struct.pack("<I", FORMAT_VERSION + 1) + blob[12:]
    with pytest.raises(CacheError, match="version"):
        Artifact.from_bytes(_with_digest(body))


@pytest.mark.parametrize(
    "header", [b"not json", b'{"target": "sm_90"}', b'{"target": 1, "format": "cubin"}', b"[1, 2]"]
)
def test_malformed_header_with_valid_digest_rejected(header: bytes) -> None:
    body = struct.pack("<8sIIQQ", MAGIC, FORMAT_VERSION, len(header), 0, 0) + header
    with pytest.raises(CacheError):
        Artifact.from_bytes(_with_digest(body))


def test_bad_metadata_types_rejected() -> None:
    art = make_artifact()
    meta = art.metadata.to_json()
    meta["block"] = [256, "1", 1]
    import json

    header = json.dumps({"target": "sm_90", "format": "cubin", "metadata": meta}).encode()
    body = struct.pack("<8sIIQQ", MAGIC, FORMAT_VERSION, len(header), 0, 0) + header
    with pytest.raises(CacheError, match="block"):
        Artifact.from_bytes(_with_digest(body))


# ------------------------------------------------------------------------------------------- keys


class Mode(enum.Enum):
    FAST = 1
    SAFE = 2


@dataclasses.dataclass(frozen=True)
class Opts:
    tile: tuple[int, int]
    mode: Mode = Mode.FAST


BASE = dict(
    kernel_source="trace v1",
    options={"opt": 3, "tiles": [64, 32], "cfg": Opts((1, 2))},
    target="sm_90",
    versions={"wavec": "0.1.0", "iree": "3.13.0"},
)


def key(**over) -> str:
    args = dict(BASE)
    args.update(over)
    return cache_key(**args)


@pytest.mark.parametrize(
    "change",
    [
        dict(kernel_source="trace v2"),
        dict(target="sm_80"),
        dict(versions={"wavec": "0.1.1", "iree": "3.13.0"}),
        dict(versions={"wavec": "0.1.0", "iree": "3.14.0"}),
        dict(versions={"wavec": "0.1.0"}),
        dict(options={"opt": 2, "tiles": [64, 32], "cfg": Opts((1, 2))}),
        dict(options={"opt": 3, "tiles": [32, 64], "cfg": Opts((1, 2))}),
        dict(options={"opt": 3, "tiles": (64, 32), "cfg": Opts((1, 2))}),
        dict(options={"opt": 3, "tiles": [64, 32], "cfg": Opts((1, 3))}),
        dict(options={"opt": 3, "tiles": [64, 32], "cfg": Opts((1, 2), Mode.SAFE)}),
        dict(options={"opt": 3, "tiles": [64, 32], "cfg": Opts((1, 2)), "extra": None}),
        dict(options={"opt": "3", "tiles": [64, 32], "cfg": Opts((1, 2))}),
        dict(options={"opt": 3.0, "tiles": [64, 32], "cfg": Opts((1, 2))}),
        dict(options={"opt": True, "tiles": [64, 32], "cfg": Opts((1, 2))}),
    ],
)
def test_key_changes_with_every_input(change: dict) -> None:
    assert key(**change) != key()


def test_key_is_stable_and_order_independent() -> None:
    k1 = key()
    reordered = {"cfg": Opts((1, 2)), "tiles": [64, 32], "opt": 3}
    assert key(options=reordered) == k1
    assert len(k1) == 64 and int(k1, 16) >= 0


def test_key_in_fresh_process_is_identical() -> None:
    code = (
        "from wavec.runtime.cache import cache_key;"
        "print(cache_key(kernel_source='s', options={'b': [1, (2, b'x')], 'a': {3: None}}, "
        "target='sm_90', versions={'wavec': '0'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    options = {"a": {3: None}, "b": [1, (2, b"x")]}
    expected = cache_key(kernel_source="s", options=options, target="sm_90", versions={"wavec": "0"})
    assert out.stdout.strip() == expected


def test_sympy_and_paths_and_sets() -> None:
    import sympy

    m = sympy.Symbol("M")
    assert canonical(m + 1) == canonical(sympy.Symbol("M") + 1)
    assert canonical(m + 1) != canonical(m + 2)
    assert canonical(Path("/a/b")) != canonical("/a/b")
    assert canonical({3, 1, 2}) == canonical({1, 2, 3})


def test_unknown_option_type_raises() -> None:
    class Opaque:
        pass

    with pytest.raises(CacheError, match=r"\['options'\]\['x'\]\[1\]"):
        cache_key(kernel_source="s", options={"x": [1, Opaque()]}, target="t", versions={})
    with pytest.raises(CacheError):
        canonical(lambda: 1)


# ------------------------------------------------------------------------------------------- disk cache

KEY = "ab" + "0" * 62


def test_put_get_round_trip(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path)
    assert cache.get(KEY) is None
    art = make_artifact()
    cache.put(KEY, art)
    assert cache.get(KEY) is art  # memory hit
    cache.clear_memory()
    assert cache.get(KEY) == art  # disk hit
    assert cache.path_for(KEY).exists()
    assert not [p for p in cache.path_for(KEY).parent.iterdir() if p.name.endswith(".tmp")]
    assert DiskCache(tmp_path).get(KEY) == art  # another instance / process


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_corrupt_entry_is_removed_and_recompiled(tmp_path: Path, damage: str) -> None:
    cache = DiskCache(tmp_path)
    cache.put(KEY, make_artifact())
    path = cache.path_for(KEY)
    blob = path.read_bytes()
    damaged = {
        "truncate": blob[: len(blob) // 2],
        "flip": blob[:40] + bytes([blob[40] ^ 1]) + blob[41:],
        "empty": b"",
        "garbage": b"hello",
    }[damage]
    path.write_bytes(damaged)
    fresh = DiskCache(tmp_path)
    with pytest.warns(UserWarning, match="corrupt"):
        assert fresh.get(KEY) is None
    assert not path.exists()
    fresh.put(KEY, make_artifact())
    fresh.clear_memory()
    assert fresh.get(KEY) == make_artifact()


def test_cache_disable_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAVEC_CACHE_DISABLE", "1")
    cache = DiskCache(tmp_path)
    cache.put(KEY, make_artifact())
    assert not cache.path_for(KEY).exists()
    assert cache.get(KEY) is not None  # the in-memory layer still works
    monkeypatch.delenv("WAVEC_CACHE_DISABLE")
    DiskCache(tmp_path).put(KEY, make_artifact())
    monkeypatch.setenv("WAVEC_CACHE_DISABLE", "1")
    assert DiskCache(tmp_path).get(KEY) is None  # disk not read when disabled


def test_default_cache_follows_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wavec.runtime.cache import default_cache

    monkeypatch.setenv("WAVEC_CACHE_DIR", str(tmp_path / "c1"))
    c1 = default_cache()
    assert c1.root == tmp_path / "c1" and default_cache() is c1
    monkeypatch.setenv("WAVEC_CACHE_DIR", str(tmp_path / "c2"))
    assert default_cache().root == tmp_path / "c2"


def test_unwritable_cache_warns(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = DiskCache(blocker)  # root is a file: mkdir fails
    with pytest.warns(UserWarning, match="cannot write"):
        cache.put(KEY, make_artifact())
    assert cache.get(KEY) is not None


def test_lru_evicts(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, memory_entries=2)
    keys = [f"{i:02x}" + "1" * 62 for i in range(3)]
    for k in keys:
        cache.put(k, make_artifact())
    assert len(cache.memory) == 2


def test_invalid_key_rejected(tmp_path: Path) -> None:
    with pytest.raises(CacheError):
        DiskCache(tmp_path).get("../../etc/passwd")


def _writer(root: str, key: str, index: int, rounds: int) -> None:
    cache = DiskCache(root)
    art = make_artifact(mlir=f"writer {index}\n" + "x" * 100_000, binary=bytes([index]) * 50_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a corrupt read would warn: fail the process
        for _ in range(rounds):
            cache.put(key, art)
            cache.clear_memory()
            got = cache.get(key)
            assert got is not None and got.mlir.startswith("writer ")
            assert got.binary == bytes([int(got.mlir.split()[1])]) * 50_000


def test_concurrent_writers_never_expose_partial_entries(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), KEY, i, 25)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    final = DiskCache(tmp_path).get(KEY)
    assert final is not None and final.mlir.startswith("writer ")
    entry_dir = DiskCache(tmp_path).path_for(KEY).parent
    assert [p.name for p in entry_dir.iterdir() if p.name.endswith(".tmp")] == []


def test_runtime_import_is_light() -> None:
    code = (
        "import sys, wavec.runtime.cache, wavec.runtime.artifact, wavec.runtime.binding, "
        "wavec.runtime.launcher; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('iree', 'cuda', 'mlir')]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
