"""A CUDA driver that runs nothing: the launcher's host side on CPU tensors, for the unit tests and for
``benchmarks/host_latency.py --null-driver`` (wavec's Python share of a call, on any machine).

Requires: torch (CPU tensors); nothing of CUDA.

Guarantees:

* :func:`driver` stands in for ``cuda.bindings.driver`` with every call the launcher makes (init, devices,
  primary contexts, module loading, function attributes, launch), each answering success.  With a
  ``record`` list it appends ``("load", image)``, ``("func", name)``, ``("attr", attribute, value)`` and per
  launch ``("launch", grid, block, shared, stream, ptrs, consts)``: the kernel parameters read back as the
  driver reads them (``nptr`` pointers, then ``nconst`` int32 values: ``params``, else the counts a
  ``NullKernel`` gives the driver it loaded).
* :class:`NullKernel` is a ``CudaKernel`` whose tensors are CPU tensors (binding device "cpu", current
  device -1, stream ``null_stream``); it never takes libcuda's ctypes launch.
* :func:`install` makes the "cuda" backend run ``NullKernel`` on this driver (kernels compiled as for a
  GPU) and returns the function that undoes it.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Callable
from typing import Any

from . import backends, launcher

__all__ = ["driver", "NullKernel", "install", "launches"]


class Result(int):
    """A ``CUresult`` member: an int with a ``name``."""

    name: str

    def __new__(cls, value: int, name: str) -> Result:
        obj = super().__new__(cls, value)
        obj.name = name
        return obj


OK = Result(0, "CUDA_SUCCESS")


def driver(record: list | None = None, params: tuple[int, int] | None = None) -> Any:
    """The null driver (module docstring); ``params`` = (pointers, int32 constants) of every launch, else
    the counts a ``NullKernel`` sets on the driver it loaded."""
    note: Callable[[tuple], None] = record.append if record is not None else _ignore

    def load(image: bytes) -> tuple:
        note(("load", bytes(image)))
        return OK, "module"

    def function(module: Any, name: bytes) -> tuple:
        note(("func", name))
        return OK, "function"

    def attribute(fn: Any, attr: int, value: int) -> tuple:
        note(("attr", attr, value))
        return (OK,)

    def launch(f: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int, stream: Any, address: int,
               extra: Any) -> tuple:  # fmt: skip
        if record is not None:
            nptr, nconst = drv.counts
            arr = (ctypes.c_void_p * max(nptr + nconst, 1)).from_address(address)
            ptrs = [ctypes.c_uint64.from_address(arr[i] or 0).value for i in range(nptr)]
            consts = [ctypes.c_int32.from_address(arr[nptr + j] or 0).value for j in range(nconst)]
            record.append(("launch", (gx, gy, gz), (bx, by, bz), smem, stream, ptrs, consts))
        return (OK,)

    drv = types.SimpleNamespace(
        CUresult=types.SimpleNamespace(CUDA_SUCCESS=OK),
        CUfunction_attribute=types.SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8),
        counts=params or (0, 0),
        cuInit=lambda flags: (OK,),
        cuDeviceGet=lambda i: (OK, f"dev{i}"),
        cuDevicePrimaryCtxRetain=lambda d: (OK, f"ctx-{d}"),
        cuCtxPushCurrent=lambda c: (OK,),
        cuCtxPopCurrent=lambda: (OK, None),
        cuCtxSetCurrent=lambda c: (OK,),
        cuModuleLoadData=load,
        cuModuleGetFunction=function,
        cuFuncSetAttribute=attribute,
        cuLaunchKernel=launch if record is not None else (lambda *args: (OK,)),
    )
    return drv


def _ignore(entry: tuple) -> None:
    return None


def launches(record: list) -> list[tuple]:
    """The launches of ``record`` as (grid, ptrs, consts)."""
    return [(e[1], e[5], e[6]) for e in record if e[0] == "launch"]


class NullKernel(launcher.CudaKernel):
    """A ``CudaKernel`` on CPU tensors through whatever driver ``launcher._load_driver`` gives (module
    docstring)."""

    _device_type = "cpu"
    null_stream = 0

    def _load_torch(self) -> Any:
        import torch

        return torch

    def _current_device(self) -> int:
        return -1

    def _stream_getter(self) -> Callable[[int], int]:
        stream = self.null_stream
        return lambda device: stream

    def __init__(self, artifact: Any) -> None:
        super().__init__(artifact)
        self._drv.counts = (self._nptr, self._nconst)  # each kernel loads its own null driver


def install(record: list | None = None) -> Callable[[], None]:
    """Run the "cuda" backend's kernels as :class:`NullKernel` on :func:`driver` (``record`` as there);
    returns the undo."""
    saved_load, saved_factory = launcher._load_driver, backends.launcher_factory("cuda")
    launcher._load_driver = lambda kernel: driver(record)
    backends.register_backend("cuda", NullKernel)

    def undo() -> None:
        launcher._load_driver = saved_load
        if saved_factory is not None:
            backends.register_backend("cuda", saved_factory)

    return undo
