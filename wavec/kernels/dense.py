"""``linear(x, w, bias=None)``, ``torch.nn.functional.linear`` on wavec: ``matmul`` of the rows of x
against w, then (with a bias) one pass over the f32 product adding the bias and rounding to x's dtype,
so the bias is added before the only rounding, as cuBLAS's epilogue does.
"""

from __future__ import annotations

import wavec as wc
from wavec import Memory
from wavec.kernels.elementwise import BLOCK_N, M, N, rowwise_config, rowwise_constraints
from wavec.kernels.fastpath import Decisions, as_rows, tensor_key
from wavec.kernels.gemm import matmul_runner
from wavec.tuning.plan import GemmRequest

DTYPES = {"float16": wc.f16, "bfloat16": wc.bf16}


def make_bias_cast(dtype=wc.f16, threads_per_wave: int = 32, vec: int = 4) -> wc.WaveKernel:
    """``out = cast(c + bias[None, :], dtype)`` for an f32 ``c [M, N]`` and ``bias [N]`` of ``dtype``."""

    @wc.wave(rowwise_constraints(threads_per_wave, vec))
    def bias_cast(c: Memory[M, N, wc.f32], bias: Memory[N, dtype], out: Memory[M, N, dtype]):
        wc.write(wc.cast(wc.read(c) + wc.cast(wc.read(bias), wc.f32)[None, :], dtype), out)

    return bias_cast


_COMPILED: dict = {}


def _bias_kernel(dtype, n: int, backend: str | None):
    subs, vec = rowwise_config(wc.f32, n)  # the runs of the f32 product set the width
    key = (dtype.name, vec, subs[BLOCK_N], backend)
    if key not in _COMPILED:
        _COMPILED[key] = wc.compile(make_bias_cast(dtype, vec=vec), subs, backend=backend)
    return _COMPILED[key]


def linear(x, weight, bias=None, *, backend: str | None = None):
    """``x @ weight.T (+ bias)`` for ``x [..., in]``, ``weight [out, in]``, ``bias [out]`` or None, all f16 or
    all bf16 on one device: a new tensor ``[..., out]`` of x's dtype (f32 accumulation; the bias added to
    the f32 product before rounding).  ``matmul`` picks the kernel (wgmma on sm_90).  A repeated call with
    the same dtypes, shapes and devices is one dictionary lookup and the prepared launches."""
    key = (tensor_key(x), tensor_key(weight), tensor_key(bias), backend)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _runner(x, weight, bias, backend))
    return run(x, weight, bias)


# (tensor keys, backend) -> run(x, weight, bias)
_DECIDED = Decisions("linear")


def _check(x, weight, bias) -> None:
    import torch

    name = str(getattr(x, "dtype", "")).removeprefix("torch.")
    if not isinstance(x, torch.Tensor) or name not in DTYPES or x.dim() == 0:
        raise wc.WavecError(message=f"linear: x must be a float16 or bfloat16 tensor, got {getattr(x, 'dtype', x)!r}")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.dtype != x.dtype:
        got = f"{weight.dim()}-D {weight.dtype}" if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise wc.WavecError(message=f"linear: weight must be a 2-D {x.dtype} tensor [out, in], got {got}")
    if weight.shape[1] != x.shape[-1] or weight.device != x.device:
        raise wc.WavecError(
            message=f"linear: weight [out, in] must have in = x.shape[-1] = {x.shape[-1]} and x's device "
            f"{x.device}, got {list(weight.shape)} on {weight.device}"
        )
    out_features = weight.shape[0]
    if bias is not None and (
        not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (out_features,) or bias.dtype != x.dtype
        or bias.device != x.device
    ):  # fmt: skip
        got = f"{tuple(bias.shape)} {bias.dtype}" if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise wc.WavecError(message=f"linear: bias must be [{out_features}] {x.dtype} on {x.device}, got {got}")


def _runner(x, weight, bias, backend: str | None):
    """Validate a call and prepare its launches: ``run(x, weight, bias)`` for calls with the same keys
    (x's rows and a non-dense weight or bias copied per call where the first call's were not dense)."""
    import torch

    _check(x, weight, bias)
    out_features, lead = weight.shape[0], tuple(x.shape[:-1])
    # views whose rows are contiguous run in place (the GEMM's strided variant); a transposed operand is
    # copied, which beats the variant's element-by-element reads of it
    rows, x_per_call = as_rows(x, (-1, x.shape[-1]))
    w, w_per_call = as_rows(weight, tuple(weight.shape))

    def operands(x, weight):
        return x_per_call(x), w_per_call(weight)

    req = GemmRequest("auto", "auto", None, None, None, None, True)
    if bias is None:
        product = matmul_runner(rows, w, backend, None, req, (*lead, out_features))
        return lambda x, weight, bias: product(*operands(x, weight))
    product = matmul_runner(rows, w, backend, torch.float32, req)
    out = torch.empty((*lead, out_features), dtype=x.dtype, device=x.device)
    if not out.numel():
        return lambda x, weight, bias: torch.empty((*lead, out_features), dtype=x.dtype, device=x.device)
    c = torch.empty(rows.shape[0], out_features, dtype=torch.float32, device=x.device)
    dense_b = bias.is_contiguous()
    add = _bias_kernel(DTYPES[str(x.dtype).removeprefix("torch.")], out_features, backend)
    add_bias = add.prepare(c, bias.contiguous(), out.view(c.shape), fresh_outputs=True)
    empty, shape, dtype, device = torch.empty, out.shape, x.dtype, x.device

    def run(x, weight, bias):
        c = product(*operands(x, weight))
        out = empty(shape, dtype=dtype, device=device)
        add_bias(c, bias if dense_b else bias.contiguous(), out)
        return out

    return run
