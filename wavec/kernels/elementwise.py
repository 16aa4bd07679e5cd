"""Memory-bound kernels: a 2-D copy, ``out = a * b + bias[None, :]`` (broadcast along rows) and
``silu_and_mul`` (the two halves of each row read as a batch dim of two: no index arithmetic on the
contiguous dim, so both halves keep 16-byte runs)."""

import wavec as wc
from wavec import Memory
from wavec.kernels.fastpath import Decisions, as_rows, tensor_key

M, N = wc.sym.M, wc.sym.N
BLOCK_M, BLOCK_N = wc.sym.BLOCK_M, wc.sym.BLOCK_N


def rowwise_constraints(threads_per_wave: int = 32, elems_per_thread: int = 8) -> list:
    """One wave per row of the workgroup tile; each lane moves ``elems_per_thread`` contiguous elements."""
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(N, BLOCK_N, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(
            threads_per_wave=threads_per_wave, vector_shapes={M: 1, N: threads_per_wave * elems_per_thread}
        ),
    ]


def rowwise_config(dtype, n: int) -> tuple[dict, int]:
    """(subs, vector width) of a ``rowwise_constraints`` kernel over rows of ``n`` elements: the widest
    access up to 16 bytes that divides the row, four rows per workgroup, and a row tile of two wave-wide
    passes for rows that long."""
    vec = 16 // dtype.bytes
    while n % vec:
        vec //= 2
    per_pass = 32 * vec
    return {BLOCK_M: 4, BLOCK_N: per_pass * (2 if n >= 2 * per_pass else 1)}, vec


def make_copy(dtype=wc.f16, threads_per_wave: int = 32) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(threads_per_wave, 16 // dtype.bytes))
    def copy(src: Memory[M, N, dtype], dst: Memory[M, N, dtype]):
        wc.write(wc.read(src), dst)

    return copy


def make_scale_shift(dtype=wc.f16, threads_per_wave: int = 32) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(threads_per_wave, 16 // dtype.bytes))
    def scale_shift(a: Memory[M, N, dtype], b: Memory[M, N, dtype], bias: Memory[N, dtype], out: Memory[M, N, dtype]):
        wc.write(wc.read(a) * wc.read(b) + wc.read(bias)[None, :], out)

    return scale_shift


DEFAULT_SUBS = {BLOCK_M: 4, BLOCK_N: 512}


TWO = wc.sym.TWO  # the gate / up halves of a fused projection's output


def make_silu_and_mul(dtype=wc.f16, threads_per_wave: int = 32, vec: int | None = None) -> wc.WaveKernel:
    """``out = silu(x[:, 0]) * x[:, 1]`` for ``x [M, 2, N]`` (a ``[M, 2N]`` row viewed as its two halves:
    vLLM's ``silu_and_mul`` layout), in f32, stored in ``dtype``."""
    vec = vec or 16 // dtype.bytes

    @wc.wave(rowwise_constraints(threads_per_wave, vec))
    def silu_and_mul(x: Memory[M, TWO, N, dtype], out: Memory[M, N, dtype]):
        gate = wc.cast(wc.read(x, mapping={TWO: 0}), wc.f32)
        up = wc.cast(wc.read(x, mapping={TWO: 1}), wc.f32)
        wc.write(wc.cast(wc.silu(gate) * up, dtype), out)

    return silu_and_mul


_DTYPES = {"float16": wc.f16, "bfloat16": wc.bf16, "float32": wc.f32}
_COMPILED: dict = {}


def silu_and_mul(x, *, backend: str | None = None):
    """``silu(x[..., :d]) * x[..., d:]`` for ``x [..., 2d]`` (f16, bf16, f32; computed in f32): vLLM's
    ``silu_and_mul``, the activation between a fused gate/up projection and the down projection.  A new
    tensor ``[..., d]``; rows with any pitch run in place, transposed ones are copied."""
    key = (tensor_key(x), backend)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _silu_runner(x, backend))
    return run(x)


_DECIDED = Decisions("silu_and_mul")  # (x's key, backend) -> run(x)


def _silu_runner(x, backend: str | None):
    import torch

    name = str(getattr(x, "dtype", "")).removeprefix("torch.")
    if not isinstance(x, torch.Tensor) or name not in _DTYPES or x.dim() == 0 or x.shape[-1] % 2:
        got = f"{x.dim()}-D {name} of last dim {x.shape[-1]}" if isinstance(x, torch.Tensor) and x.dim() else repr(x)
        raise wc.WavecError(
            message=f"silu_and_mul: x must be a tensor of {sorted(_DTYPES)} whose last dim is even, got {got}"
        )
    dtype, d = _DTYPES[name], x.shape[-1] // 2
    shape, tdtype, device, empty = (*x.shape[:-1], d), x.dtype, x.device, torch.empty
    out = empty(shape, dtype=tdtype, device=device)
    if not out.numel():
        return lambda x: empty(shape, dtype=tdtype, device=device)
    subs, vec = rowwise_config(dtype, d)
    key = (dtype.name, vec, subs[BLOCK_N], backend)
    if key not in _COMPILED:
        _COMPILED[key] = wc.compile(make_silu_and_mul(dtype, vec=vec), {**subs, TWO: 2}, backend=backend)
    rows, per_call = as_rows(x, (-1, 2, d))  # a view where the strides allow (a slice of a wider projection)
    launch = _COMPILED[key].prepare(rows, out.view(-1, d), fresh_outputs=True)

    def run(x):
        out = empty(shape, dtype=tdtype, device=device)
        launch(per_call(x), out)
        return out

    return run
