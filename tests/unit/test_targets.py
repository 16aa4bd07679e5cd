"""Targets: lookup, fields, and the attribute text against what IREE 3.13 itself prints."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest

from wavec.errors import UnsupportedTargetError
from wavec.target import TARGET_NAMES, Target, get_target

_TINY = """func.func @add(%a: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<64xf32> {
  %c = arith.addf %a, %b : tensor<64xf32>
  return %c : tensor<64xf32>
}
"""


def _iree_printed_target(tmp_path, device: str, flag: str, backend: str) -> str:
    """The ``#hal.executable.target`` IREE attaches when compiling a tiny function with ``flag``."""
    iree_compile = pytest.importorskip("wavec.codegen.iree_compile").iree_compile_path()
    src = tmp_path / "add.mlir"
    src.write_text(_TINY)
    proc = subprocess.run(
        [
            iree_compile,
            str(src),
            f"--iree-hal-target-device={device}",
            flag,
            "--compile-to=executable-sources",
            "-o",
            "-",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    m = re.search(r'(#hal\.executable\.target<"' + backend + r'".*?)\]> : !hal\.device', proc.stdout)
    assert m, proc.stdout[:2000]
    return m.group(1)


@pytest.mark.parametrize("name", ["sm_80", "sm_90", "sm_90a", "gfx942"])
def test_get_target_known(name: str) -> None:
    t = get_target(name)
    assert isinstance(t, Target) and t.name == name and name in TARGET_NAMES
    assert f'arch = "{t.arch}"' in t.attr_text()
    assert t.attr_text().startswith("#hal.executable.target<")


def test_target_fields() -> None:
    sm80, sm90, sm90a, gfx = (get_target(n) for n in ("sm_80", "sm_90", "sm_90a", "gfx942"))
    assert (sm80.arch, sm80.features) == ("sm_80", "+ptx76")
    assert (sm90.arch, sm90.features) == ("sm_90", "+ptx80")
    assert sm90a.arch == "sm_90a" and sm90a.features == "+ptx83"
    for t in (sm80, sm90, sm90a):
        assert t.backend == "cuda" and t.variant_name == "cuda" and t.binary_format == "ptx"
        assert t.threads_per_wave == 32
        assert "NV_MMA_SYNC_F32_16x8x16_F16" in t.mma_intrinsics
        assert "NV_MMA_SYNC_F32_16x8x16_BF16" in t.mma_intrinsics
        assert '"cuda-nvptx-fb"' in t.attr_text()
    assert gfx.backend == "rocm" and gfx.variant_name == "rocm" and gfx.binary_format == "hsaco"
    assert gfx.threads_per_wave == 64 and gfx.max_shared_bytes == 65536
    assert {"MFMA_F32_16x16x16_F16", "MFMA_F32_32x32x8_F16"} <= set(gfx.mma_intrinsics)
    assert sm90.max_shared_bytes > sm80.max_shared_bytes


def test_target_is_frozen_and_slotted() -> None:
    t = get_target("sm_80")
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.arch = "sm_70"  # type: ignore[misc]
    assert not hasattr(t, "__dict__")
    assert hash(t) == hash(get_target("sm_80"))


@pytest.mark.parametrize("bad", ["sm_70", "gfx90a", "", "SM_80", "cuda"])
def test_unknown_target_raises(bad: str) -> None:
    with pytest.raises(UnsupportedTargetError, match="sm_80"):
        get_target(bad)


def test_gfx942_attr_matches_iree(tmp_path) -> None:
    expected = _iree_printed_target(tmp_path, "hip", "--iree-rocm-target=gfx942", "rocm")
    assert get_target("gfx942").attr_text() == expected


def test_sm80_attr_matches_iree(tmp_path) -> None:
    expected = _iree_printed_target(tmp_path, "cuda", "--iree-cuda-target=sm_80", "cuda")
    assert get_target("sm_80").attr_text() == expected
