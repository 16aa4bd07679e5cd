"""Row gathers and scatters through an index tensor (DESIGN §12): ``index_select`` / ``embedding`` and
``index_add_`` along dim 0 of a 2-D tensor.

One wave per output row and 16-byte runs along it, like the copy kernel; each lane reads the row index
it needs once (the index value takes the layout of the row it replaces).  ``index_add_`` adds with
``wc.scatter_add`` (f32, f16, bf16 atomics: ``red.global.add``, vectorised on Hopper, where it compiles for
sm_90a), so repeated indices accumulate.  Indices are bounds-checked on the GPU only with
``WAVEC_CHECK_BOUNDS=1`` (the emulator checks every access and names the kernel line, lane and index).
"""

from __future__ import annotations

from typing import Any

import wavec as wc
from wavec import Memory
from wavec.kernels.elementwise import M, N, rowwise_config, rowwise_constraints

T = wc.sym.T
DTYPES = {"float16": wc.f16, "bfloat16": wc.bf16, "float32": wc.f32, "int32": wc.i32}
INDEX_DTYPES = {"int32": wc.i32, "int64": wc.i64}


def make_index_select(dtype=wc.f16, index_dtype=wc.i32, vec: int | None = None) -> wc.WaveKernel:
    """``out[m, :] = x[index[m], :]``."""

    @wc.wave(rowwise_constraints(32, vec or 16 // dtype.bytes))
    def index_select(x: Memory[T, N, dtype], index: Memory[M, index_dtype], out: Memory[M, N, dtype]):
        wc.write(wc.read(x, mapping={T: wc.read(index)}), out)

    return index_select


def make_index_add(dtype=wc.f32, index_dtype=wc.i32, vec: int | None = None) -> wc.WaveKernel:
    """``out[index[m], :] += src[m, :]`` atomically (repeated indices accumulate)."""

    @wc.wave(rowwise_constraints(32, vec or 16 // dtype.bytes))
    def index_add(src: Memory[M, N, dtype], index: Memory[M, index_dtype], out: Memory[T, N, dtype]):
        wc.scatter_add(wc.read(src), out, mapping={T: wc.read(index)})

    return index_add


_COMPILED: dict = {}


def hopper_target(backend: str | None, device: Any = None) -> str | None:
    """sm_90a on a Hopper GPU (its PTX 8.3 has the vector ``red`` that sm_90's 8.0 lacks), else the default;
    ``device``: the tensors' device (default: the current CUDA device; a CPU device gets the default)."""
    from wavec.compiler import default_backend, gpu_visible

    if (backend or default_backend()) != "cuda" or not gpu_visible() or getattr(device, "type", "cuda") != "cuda":
        return None
    import torch

    return "sm_90a" if torch.cuda.get_device_capability(device) == (9, 0) else None


def _kernel(make, dtype, index_dtype, n: int, backend: str | None, target: str | None = None):
    subs, vec = rowwise_config(dtype, n)
    key = (make.__name__, dtype.name, index_dtype.name, tuple(subs.values()), vec, backend, target)
    if key not in _COMPILED:
        _COMPILED[key] = wc.compile(make(dtype, index_dtype, vec), subs, backend=backend, target=target)
    return _COMPILED[key]


def _check(op: str, table: Any, index: Any, allowed: dict, table_name: str) -> tuple:
    """(wavec dtype, index dtype) of a gather/scatter's arguments, or a ``WavecError`` naming the argument."""
    name = str(table.dtype).removeprefix("torch.")
    if table.dim() != 2 or name not in allowed:
        raise wc.WavecError(
            message=f"{op}: {table_name} must be a 2-D tensor of {sorted(allowed)}, got {table.dim()}-D {name}"
        )
    iname = str(index.dtype).removeprefix("torch.")
    if index.dim() != 1 or iname not in INDEX_DTYPES:
        raise wc.WavecError(message=f"{op}: index must be a 1-D int32 or int64 tensor, got {index.dim()}-D {iname}")
    if index.device != table.device:
        raise wc.WavecError(message=f"{op}: index is on {index.device} but {table_name} is on {table.device}")
    return allowed[name], INDEX_DTYPES[iname]


def index_select(x, index, *, backend: str | None = None):
    """``torch.index_select(x, 0, index)`` for a 2-D ``x`` (f16, bf16, f32, i32) and a 1-D int32/int64
    ``index``: a new tensor [len(index), x.shape[1]]."""
    import torch

    dtype, idx_dtype = _check("index_select", x, index, DTYPES, "x")
    out = torch.empty(index.shape[0], x.shape[1], device=x.device, dtype=x.dtype)
    if out.numel():
        _kernel(make_index_select, dtype, idx_dtype, x.shape[1], backend)(x, index, out)
    return out


def embedding(ids, weight, *, backend: str | None = None):
    """``torch.nn.functional.embedding(ids, weight)``: rows of ``weight`` [V, D] for ids of any shape."""
    flat = ids.reshape(-1)
    return index_select(weight, flat, backend=backend).reshape(*ids.shape, weight.shape[1])


ADD_DTYPES = {"float32": wc.f32, "float16": wc.f16, "bfloat16": wc.bf16}


def index_add_(out, index, src, *, backend: str | None = None):
    """``out.index_add_(0, index, src)`` for 2-D f32, f16 or bf16 ``out`` [T, N] and ``src`` [len(index), N];
    returns ``out``.  Rows with repeated indices accumulate in an unspecified order (rounding may differ)."""
    dtype, idx_dtype = _check("index_add_", out, index, ADD_DTYPES, "out")
    if src.dtype != out.dtype or src.dim() != 2 or tuple(src.shape) != (index.shape[0], out.shape[1]):
        raise wc.WavecError(
            message=f"index_add_: src must be {out.dtype} of shape [{index.shape[0]}, {out.shape[1]}], "
            f"got {src.dtype} {list(src.shape)}"
        )
    if src.numel():
        _kernel(make_index_add, dtype, idx_dtype, out.shape[1], backend, hopper_target(backend))(src, index, out)
    return out
