"""The MoE building block (DESIGN §12, §14): a GEMM over gathered token rows whose output rows are weighted
and scattered back with atomic adds, ``out[t(m)] += weights[m] * (x[t(m)] @ w.T)`` with
``t(m) = ids[m] // top_k``.

``ids`` are (token, slot) pairs ``token * top_k + slot`` sorted by expert, as ``moe_align_block_size``
lays them out for one expert; several slots of one token add into one output row, so ``out`` (f32) is
combined with ``wc.atomic_add`` (relaxed ``red.global.add`` on NVIDIA, vector ``.v2.f32`` on sm_90a).  A
rows are gathered into shared memory with 16-byte ``cp.async`` copies and pipelined like the dense GEMM's.
"""

from __future__ import annotations

from typing import Any

import wavec as wc
from wavec import Memory, Register, f32
from wavec.kernels.gemm import BLOCK_K, BLOCK_M, BLOCK_N, NUM_STAGES, K, M, N, gemm_constraints
from wavec.kernels.indexing import hopper_target
from wavec.knobs import code_key
from wavec.tuning.plan import mma_type_for

T = wc.sym.T
DTYPES = {"float16": wc.f16, "bfloat16": wc.bf16}


def gather_gemm_constraints(dtype=wc.f16, threads_per_wave: int = 32, mma_type=None) -> list:
    """BLOCK_M x BLOCK_N workgroup tiles of 2 x 2 waves, K in steps of BLOCK_K over NUM_STAGES stages."""
    mma = mma_type or mma_type_for("mma_sync", dtype)[1]
    return gemm_constraints(threads_per_wave, mma, (2, 2), wc.SchedulingConstraint(num_stages=NUM_STAGES))


def make_gather_scatter_gemm(dtype=wc.f16, top_k: int = 1, **constraints: Any) -> wc.WaveKernel:
    """The kernel ``(x [T, K], ids [M] i32, w [N, K], weights [M] f32, out [T, N] f32)``."""

    @wc.wave(gather_gemm_constraints(dtype, **constraints))
    def gather_scatter_gemm(
        x: Memory[T, K, dtype], ids: Memory[M, wc.i32], w: Memory[N, K, dtype], weights: Memory[M, f32],
        out: Memory[T, N, f32],
    ):  # fmt: skip
        rows = wc.read(ids) // top_k
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(x, mapping={T: rows}), wc.read(w), acc)

        wc.atomic_add(body * wc.read(weights)[:, None], out, mapping={T: rows})

    return gather_scatter_gemm


def config_for(m: int) -> dict:
    """Tiles: 128 x 128 (64 x 64 per wave) for many rows, 64 x 128 for a few; K steps of 32 in 3 stages."""
    return {BLOCK_M: 128 if m > 256 else 64, BLOCK_N: 128, BLOCK_K: 32, NUM_STAGES: 3}


_COMPILED: dict = {}


def _kernel(dtype, top_k: int, m: int, device: Any, backend: str | None):
    target = hopper_target(backend, device)  # sm_90a: vector reductions
    subs = config_for(m)
    key = (dtype.name, top_k, tuple(subs.values()), target, backend, code_key())
    if key not in _COMPILED:
        _COMPILED[key] = wc.compile(make_gather_scatter_gemm(dtype, top_k), subs, target=target, backend=backend)
    return _COMPILED[key]


def _fail(message: str) -> wc.WavecError:
    return wc.WavecError(message=f"gather_scatter_matmul: {message}")


def _check(x: Any, ids: Any, w: Any, weights: Any, out: Any, top_k: int) -> Any:
    """The wavec dtype of the call, or a ``WavecError`` naming the argument that is wrong."""
    import torch

    name = str(x.dtype).removeprefix("torch.")
    if x.dim() != 2 or name not in DTYPES:
        raise _fail(f"x must be a 2-D float16 or bfloat16 tensor [T, K], got {x.dim()}-D {name}")
    if w.dim() != 2 or w.dtype != x.dtype or w.shape[1] != x.shape[1]:
        raise _fail(f"w must be {x.dtype} [N, {x.shape[1]}], got {w.dtype} {list(w.shape)}")
    if ids.dim() != 1 or ids.dtype != torch.int32:
        raise _fail(f"ids must be a 1-D int32 tensor, got {ids.dim()}-D {ids.dtype}")
    if weights.dtype != torch.float32 or tuple(weights.shape) != (ids.shape[0],):
        raise _fail(f"weights must be float32 [{ids.shape[0]}], got {weights.dtype} {list(weights.shape)}")
    if out.dtype != torch.float32 or tuple(out.shape) != (x.shape[0], w.shape[0]):
        raise _fail(f"out must be float32 [{x.shape[0]}, {w.shape[0]}], got {out.dtype} {list(out.shape)}")
    if not isinstance(top_k, int) or top_k < 1:
        raise _fail(f"top_k must be a positive int, got {top_k!r}")
    for arg, t in (("ids", ids), ("w", w), ("weights", weights), ("out", out)):
        if t.device != x.device:
            raise _fail(f"{arg} is on {t.device} but x is on {x.device}")
    return DTYPES[name]


def gather_scatter_matmul(x, ids, w, weights, out, *, top_k: int = 1, backend: str | None = None):
    """``out[ids // top_k] += weights[:, None] * (x[ids // top_k] @ w.T)`` in place (rows of repeated
    tokens accumulate in an unspecified order); returns ``out``.

    x [T, K] and w [N, K] f16 or bf16, ids [M] int32 with every ``ids // top_k`` in [0, T), weights [M]
    float32, out [T, N] float32.  K a multiple of 8 (16-byte rows).  CPU tensors run on the emulator."""
    dtype = _check(x, ids, w, weights, out, top_k)
    if ids.numel() and w.shape[0] and x.shape[1]:
        _kernel(dtype, top_k, ids.shape[0], x.device, backend)(x, ids, w, weights, out)
    return out
