"""Which backend ``wc.compile`` picks, how ``WAVEC_BACKEND`` forces one, and what a GPU backend does on a
machine without a GPU (a clear wavec error, never an AttributeError from a half-loaded launcher)."""

from __future__ import annotations

import types

import pytest
import torch

import wavec as wc
from wavec.errors import LaunchError, UnsupportedBackendError, WavecError
from wavec.kernels.elementwise import DEFAULT_SUBS, make_copy

HAS_GPU = torch.cuda.is_available()
no_gpu_only = pytest.mark.skipif(HAS_GPU, reason="checks what a machine without a GPU does")


@pytest.fixture
def copy_kernel():
    return make_copy(wc.f16)


def tensors() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randn(8, 1024, dtype=torch.float16)
    return src, torch.full_like(src, float("nan"))


@no_gpu_only
def test_default_without_gpu_is_the_emulator(monkeypatch, copy_kernel) -> None:
    monkeypatch.delenv("WAVEC_BACKEND", raising=False)
    k = wc.compile(copy_kernel, DEFAULT_SUBS)
    assert k.backend == "emulator"
    assert k.artifact.target == "sm_90" and k.artifact.format in ("cubin", "ptx")
    src, dst = tensors()
    k(src, dst)
    assert torch.equal(src, dst)
    out = k(src)  # inputs-only convention: output allocated on the CPU
    assert out.device.type == "cpu" and torch.equal(out, src)


@pytest.mark.parametrize("forced", ["emulator", "cuda"])
def test_env_forces_the_backend(monkeypatch, copy_kernel, forced: str) -> None:
    monkeypatch.setenv("WAVEC_BACKEND", forced)
    k = wc.compile(copy_kernel, DEFAULT_SUBS)
    assert k.backend == forced
    if forced == "emulator":
        src, dst = tensors()
        k(src, dst)
        assert torch.equal(src, dst)


def test_explicit_backend_argument_wins_over_env(monkeypatch, copy_kernel) -> None:
    monkeypatch.setenv("WAVEC_BACKEND", "cuda")
    assert wc.compile(copy_kernel, DEFAULT_SUBS, backend="emulator").backend == "emulator"


def test_unknown_env_backend_is_a_wavec_error(monkeypatch, copy_kernel) -> None:
    monkeypatch.setenv("WAVEC_BACKEND", "vulkan")
    with pytest.raises(UnsupportedBackendError, match=r"'vulkan'.*cuda.*rocm.*emulator"):
        wc.compile(copy_kernel, DEFAULT_SUBS)


def test_unknown_backend_argument_is_a_wavec_error(monkeypatch, copy_kernel) -> None:
    monkeypatch.delenv("WAVEC_BACKEND", raising=False)
    with pytest.raises(UnsupportedBackendError, match=r"'vulkan'"):
        wc.compile(copy_kernel, DEFAULT_SUBS, backend="vulkan")


@no_gpu_only
def test_cuda_kernel_without_gpu_raises_launch_error(monkeypatch, copy_kernel) -> None:
    """Whatever this machine lacks (cuda-bindings or a device), both calling conventions raise a
    LaunchError pointing at the emulator, and keep doing so on a second call."""
    monkeypatch.delenv("WAVEC_BACKEND", raising=False)
    k = wc.compile(copy_kernel, DEFAULT_SUBS, backend="cuda")
    assert k.backend == "cuda"
    src, dst = tensors()
    for args in [(src, dst), (src,), (src, dst)]:
        with pytest.raises(LaunchError, match="emulator") as info:
            k(*args)
        assert isinstance(info.value, WavecError) and not isinstance(info.value, AttributeError)


@no_gpu_only
def test_cuda_kernel_with_driver_but_no_device_raises_launch_error(monkeypatch, copy_kernel) -> None:
    """cuda-bindings importable but no device visible to torch: still a LaunchError, not a driver crash."""
    from wavec.runtime import launcher

    monkeypatch.setattr(
        launcher, "_load_driver", lambda kernel: types.SimpleNamespace(CUresult=types.SimpleNamespace(CUDA_SUCCESS=0))
    )
    k = wc.compile(copy_kernel, DEFAULT_SUBS, backend="cuda")
    with pytest.raises(LaunchError, match=r"no CUDA device.*WAVEC_BACKEND=emulator"):
        k(*tensors())


def test_rocm_kernel_cannot_run_here_says_so() -> None:
    k = wc.compile(make_copy(wc.f16, 64), DEFAULT_SUBS, backend="rocm")
    assert k.backend == "rocm" and k.artifact.target == "gfx942" and k.artifact.format == "hsaco"
    with pytest.raises(LaunchError, match="backend='emulator'"):
        k(*tensors())
