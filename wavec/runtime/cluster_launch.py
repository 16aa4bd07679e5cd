"""Thread-block cluster launches: libcuda's ``cuLaunchKernelEx`` with ``CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION``,
behind a function of ``cuLaunchKernel``'s eleven arguments, so the launcher's ctypes paths (``CudaKernel._launch``,
``FastLaunch``) call it unchanged.  A kernel whose metadata has ``cluster`` != (1, 1, 1) (a 2-workgroup TMA
multicast GEMM, ``passes/hopper/cluster_launch.py``) must be launched this way: its multicasts and remote
mbarrier arrivals address the peer workgroup of its cluster, which a plain launch does not have.

The structs follow ``cuda.h`` (CUDA 12): ``CUlaunchAttribute`` is an enum id padded to 8 bytes and a
64-byte value union (``clusterDim`` = three unsigned ints at its start); ``CUlaunchConfig`` holds the grid,
the block, the dynamic shared memory, the stream, the attribute array and its length.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import Any

from wavec.errors import LaunchError

CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class _ClusterDim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class _AttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("clusterDim", _ClusterDim)]


class _Attribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttributeValue)]


class _Config(ctypes.Structure):
    _fields_ = [
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_Attribute)),
        ("numAttrs", ctypes.c_uint),
    ]


def cluster_launcher(cluster: tuple[int, int, int], kernel: str) -> Callable[..., int]:
    """``launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> CUresult`` (``extra`` must be
    None) launching clusters of ``cluster`` workgroups; a ``LaunchError`` where libcuda cannot be loaded."""
    try:
        ex = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1").cuLaunchKernelEx
    except (OSError, AttributeError) as exc:
        raise LaunchError(
            kernel=kernel, message=f"a cluster launch needs libcuda's cuLaunchKernelEx (CUDA 12+): {exc}"
        ) from None
    ex.restype = ctypes.c_int
    ex.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    attr = _Attribute(id=CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    attr.value.clusterDim = _ClusterDim(*cluster)
    attrs = ctypes.pointer(attr)  # shared by every launch: the driver only reads it

    def launch(fn: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int, stream: Any,
               params: Any, extra: Any) -> int:  # fmt: skip
        # a config per call: launches from several threads never share one
        hstream = stream.value if isinstance(stream, ctypes.c_void_p) else stream
        config = _Config(gx, gy, gz, bx, by, bz, shared, hstream, attrs, 1)
        return int(ex(ctypes.byref(config), fn, params, None))

    return launch
