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
from wavec.kernels.fastpath import Decisions, tensor_key
from wavec.knobs import code_key

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
    key = (make.__name__, dtype.name, index_dtype.name, tuple(subs.values()), vec, backend, target, code_key())
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
    key = ("index_select", tensor_key(x), tensor_key(index), backend)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _select_runner("index_select", x, index, backend))
    return run(x, index)


def embedding(ids, weight, *, backend: str | None = None):
    """``torch.nn.functional.embedding(ids, weight)``: rows of ``weight`` [V, D] for ids of any shape."""
    key = ("embedding", tensor_key(weight), tensor_key(ids), backend)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _select_runner("embedding", weight, ids, backend))
    return run(weight, ids)


# (op, tensor keys, backend) -> run(table, index[, src])
_DECIDED = Decisions("indexing")


def _select_runner(op: str, x: Any, index: Any, backend: str | None):
    """Validate a gather and prepare it: ``run(x, index) -> out [*index.shape, D]`` (non-dense operands
    copied)."""
    import torch

    flat = index.reshape(-1) if op == "embedding" else index
    dtype, idx_dtype = _check(op, x, flat, DTYPES, "weight" if op == "embedding" else "x")
    shape, tdtype, device, empty = (*index.shape, x.shape[1]), x.dtype, x.device, torch.empty
    out = empty(shape, dtype=tdtype, device=device)
    if not out.numel():
        return lambda x, index: empty(shape, dtype=tdtype, device=device)
    kernel = _kernel(make_index_select, dtype, idx_dtype, x.shape[1], backend)
    launch = kernel.prepare(x.contiguous(), flat.contiguous(), out.view(-1, x.shape[1]), fresh_outputs=True)
    dense_x, dense_i = x.is_contiguous(), index.is_contiguous()

    def run(x, index):
        out = empty(shape, dtype=tdtype, device=device)
        launch(x if dense_x else x.contiguous(), index if dense_i else index.contiguous(), out)
        return out

    return run


ADD_DTYPES = {"float32": wc.f32, "float16": wc.f16, "bfloat16": wc.bf16}


def index_add_(out, index, src, *, backend: str | None = None):
    """``out.index_add_(0, index, src)`` for 2-D f32, f16 or bf16 ``out`` [T, N] and ``src`` [len(index), N];
    returns ``out``.  Rows with repeated indices accumulate in an unspecified order (rounding may differ)."""
    key = ("index_add_", tensor_key(out), tensor_key(index), tensor_key(src), backend)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _add_runner(out, index, src, backend))
    run(src, index, out)
    return out


def _add_runner(out: Any, index: Any, src: Any, backend: str | None):
    """Validate a scatter-add and prepare it (``out`` in place: checked for overlap on every call)."""
    dtype, idx_dtype = _check("index_add_", out, index, ADD_DTYPES, "out")
    if src.dtype != out.dtype or src.dim() != 2 or tuple(src.shape) != (index.shape[0], out.shape[1]):
        raise wc.WavecError(
            message=f"index_add_: src must be {out.dtype} of shape [{index.shape[0]}, {out.shape[1]}], "
            f"got {src.dtype} {list(src.shape)}"
        )
    if not src.numel():
        return lambda src, index, out: None
    kernel = _kernel(make_index_add, dtype, idx_dtype, out.shape[1], backend, hopper_target(backend))
    return kernel.prepare(src, index, out)
