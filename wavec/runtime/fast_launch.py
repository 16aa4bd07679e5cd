"""Prepared launches: one compiled kernel at one set of argument shapes, validated once, then launched on
every later call with only what changes per call (pointers, scalars, the current stream).

Requires: a loaded :class:`~wavec.runtime.launcher.CudaKernel` and one call's arguments that passed its full
validation (``BindingPlan.bind_launch``).  The caller keys its own dispatch by everything that validation
depended on — each tensor's dtype, shape, strides and device — and passes tensors with those facts again
(the library entry points do: ``docs/performance.md``, "Host path").

Guarantees:

* ``launch(*args)`` (tensors in binding order, then scalars) reads each tensor's ``data_ptr()`` and nothing
  else of it: the grid, the size constants and the function handle are fixed at preparation.  A pointer
  off the kernel's alignment takes the full path (``fallback``: its variant for such addresses), or
  without one raises the :class:`~wavec.errors.ArgumentError` naming the argument; an i32 or
  i64 scalar that is not an int in range or a float scalar (f32, f16, bf16) that is not a number (or, f16 /
  bf16, does not fit) raises one naming it.
* Outputs overlapping another argument are checked per call unless the preparation said the caller
  allocates its outputs fresh on every call (``fresh_outputs=True``).
* One ``kernelParams`` buffer per prepared launch, used by the thread that prepared it; another thread
  packs into a buffer of its own per call (the driver copies the parameters at launch, so a buffer is
  only shared between packing and launching).
* A launch of a narrow or strided variant (``variant`` set by ``CompiledKernel.prepare``) is counted in
  ``wavec.runtime.variant_report()``.
* A kernel with TMA tensor maps gets the maps of each distinct set of pointers (encoded and uploaded on
  first sight, as the full path does); one compiled with ``WAVEC_CHECK_BOUNDS=1`` or whose grid reads a
  scalar is not prepared: :class:`CheckedLaunch` runs the full path on every call instead.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from wavec.abi import HIGH_WORD
from wavec.errors import ArgumentError
from wavec.runtime import trace
from wavec.runtime.binding import FLOAT_SCALAR_NAMES, INT_SCALAR_RANGES, float_constant, low_word
from wavec.runtime.launcher import c_stream
from wavec.runtime.variants import count as count_variant

if TYPE_CHECKING:
    from wavec.runtime.launcher import CudaKernel

__all__ = ["FastLaunch", "CheckedLaunch", "tensor_key"]

_INT32 = range(-(2**31), 2**31)


def tensor_key(t: Any) -> tuple | None:
    """What a prepared launch depends on of a tensor: (dtype, shape, device, True) when it is dense
    row-major, (dtype, shape, device, strides) otherwise; None for None; ``(type,)`` for anything else
    (a key that is never remembered: deciding for it raises the error naming the argument)."""
    if t is None:
        return None
    try:
        return (t.dtype, t.shape, t.device, True if t.is_contiguous() else t.stride())
    except (AttributeError, TypeError):
        return (type(t),)


class CheckedLaunch:
    """The full path behind the prepared-launch interface: every call validated (emulator, bounds checks).
    Arguments are reshaped to the prepared shapes first (a view where the strides allow), as the fast
    path ignores their shapes."""

    __slots__ = ("run", "shapes", "variant")

    def __init__(self, run: Callable[..., Any], shapes: Sequence[Any]) -> None:
        self.run = run
        self.shapes = tuple(shapes)  # None for a scalar
        self.variant: tuple[str, str] | None = None  # (kernel, reason) of a variant's launch: counted

    def __call__(self, *args: Any) -> None:
        fixed = [a if s is None or a.shape == s else a.reshape(s) for a, s in zip(args, self.shapes, strict=True)]
        self.run(*fixed)
        if self.variant is not None:
            count_variant(self.variant)


class FastLaunch:
    """A CUDA launch with everything but pointers and scalars fixed (module docstring)."""

    __slots__ = (
        "kernel", "fn", "device", "grid", "ntensors", "align", "scalar_slots", "high_slots", "buf", "floats",
        "owner", "nbytes", "outputs", "maps", "map_args", "names", "launch_fn", "stream", "block", "shared",
        "success", "c_launch", "fn_ptr", "fallback", "shapes", "variant", "c_ints", "fn_int",
    )  # fmt: skip

    def __init__(
        self, kernel: CudaKernel, fn: Any, device: int, grid: tuple[int, int, int], values: dict[str, int],
        nbytes: tuple[int, ...], fresh_outputs: bool, fallback: Callable[..., None] | None = None,
        shapes: Sequence[Any] = (),
    ) -> None:  # fmt: skip
        from wavec.runtime.launcher import _ArgBuffer

        plan, meta = kernel._plan, kernel.meta
        # Python ints: the ctypes launch passes the sizes without argtypes (``launcher._libcuda_launch``)
        self.kernel, self.fn, self.device = kernel, fn, device
        self.grid = (int(grid[0]), int(grid[1]), int(grid[2]))
        self.ntensors = len(meta.args)
        self.names = tuple(a.name for a in meta.args) + tuple(n for n, _ in meta.scalars)
        self.align = plan.align
        constants = list(meta.constants)
        self.scalar_slots = tuple((constants.index(n), d, n) for n, d in meta.scalars)
        self.high_slots = {n: constants.index(n + HIGH_WORD) for n, d in meta.scalars if d == "i64"}
        self.buf = _ArgBuffer(kernel._nptr, kernel._nconst)
        if constants:
            self.buf.consts[: len(constants)] = [values.get(c, 0) for c in constants]
        self.floats = (ctypes.c_float * max(len(constants), 1)).from_address(ctypes.addressof(self.buf.consts))
        self.owner = threading.get_ident()
        self.outputs = () if fresh_outputs else plan.outputs
        self.nbytes = nbytes
        self.maps = kernel._maps
        self.map_args: dict[tuple[int, ...], int] = {}
        self.launch_fn, self.stream = kernel._drv.cuLaunchKernel, kernel._raw_stream
        self.block, self.shared, self.success = kernel._block, kernel._shared, kernel._success
        self.fallback, self.shapes = fallback, tuple(shapes)
        self.c_launch = kernel._c_launch
        self.fn_ptr = kernel._fn_ptrs.get(device)
        self.c_ints = kernel._c_ints  # the C launcher: pointers as ints
        self.fn_int = self.fn_ptr.value if self.fn_ptr is not None else None
        self.variant: tuple[str, str] | None = None  # (kernel, reason) of a variant's launch: counted

    def __call__(self, *args: Any) -> None:
        n = self.ntensors
        ptrs = [t.data_ptr() for t in args[:n]]
        align = self.align
        if align and any(map(align.__rmod__, ptrs)):
            if self.fallback is None:
                self._misaligned(ptrs)
            # an address off the kernel's alignment: the full path runs the variant that reads it
            fixed = [a if s is None or a.shape == s else a.reshape(s) for a, s in zip(args, self.shapes, strict=True)]
            self.fallback(*fixed)
            return
        self._launch(ptrs, args, n)

    def pointers(self, *args: Any) -> None:
        """The launch with each tensor given by its device address (an int: a part of a larger buffer
        without a view of it), then the scalars.  A kernel with TMA maps needs tensors (``__call__``)."""
        if self.maps is not None:
            raise TypeError(f"{self.kernel.meta.label}: a kernel with TMA tensor maps is launched with tensors")
        n = self.ntensors
        ptrs = list(args[:n])
        align = self.align
        if align and any(map(align.__rmod__, ptrs)):
            self._misaligned(ptrs)
        self._launch(ptrs, args, n)

    def _launch(self, ptrs: list[int], args: Sequence[Any], n: int) -> None:
        if self.outputs:
            self.kernel._plan._check_overlap(ptrs, self.nbytes)
        if self.maps is not None:
            ptrs.append(self._map_address(args, ptrs))
        buf, floats = self.buf, self.floats
        if threading.get_ident() != self.owner:
            buf, floats = self._own_buffer()
        buf.ptrs[: len(ptrs)] = ptrs  # type: ignore[assignment]
        self._pack_scalars(buf, floats, args[n:])
        kernel, device, (gx, gy, gz), (bx, by, bz) = self.kernel, self.device, self.grid, self.block
        if not (gx and gy and gz):
            return
        if trace.ACTIVE is not None:
            trace.note(kernel.artifact, self.shapes[:n], args[n:], args[:n])
        if self.variant is not None:
            count_variant(self.variant)
        if device != kernel._current_device():
            kernel._launch_on_other_device(self.fn, device, self.grid, buf.address)
            return
        c_launch = self.c_launch
        if c_launch is not None:
            if self.c_ints:
                raw = self.stream(device)
                code = c_launch(self.fn_int, gx, gy, gz, bx, by, bz, self.shared, raw, buf.address, None)
            else:
                stream = c_stream(self.stream(device))
                code = c_launch(self.fn_ptr, gx, gy, gz, bx, by, bz, self.shared, stream, buf.c_address, None)
            if code:
                kernel._retry_launch(kernel._drv.CUresult(code), self.fn, device, self.grid, buf.address)
            return
        err = self.launch_fn(self.fn, gx, gy, gz, bx, by, bz, self.shared, self.stream(device), buf.address, 0)[0]
        if err != self.success:
            kernel._retry_launch(err, self.fn, device, self.grid, buf.address)

    def _pack_scalars(self, buf: Any, floats: Any, scalars: Sequence[Any]) -> None:
        """Each scalar into its launch constant(s): an f32 through the buffer's f32 view, an f16 / bf16 as
        its bits in the low half (``binding.float_constant``), an i64 as its low and high words."""
        for (slot, dtype, name), x in zip(self.scalar_slots, scalars, strict=True):
            if dtype in FLOAT_SCALAR_NAMES:
                if isinstance(x, bool) or not isinstance(x, (int, float)):
                    self._bad_scalar(name, x, "a Python number")
                if dtype == "f32":
                    floats[slot] = x
                else:
                    buf.consts[slot] = self._half_bits(name, dtype, x)
            elif dtype == "i64":
                if isinstance(x, bool) or not isinstance(x, int) or x not in INT_SCALAR_RANGES["i64"]:
                    self._bad_scalar(name, x, "a Python int in int64 range")
                buf.consts[slot] = low_word(x)
                buf.consts[self.high_slots[name]] = low_word(x >> 32)
            else:
                if isinstance(x, bool) or not isinstance(x, int) or x not in _INT32:
                    self._bad_scalar(name, x, "a Python int in int32 range")
                buf.consts[slot] = x

    def _map_address(self, args: Sequence[Any], ptrs: list[int]) -> int:
        key = tuple(ptrs)
        hit = self.map_args.get(key)
        if hit is None:
            assert self.maps is not None
            # a caller may pass a tensor of another shape over the same rows (linear's [B, S, K] for the
            # kernel's [M, K]): the map describes the kernel's view of it
            shaped = [a if s is None or a.shape == s else a.reshape(s) for a, s in zip(args, self.shapes)]
            hit = self.maps.address(shaped, ptrs, self.device)
            if len(self.map_args) < 64:
                self.map_args[key] = hit
        return hit

    def _own_buffer(self) -> tuple[Any, Any]:
        """(buffer, its f32 view) for a thread other than the owner: the size constants copied."""
        from wavec.runtime.launcher import _ArgBuffer

        buf = _ArgBuffer(len(self.buf.ptrs), len(self.buf.consts))
        ctypes.memmove(buf.consts, self.buf.consts, ctypes.sizeof(buf.consts))
        return buf, (ctypes.c_float * len(buf.consts)).from_address(ctypes.addressof(buf.consts))

    def _misaligned(self, ptrs: list[int]) -> NoReturn:
        i, ptr = next((i, p) for i, p in enumerate(ptrs) if p % self.align)
        raise ArgumentError(
            kernel=self.kernel.meta.label,
            arg=self.names[i],
            message=f"base pointer 0x{ptr:x} is not aligned to {self.align} bytes; pass a tensor that starts "
            "at an aligned address, e.g. .clone()",
        )

    def _half_bits(self, name: str, dtype: str, x: float) -> int:
        try:
            return float_constant(dtype, float(x))
        except OverflowError:
            raise ArgumentError(
                kernel=self.kernel.meta.label, arg=name, message=f"{x!r} does not fit in {FLOAT_SCALAR_NAMES[dtype]}"
            ) from None

    def _bad_scalar(self, name: str, x: Any, want: str) -> None:
        raise ArgumentError(
            kernel=self.kernel.meta.label, arg=name, message=f"expected {want}, got {type(x).__name__} {x!r}"
        )
