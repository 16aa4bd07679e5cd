"""Mixture-of-experts routing: ``topk_softmax``, the contract of vLLM's ``topk_softmax`` kernel.

For ``gating_logits`` [T, E] (f32, f16 or bf16): the softmax over the E experts in f32, then its ``k``
largest probabilities per token, largest first (``topk_weights`` f32 [T, k]) and their experts
(``topk_ids`` int32 [T, k]); equal probabilities give the lower expert first, NaN counts as largest
(``torch.topk``'s order).  ``renormalize=True`` divides the k weights by their sum.

One kernel, one wave per token row (several rows per wave for E < 32): the row max and sum are wave
reductions, ``wc.topk`` selects the k winners (k rounds of a wave max over packed value/index keys).  The
kernel computes ``kp``, k rounded up to a multiple of 4 (16-byte rows of the outputs), and returns views of
the first k columns (copied when k is not a multiple of 4): the top-kp is sorted, so its first k are the
top-k; the renormalizing sum masks the extra columns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import wavec as wc
from wavec import Memory
from wavec.kernels.fastpath import Decisions, tensor_key
from wavec.knobs import code_key

T, E, K = wc.sym.T, wc.sym.E, wc.sym.K
DTYPES = {"float32": wc.f32, "float16": wc.f16, "bfloat16": wc.bf16}
MAX_EXPERTS = 512
WAVES = 4  # token rows per workgroup: WAVES waves, each its rows


def make_topk_softmax(dtype, experts: int, k: int, renormalize: bool, tpw: int = 32) -> wc.WaveKernel:
    """``weights, ids = topk(softmax(x.float(), -1), K)`` over rows of ``experts`` (bound to E), K = the
    padded k (bound in subs), the first ``k`` renormalized when ``renormalize``; a wave of ``tpw`` lanes
    holds one row, or ``tpw / E`` rows of E lanes each when E < ``tpw``."""
    rows = max(1, tpw // experts)
    cons = [
        wc.WorkgroupConstraint(T, rows * WAVES, 0),
        wc.WorkgroupConstraint(E, E, None),
        wc.WorkgroupConstraint(K, K, None),
        wc.WaveConstraint(T, rows),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={T: rows, E: experts}),
    ]

    @wc.wave(cons)
    def topk_softmax(x: Memory[T, E, dtype], weights: Memory[T, K, wc.f32], ids: Memory[T, K, wc.i32]):
        v = wc.cast(wc.read(x), wc.f32)
        e = wc.exp(v - wc.max(v, E)[:, None])
        p = e / wc.sum(e, E)[:, None]
        w, i = wc.topk(p, K, E)
        if renormalize:
            w = w / wc.sum(wc.where((wc.index(K) < k)[None, :], w, 0.0), K)[:, None]
        wc.write(w, weights)
        wc.write(i, ids)

    return topk_softmax


_COMPILED: dict = {}


def _kernel(dtype, experts: int, k: int, renormalize: bool, backend: str | None):
    kp = (k + 3) // 4 * 4
    key = (dtype.name, experts, k, renormalize, backend, code_key())
    if key not in _COMPILED:
        kern = make_topk_softmax(dtype, experts, k, renormalize)
        _COMPILED[key] = wc.compile(kern, {E: experts, K: kp}, backend=backend)
    return _COMPILED[key], kp


def _check(gating_logits: Any, k: Any, renormalize: Any) -> tuple:
    """(wavec dtype, E) of valid arguments, or a ``WavecError`` naming the argument."""
    import torch

    if not isinstance(gating_logits, torch.Tensor) or gating_logits.dim() != 2:
        got = f"{gating_logits.dim()}-D" if isinstance(gating_logits, torch.Tensor) else type(gating_logits).__name__
        raise wc.WavecError(message=f"topk_softmax: gating_logits must be a 2-D tensor [T, E], got {got}")
    name = str(gating_logits.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise wc.WavecError(message=f"topk_softmax: gating_logits must be one of {sorted(DTYPES)}, got {name}")
    experts = gating_logits.shape[1]
    if not (1 <= experts <= MAX_EXPERTS and (experts % 32 == 0 or 32 % experts == 0)):  # lanes divide E or E them
        raise wc.WavecError(
            message=f"topk_softmax: gating_logits has {experts} experts; E must be a power of two up to 32 "
            f"or a multiple of 32, at most {MAX_EXPERTS}"
        )
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= experts:
        raise wc.WavecError(message=f"topk_softmax: k must be an int in 1..{experts} (the experts), got {k!r}")
    if (k + 3) // 4 * 4 > experts:
        raise wc.WavecError(message=f"topk_softmax: k = {k} rounded up to a multiple of 4 exceeds E = {experts}")
    if not isinstance(renormalize, bool):
        raise wc.WavecError(message=f"topk_softmax: renormalize must be a bool, got {renormalize!r}")
    return DTYPES[name], experts


def topk_softmax(gating_logits, k: int, renormalize: bool = False, *, backend: str | None = None):
    """``(topk_weights f32 [T, k], topk_ids int32 [T, k])``: the ``k`` largest of
    ``softmax(gating_logits.float(), -1)`` per token, largest first (the lower expert first among equal
    weights), divided by their sum when ``renormalize`` (vLLM's ``topk_softmax``).  E (the experts) is a
    power of two up to 32 or a multiple of 32 up to 512; ``k`` rounded up to a multiple of 4 at most E.
    A repeated call (same logits key and options) is one lookup, the outputs' allocation and the
    prepared launch."""
    key = (tensor_key(gating_logits), k, renormalize, type(k), type(renormalize), backend)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _runner(gating_logits, k, renormalize, backend))
    return run(gating_logits)


_DECIDED = Decisions("topk_softmax")  # (logits key, k, renormalize, backend) -> run(logits)


def _runner(gating_logits: Any, k: int, renormalize: bool, backend: str | None) -> Callable[[Any], tuple]:
    """Validate a call, compile its kernel and prepare the launch: ``run(logits) -> (weights, ids)``
    (fresh [T, k] tensors: views of the [T, kp] outputs' first k columns, copied, when kp > k)."""
    import torch

    dtype, experts = _check(gating_logits, k, renormalize)
    x = gating_logits.contiguous()
    dense = x is gating_logits  # else a copy per call (the kernel reads whole rows)
    tokens, device = x.shape[0], x.device
    kernel, kp = _kernel(dtype, experts, k, renormalize, backend)
    empty, f32, i32 = torch.empty, torch.float32, torch.int32
    launch = kernel.prepare(x, empty(tokens, kp, dtype=f32, device=device), empty(tokens, kp, dtype=i32, device=device),
                            fresh_outputs=True) if tokens else None  # fmt: skip

    def run(logits: Any) -> tuple:
        weights, ids = empty(tokens, kp, dtype=f32, device=device), empty(tokens, kp, dtype=i32, device=device)
        if launch is not None:
            launch(logits if dense else logits.contiguous(), weights, ids)
        if kp == k:
            return weights, ids
        return weights[:, :k].contiguous(), ids[:, :k].contiguous()

    return run


def reference(gating_logits, k: int, renormalize: bool = False):
    """The contract in torch: softmax in f32, ``torch.topk``, the optional renormalization."""
    import torch

    p = torch.softmax(gating_logits.float(), dim=-1)
    w, i = torch.topk(p, k, dim=-1)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w, i.to(torch.int32)


def check_routing(x, k: int, renormalize: bool, weights, ids) -> None:
    """Raise ``AssertionError`` unless ``(weights, ids)`` answer ``topk_softmax(x, k, renormalize)``: weights
    within f32 rounding of ``reference``, each id's softmax probability equal to its (pre-renormalization)
    weight, ids distinct per token and ``torch.topk``'s wherever the probabilities are distinct."""
    import torch

    x, weights, ids = x.cpu(), weights.cpu(), ids.cpu()
    if weights.shape != (x.shape[0], k) or ids.shape != (x.shape[0], k) or ids.dtype != torch.int32:
        raise AssertionError(f"shapes {list(weights.shape)} / {list(ids.shape)} {ids.dtype}, want [{x.shape[0]}, {k}]")
    if weights.dtype != torch.float32 or not (weights.is_contiguous() and ids.is_contiguous()):
        raise AssertionError("weights must be contiguous f32 and ids contiguous")
    if not ((ids >= 0) & (ids < x.shape[1])).all():
        raise AssertionError("an id was not written")
    ref_w, ref_i = reference(x, k, renormalize)
    torch.testing.assert_close(weights, ref_w, rtol=2e-6, atol=1e-7)
    p = torch.softmax(x.double(), -1)
    got = p.gather(-1, ids.long())
    if renormalize:
        got = got / got.sum(-1, keepdim=True)
    torch.testing.assert_close(weights.double(), got, rtol=1e-5, atol=1e-7)
    if k > 1 and not (ids.sort(-1).values.diff(dim=-1) > 0).all():
        raise AssertionError("an expert was chosen twice for one token")
    pf = torch.softmax(x.float(), -1)
    s, order = pf.sort(-1)
    eq = s[:, 1:] == s[:, :-1]
    dup = torch.zeros_like(s, dtype=torch.bool)
    dup[:, 1:] |= eq
    dup[:, :-1] |= eq
    distinct = torch.empty_like(dup).scatter_(-1, order, ~dup)  # [T, E]: its probability occurs once
    sure = distinct.gather(-1, ref_i.long()) & distinct.gather(-1, ids.long())
    if not torch.equal(ids[sure], ref_i[sure]):
        raise AssertionError("ids differ from torch.topk's where the probabilities are distinct")
