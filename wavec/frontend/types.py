"""``Memory[dims..., dtype]`` and ``Register[dims..., dtype]``: the symbolic tensor types of the DSL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sympy

from ..errors import AnnotationError
from .dtypes import DType

if TYPE_CHECKING:
    from .tracing import Value


class AddressSpace:
    GLOBAL = "global"
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class TensorType:
    """A symbolic shape (sympy symbols, or 1 for a broadcast dim) and an element type."""

    shape: tuple
    dtype: DType
    address_space: str | None = None  # None for registers

    @property
    def dims(self) -> tuple[sympy.Symbol, ...]:
        return tuple(d for d in self.shape if d != 1)

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        where = f" {self.address_space}" if self.address_space else ""
        return f"[{dims}] {self.dtype}{where}"


def _error(kind: str, message: str) -> AnnotationError:
    from .tracing import current_loc  # tracing imports this module

    return AnnotationError(current_loc(), kind=kind, message=message)


def _parse(cls_name: str, params: Any) -> tuple[tuple, DType, str | None]:
    params = params if isinstance(params, tuple) else (params,)
    space = None
    if params and isinstance(params[-1], str):
        space, params = params[-1], params[:-1]
        if space not in (AddressSpace.GLOBAL, AddressSpace.SHARED):
            raise _error(cls_name, f"address space must be 'global' or 'shared', not {space!r}")
    if not params or not isinstance(params[-1], DType):
        raise _error(cls_name, f"the last parameter must be a wavec dtype ({cls_name}[dims..., dtype]), got {params!r}")
    dims, dtype = params[:-1], params[-1]
    for d in dims:
        if not isinstance(d, sympy.Symbol):
            raise _error(cls_name, f"dimensions must be wc.sym symbols, got {d!r}")
    if len(set(dims)) != len(dims):
        raise _error(cls_name, f"a dimension symbol appears twice in ({', '.join(map(str, dims))})")
    return tuple(dims), dtype, space


# Metaclass ``__getitem__``s, not ``__class_getitem__``: type checkers read their signatures, so the
# expression ``Register[M, N, f32](0.0)`` is a Value to them; annotations need ``wavec.mypy_plugin``.


class _MemoryMeta(type):
    def __getitem__(cls, params: Any) -> TensorType:
        dims, dtype, space = _parse("Memory", params)
        return TensorType(dims, dtype, space or AddressSpace.GLOBAL)


class Memory(metaclass=_MemoryMeta):
    """Annotation of a kernel argument in device memory: ``Memory[M, K, f16]`` or ``[..., "shared"]``."""


class _RegisterType:
    def __init__(self, ttype: TensorType) -> None:
        self.type = ttype

    def __call__(self, init: float | int) -> Value:
        from .ops import register

        return register(self.type.shape, self.type.dtype, init)

    def __repr__(self) -> str:
        return f"Register{self.type}"


class _RegisterMeta(type):
    def __getitem__(cls, params: Any) -> _RegisterType:
        dims, dtype, space = _parse("Register", params)
        if space is not None:
            raise _error("Register", "takes no address space")
        return _RegisterType(TensorType(dims, dtype))


class Register(metaclass=_RegisterMeta):
    """A per-wave register tile: ``Register[M, N, f32](0.0)`` creates one filled with a constant."""


# 32-bit launch constants (toolchain.md's kernel ABI): an f32 as its bits, an f16 / bf16 as its bits in
# the low half, an i64 as two (low word, high word)
SCALAR_DTYPES = ("f32", "i32", "f16", "bf16", "i64")


@dataclass(frozen=True, slots=True)
class ScalarType:
    """A scalar kernel argument passed by value at launch (``wc.Scalar[f32]``; the dtypes: ``SCALAR_DTYPES``)."""

    dtype: DType

    def __str__(self) -> str:
        return f"scalar {self.dtype}"


class _ScalarMeta(type):
    def __getitem__(cls, dtype: Any) -> ScalarType:
        if not isinstance(dtype, DType) or dtype.name not in SCALAR_DTYPES:
            raise _error("Scalar", f"dtype must be wc.f32, wc.i32, wc.i64, wc.f16 or wc.bf16, got {dtype!r}")
        return ScalarType(dtype)


class Scalar(metaclass=_ScalarMeta):
    """Annotation of a by-value kernel argument: ``scale: wc.Scalar[f32]`` (f32, i32, i64, f16 or bf16).

    A scalar may stand anywhere in the signature.  Inside the kernel it is a rank-0 register value usable
    in arithmetic; its value is not part of the compiled binary (one binary serves every value)."""
