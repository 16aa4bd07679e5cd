"""Launching a compiled CUDA artifact on PyTorch tensors through ``cuda.bindings.driver``.

Requires: torch with CUDA and ``cuda-bindings``, both imported lazily when a :class:`CudaKernel` is built.

Guarantees:

* Construction loads the cubin/PTX into the primary context of torch's current device (the one torch
  uses), finds the entry function and raises the dynamic shared memory limit above 48 KiB when needed.
  Any failure is a :class:`~wavec.errors.LaunchError` naming the CUresult.
* ``kernel(*tensors)`` validates the tensors (:class:`~wavec.runtime.binding.BindingPlan`), evaluates the
  grid (one with a zero dimension launches nothing) and launches with the ABI of ``docs/toolchain.md``
  (one u64 pointer per binding, then one i32 per launch constant), checking every CUresult.
* It launches on torch's current stream of the tensors' device, read on every launch, so
  ``torch.cuda.stream(s)`` and graph capture work.
* TMA tensor maps are one more pointer after the tensors: a device buffer of this call's maps
  (:class:`~wavec.runtime.tensor_map.TensorMapCache`; new tensors encode and upload first; under graph
  capture the upload is a captured copy from pinned host memory, so a tensor first seen in the capture,
  a workspace the capture allocates, works too).
* A kernel compiled with ``WAVEC_CHECK_BOUNDS=1`` (``meta.bounds_checks``) gets its bounds record last: a
  zeroed device buffer per call, read back after the kernel (this synchronises the stream, so no CUDA
  graph capture) and raised as :class:`~wavec.errors.OutOfBoundsError` (``runtime/bounds.py``).
* ``kernelParams`` memory is preallocated once per kernel and thread (the driver copies it at launch); a
  repeated call with the shapes of the last one rewrites only the pointers (``BindingPlan.bind_launch``
  derives values and grid once per distinct shapes).
"""

from __future__ import annotations

import ctypes
import re
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from wavec.abi import BOUNDS_RECORD_WORDS, SMS_NAME
from wavec.errors import LaunchError
from wavec.runtime import trace
from wavec.runtime.artifact import Artifact
from wavec.runtime.backends import register_backend
from wavec.runtime.binding import BindingPlan
from wavec.runtime.bounds import bounds_error
from wavec.runtime.tensor_map import TensorMapCache, encode_cuda

__all__ = ["CudaKernel", "DEFAULT_SHARED_LIMIT"]

DEFAULT_SHARED_LIMIT = 48 * 1024
_HINTS = {
    "CUDA_ERROR_INVALID_PTX": "the driver could not JIT the PTX (wrong arch or features in the target?)",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the PTX ISA version is newer than this driver supports",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the cubin was built for another GPU architecture",
    "CUDA_ERROR_NOT_FOUND": "the entry function is not in the module",
    "CUDA_ERROR_INVALID_VALUE": "block size, shared memory or grid rejected by the driver",
    "CUDA_ERROR_OUT_OF_RESOURCES": "too many registers or too much shared memory for this block size",
}


def _load_driver(kernel: str) -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise LaunchError(
            kernel=kernel,
            message=f"cannot import cuda.bindings.driver ({exc}); install it with pip install 'cuda-bindings>=12.4' "
            "or use the emulator backend (WAVEC_BACKEND=emulator)",
        ) from None
    return driver


def _libcuda_launch() -> Any:
    """libcuda's ``cuLaunchKernel`` as a ctypes function (``WAVEC_LAUNCH_API=ctypes``, the default), as
    the C extension's call of it (``c``: ``c_launcher``, same arguments), or None (the knob says
    cuda-python, or libcuda cannot be loaded here): cuda.bindings' wrapper converts and checks every
    argument on each call, ctypes passes the eleven values straight through.

    It has no ``argtypes``: converting through them took half of a call's cost (3.8 against 9.6 us on
    the loaded 2-core machine, an empty C function of the same signature), so callers pass the pointers
    as ``ctypes.c_void_p`` (a bare int would go as a 32-bit C int: ``c_pointer``, ``c_stream``) and the
    seven sizes as Python ints below 2**31 (the grid's and the block's limits)."""
    from wavec.knobs import knobs

    if knobs.launch_api == "cuda-python":
        return None
    try:
        lib = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
        fn = lib.cuLaunchKernel
    except (OSError, AttributeError):
        return None
    if knobs.launch_api == "c":  # the same call from a C extension (``c_launcher``): no ctypes layer
        from wavec.runtime.c_launcher import libcuda_launch

        return libcuda_launch(lib)
    fn.restype = ctypes.c_int
    return fn


_C_STREAMS: dict[int, ctypes.c_void_p] = {}


def c_stream(handle: int) -> ctypes.c_void_p:
    """The stream handle ``handle`` as a ``c_void_p`` for the ctypes launch (one object per stream seen)."""
    wrapped = _C_STREAMS.get(handle)
    if wrapped is None:
        if len(_C_STREAMS) >= 1024:  # streams made and dropped by the thousand: start again
            _C_STREAMS.clear()
        wrapped = _C_STREAMS[handle] = ctypes.c_void_p(handle)
    return wrapped


def _error_name(drv: Any, err: Any) -> str:
    name = getattr(err, "name", None)
    if isinstance(name, str):
        return name
    try:
        res, text = drv.cuGetErrorName(err)
        return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # noqa: BLE001 - best effort for an error message
        return str(err)


class _ArgBuffer:
    """Preallocated ``kernelParams`` memory for one kernel in one thread."""

    __slots__ = ("ptrs", "consts", "params", "address", "c_address", "values")

    def __init__(self, nptr: int, nconst: int) -> None:
        self.values: dict[str, int] | None = None  # whose constants ``consts`` holds
        self.ptrs = (ctypes.c_uint64 * max(nptr, 1))()
        self.consts = (ctypes.c_int32 * max(nconst, 1))()
        self.params = (ctypes.c_void_p * max(nptr + nconst, 1))()
        base_p, base_c = ctypes.addressof(self.ptrs), ctypes.addressof(self.consts)
        for i in range(nptr):
            self.params[i] = base_p + 8 * i
        for j in range(nconst):
            self.params[nptr + j] = base_c + 4 * j
        self.address = ctypes.addressof(self.params) if nptr + nconst else 0
        self.c_address = ctypes.c_void_p(self.address or None)  # the same, for the ctypes launch


class CudaKernel:
    """A loaded kernel; call it with the tensors in binding order (outputs included)."""

    _device_type = "cuda"  # the binding plan's device type (tests substitute "cpu" with a fake driver)

    def __init__(self, artifact: Artifact) -> None:
        meta = artifact.metadata
        self.artifact = artifact
        self.meta = meta
        self.kernel = meta.kernel
        if artifact.format not in ("cubin", "ptx"):
            raise LaunchError(
                kernel=self.kernel,
                message=f"artifact format {artifact.format!r} (target {artifact.target}) cannot run on CUDA; "
                "expected 'cubin' or 'ptx'",
            )
        self._drv = _load_driver(self.kernel)
        self._success = self._drv.CUresult.CUDA_SUCCESS
        self._torch = self._load_torch()
        self._plan = BindingPlan(meta, self._device_type)
        self._image = artifact.binary
        if artifact.format == "ptx" and not self._image.endswith(b"\0"):
            self._image += b"\0"
        self._functions: dict[int, Any] = {}
        self._sms: dict[int, int] = {}  # device -> SM count (persistent grids)
        self._contexts: dict[int, Any] = {}
        self._modules: list[tuple[Any, Any]] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._block = tuple(int(b) for b in meta.block)
        self._shared = int(meta.shared_bytes)
        self._constants = meta.constants
        extra = (1 if meta.tensor_maps else 0) + (1 if meta.bounds_checks else 0)
        self._nptr, self._nconst = len(meta.args) + extra, len(meta.constants)
        self._pack_ptrs = struct.Struct(f"<{self._nptr}Q")
        self._maps: TensorMapCache | None = None
        if meta.tensor_maps:
            encode = lambda m: encode_cuda(m, meta.label)
            self._maps = TensorMapCache(meta.tensor_maps, encode, self._upload, meta.label, [a.name for a in meta.args])
        self._check(self._drv.cuInit(0)[0], "cuInit")
        # the ctypes launch only with the real driver (the unit tests' fakes run on CPU tensors)
        self._c_launch = _libcuda_launch() if self._device_type == "cuda" else None
        # the C launcher takes the pointers as ints (a ctypes.c_void_p costs it an attribute lookup each)
        from wavec.knobs import knobs

        self._c_ints = self._c_launch is not None and knobs.launch_api == "c"
        if meta.cluster != (1, 1, 1) and self._device_type == "cuda":  # multicasts need the peer: cuLaunchKernelEx
            from wavec.runtime.cluster_launch import cluster_launcher

            self._c_launch, self._c_ints = cluster_launcher(meta.cluster, meta.label), False
        self._fn_ptrs: dict[int, ctypes.c_void_p] = {}  # device -> the CUfunction, for the ctypes launch
        self._raw_stream = self._stream_getter()
        self._function_for(self._current_device())

    # ----------------------------------------------------------------------------------------- launch

    def __call__(self, *tensors: Any) -> None:
        plan = self._plan
        values, ptrs, device, grid = plan.bind_launch(tensors)
        if grid is None:
            if plan.needs_sms:  # persistent grid: min(tiles, this device's SMs x workgroups per SM)
                values = {**values, SMS_NAME: self._sm_count(device)}
            grid = plan.grid(values)
        gx, gy, gz = grid
        if not (gx and gy and gz):
            return
        if trace.ACTIVE is not None:
            given = tensors[: len(self.meta.args)]
            trace.note(self.artifact, [t.shape for t in given], tensors[len(self.meta.args) :], given)
        if self._maps is not None:
            ptrs.append(self._maps.address(tensors, ptrs, device))
        record = None
        if self.meta.bounds_checks:
            record = self._torch.zeros(BOUNDS_RECORD_WORDS, dtype=self._torch.int64, device=f"cuda:{device}")
            ptrs.append(record.data_ptr())
        self._launch_args(ptrs, values, device, grid)
        if record is not None:
            err = bounds_error(self.meta.bounds_checks, record.tolist())  # waits for the kernel
            if err is not None:
                raise err

    def prepare(
        self, args: Sequence[Any], fresh_outputs: bool = False, fallback: Callable[..., None] | None = None
    ) -> Any:
        """A :class:`~wavec.runtime.fast_launch.FastLaunch` for calls with ``args``' dtypes, shapes,
        strides and device, after validating ``args`` as a call does (errors and ``AlignmentMiss`` alike);
        a kernel with a bounds record or a scalar-dependent grid gets the checked path instead."""
        from wavec.runtime.fast_launch import CheckedLaunch, FastLaunch

        plan = self._plan
        values, _ptrs, device, grid = plan.bind_launch(args)
        scalar_grid = any(re.search(rf"\b{n}\b", g) for n, _ in plan.scalars for g in self.meta.grid)
        if self.meta.bounds_checks or scalar_grid:
            return CheckedLaunch(self, [getattr(a, "shape", None) for a in args])
        if grid is None:
            grid = plan.grid({**values, SMS_NAME: self._sm_count(device)} if plan.needs_sms else values)
        fn = self._functions.get(device) or self._function_for(device)
        nbytes = plan._derived([t.shape for t in args[: len(plan.args)]])[1]
        shapes = [getattr(a, "shape", None) for a in args]
        return FastLaunch(self, fn, device, grid, values, nbytes, fresh_outputs, fallback, shapes)

    def _launch_args(self, ptrs: list[int], values: dict[str, int], device: int, grid: tuple[int, int, int]) -> None:
        gx, gy, gz = grid
        fn = self._functions.get(device)
        if fn is None:
            fn = self._function_for(device)
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = _ArgBuffer(self._nptr, self._nconst)
        self._pack_ptrs.pack_into(buf.ptrs, 0, *ptrs)
        if self._nconst and buf.values is not values:  # one shapes' values dict: its constants are written
            buf.consts[: self._nconst] = [values[c] for c in self._constants]
            buf.values = values
        if device != self._current_device():
            self._launch_on_other_device(fn, device, (gx, gy, gz), buf.address)
            return
        err = self._launch(fn, device, (gx, gy, gz), buf.address)
        if err != self._success:
            self._retry_launch(err, fn, device, (gx, gy, gz), buf.address)

    def _sm_count(self, device: int) -> int:
        n = self._sms.get(device)
        if n is None:
            n = self._sms[device] = int(self._torch.cuda.get_device_properties(device).multi_processor_count)
        return n

    def _launch(self, fn: Any, device: int, grid: tuple[int, int, int], params: int) -> Any:
        bx, by, bz = self._block
        c_launch = self._c_launch
        if c_launch is not None:
            head: tuple[Any, Any, Any]
            if self._c_ints:
                head = (self._fn_ptrs[device].value, self._raw_stream(device), params or None)
            else:
                head = (self._fn_ptrs[device], c_stream(self._raw_stream(device)), ctypes.c_void_p(params or None))
            gx, gy, gz = int(grid[0]), int(grid[1]), int(grid[2])
            err = c_launch(head[0], gx, gy, gz, bx, by, bz, self._shared, head[1], head[2], None)
            return self._success if err == 0 else self._drv.CUresult(err)
        return self._drv.cuLaunchKernel(
            fn, grid[0], grid[1], grid[2], bx, by, bz, self._shared, self._raw_stream(device), params, 0
        )[0]

    def _retry_launch(self, err: Any, fn: Any, device: int, grid: tuple[int, int, int], params: int) -> None:
        # A thread where torch never made a context current: make the device's primary context current
        # and try once more.  Anything else is reported.
        if _error_name(self._drv, err) == "CUDA_ERROR_INVALID_CONTEXT":
            self._check(self._drv.cuCtxSetCurrent(self._contexts[device])[0], "cuCtxSetCurrent")
            err = self._launch(fn, device, grid, params)
        self._check(err, f"cuLaunchKernel(grid={grid}, block={self._block}, shared={self._shared})")

    def _launch_on_other_device(self, fn: Any, device: int, grid: tuple[int, int, int], params: int) -> None:
        with self._torch.cuda.device(device):
            err = self._launch(fn, device, grid, params)
        self._check(err, f"cuLaunchKernel on cuda:{device}(grid={grid}, block={self._block})")

    def _upload(self, raw: bytes, device: int) -> tuple[Any, int]:
        """A device copy of ``raw`` (the encoded tensor maps): (the tensor keeping it alive, its address)."""
        torch = self._torch
        host = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        if torch.cuda.is_current_stream_capturing():
            # A copy captured into a graph reads its host bytes at every replay, and only from pinned
            # memory: the pinned copy lives as long as the device buffer.
            host = host.pin_memory()
            t = host.to(f"cuda:{device}", non_blocking=True)
            return (t, host), t.data_ptr()
        t = host.to(f"cuda:{device}")
        return t, t.data_ptr()

    # ----------------------------------------------------------------------------------------- loading

    def _function_for(self, device: int) -> Any:
        """Load the module into ``device``'s primary context (once) and return the entry function."""
        with self._lock:
            fn = self._functions.get(device)
            if fn is not None:
                return fn
            drv = self._drv
            dev = self._check_get(drv.cuDeviceGet(device), f"cuDeviceGet({device})")
            ctx = self._check_get(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            self._check(drv.cuCtxPushCurrent(ctx)[0], "cuCtxPushCurrent")
            try:
                what = f"cuModuleLoadData({self.artifact.format}, target {self.artifact.target})"
                module = self._check_get(drv.cuModuleLoadData(self._image), what)
                self._modules.append((ctx, module))
                fn = self._check_get(
                    drv.cuModuleGetFunction(module, self.meta.entry.encode()),
                    f"cuModuleGetFunction({self.meta.entry!r})",
                )
                if self._shared > DEFAULT_SHARED_LIMIT:
                    attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                    self._check(
                        drv.cuFuncSetAttribute(fn, attr, self._shared)[0],
                        f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={self._shared})",
                    )
            finally:
                drv.cuCtxPopCurrent()
            self._contexts[device] = ctx
            if self._c_launch is not None:
                self._fn_ptrs[device] = ctypes.c_void_p(int(fn))
            self._functions[device] = fn
            return fn

    def close(self) -> None:
        """Unload the modules (optional; modules otherwise live as long as the process)."""
        with self._lock:
            for ctx, module in self._modules:
                self._drv.cuCtxPushCurrent(ctx)
                self._drv.cuModuleUnload(module)
                self._drv.cuCtxPopCurrent()
            for device in self._contexts:
                self._drv.cuDevicePrimaryCtxRelease(self._drv.cuDeviceGet(device)[1])
            self._modules.clear()
            self._functions.clear()
            self._contexts.clear()

    # ----------------------------------------------------------------------------------------- torch

    def _load_torch(self) -> Any:
        import torch

        if not torch.cuda.is_available():
            raise LaunchError(
                kernel=self.kernel,
                message="torch sees no CUDA device (torch.cuda.is_available() is False); use the emulator backend "
                "(WAVEC_BACKEND=emulator) on machines without a GPU",
            )
        torch.cuda.init()
        # torch._C._cuda_getDevice skips current_device()'s lazy-init check; same value.
        self._get_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
        return torch

    def _current_device(self) -> int:
        return self._get_device()

    def _stream_getter(self) -> Callable[[int], int]:
        raw = getattr(self._torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw
        current_stream = self._torch.cuda.current_stream
        return lambda device: current_stream(device).cuda_stream

    # ----------------------------------------------------------------------------------------- errors

    def _check(self, err: Any, what: str) -> None:
        if err != self._success:
            name = _error_name(self._drv, err)
            hint = _HINTS.get(name)
            hint = f" ({hint})" if hint else ""
            raise LaunchError(
                kernel=self.kernel, message=f"{what} returned {name}{hint}; kernel defined at {self.meta.source}"
            )

    def _check_get(self, result: tuple, what: str) -> Any:
        self._check(result[0], what)
        return result[1]


register_backend("cuda", CudaKernel)
