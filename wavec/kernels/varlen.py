"""Variable-length prefill attention over packed sequences, like ``flash_attn_varlen_func``.

Requires: q [total_q, Hq, D], k / v [total_k, Hkv, D] (f16 or bf16, contiguous), ``cu_seqlens_q`` /
``cu_seqlens_k`` int32 [B + 1], non-decreasing from 0 to total_q / total_k; Hq a multiple of Hkv.

Guarantees: ``out[cu_q[b] + i, h] = softmax(q[cu_q[b] + i, h] · K_bᵀ · scale) V_b`` with K_b / V_b the rows
``cu_k[b] .. cu_k[b + 1]`` of k / v (head ``h // (Hq / Hkv)``), masked as asked (``attention.MaskSpec``:
causal and sliding windows around the diagonal j = i (top-left) or j = i + len_k - len_q (bottom-right)),
scores soft-capped when asked; a query that sees no key outputs 0.

How the body maps onto the compiler (docs/attention.md, "Variable-length prefill"):
- one workgroup per (query tile of max_seqlen_q, head, sequence): ``attention_constraints``'s grid, where
  M is max_seqlen_q and N max_seqlen_k.  Neither size is in q, k or v, so each comes from the first dim
  of a *shape carrier*, a cached int32 tensor the kernel never reads (``_carrier``): one binary serves
  every batch, total length and max length.  B is ``cu_seqlens_q``'s length minus one (a derived size);
- each workgroup reads its sequence's start and end from ``cu_seqlens`` once (rank-0 values at static
  mappings of its batch coordinate) and leaves at once (``wc.exit_if``) when its query tile starts past
  the sequence's end: short sequences cost their own tiles, not max_seqlen_q's;
- Q, K and V rows are gathered at start + local row (dynamic row mappings: 16-byte ``cp.async`` runs
  along D, as for paged K/V); a K/V row past the sequence's end is clamped to a row inside the packed
  tensor (finite data whose probability is exactly 0: the keys past len_k are masked to -inf);
- the key loop runs to max_seqlen_k (a top-left mask bounds it by the tile's rows): data-dependent trip
  counts are not available, so tiles past a short sequence's end are walked, fully masked;
- O rows past the sequence's end go to a spare row ``total_q`` of the output (all lanes store the same
  zeros there; the returned tensor is a view without it): rows of a scatter cannot be predicated off.
"""

from __future__ import annotations

import math
from typing import Any

import sympy

import wavec as wc
from wavec import Memory, Register, f32
from wavec.kernels.fastpath import Decisions, tensor_key
from wavec.knobs import code_key

from .attention import (
    ALIGNS,
    BLOCK_M,
    BLOCK_N,
    HEAVY_FIRST,
    LOG2E,
    NEG_INF,
    TARGET,
    MaskSpec,
    alibi_bias,
    alibi_kind,
    attention_config,
    attention_constraints,
    mask_spec,
)
from .decode import fail, torch_to_wavec

T, TO, TK, C = wc.sym.T, wc.sym.TO, wc.sym.TK, wc.sym.C  # packed queries, output rows (T + 1), keys, B + 1
SB = wc.sym.SB  # the rows of ALiBi slopes: 1 ([H] slopes viewed [1, H]) or B
B, H, KVH, M, N, D = wc.sym.B, wc.sym.H, wc.sym.KVH, wc.sym.M, wc.sym.N, wc.sym.D
HEAD_DIMS = (64, 128)
MMA = ("mma_sync", "wgmma", "mfma")
CAUSAL = (False, *ALIGNS)
NO_MASK = MaskSpec()


def make_varlen_attention(
    dtype=wc.f16, spec: MaskSpec = NO_MASK, waves: int = 4, mma: str = "mma_sync", softcap: float = 0.0,
    alibi: str | None = None,
):  # fmt: skip
    """The kernel ``varlen_attention(q, k, v, cu_q, cu_k, m_carrier, n_carrier, o, scale, spare)`` for the
    mask ``spec`` (``attention.mask_spec``; its diagonal uses each sequence's own lengths) and the logits
    soft-cap ``softcap`` (0: off); compile with ``varlen_subs``.  ``o`` has one spare row past the last
    query (``TO = T + 1``), ``spare`` its index.  ``alibi``: "h" ([1, H] slopes) or "bh" ([B, H]) adds the
    argument ``slopes`` after ``v`` and the bias ``-slope * |i + len_k - len_q - j|`` to the logits."""
    group_of = {KVH: wc.tile_start(H) // (H // KVH)}  # grouped-query: q heads share a kv head
    b = wc.tile_start(B)
    start, end = _key_range(spec)
    heavy_first = spec.right is not None and HEAVY_FIRST[mma]  # as the dense kernel: heaviest tiles first

    def body(q, k, v, slopes, cu_q, cu_k, o, scale, spare) -> None:
        start_q = wc.read(cu_q, mapping={C: b})
        len_q = wc.read(cu_q, mapping={C: b + 1}) - start_q
        wc.exit_if(len_q <= wc.tile_start(M))  # a tile past this sequence's queries: nothing to do
        start_k = wc.read(cu_k, mapping={C: b})
        len_k = wc.read(cu_k, mapping={C: b + 1}) - start_k
        rows = wc.index(M)
        qr = wc.read(q, mapping={T: start_q + wc.minimum(rows, len_q - 1)})  # len_q >= 1 past exit_if
        slope = None if slopes is None else wc.read(slopes, mapping={SB: b if alibi == "bh" else 0})
        # exponents in units of the (capped) scores; with ALiBi in units of the biased logits
        c = LOG2E if alibi else softcap * LOG2E if softcap else scale * LOG2E
        init = [Register[M, f32](NEG_INF), Register[M, f32](0.0), Register[M, D, f32](0.0)]

        @wc.iterate(N, init_args=init, start=start, end=end)
        def loop(m_i: Register[M, f32], l_i: Register[M, f32], acc: Register[M, D, f32]):
            pos = wc.minimum(start_k + wc.index(N), TK - 1)  # inside k: rows past len_k are masked below
            kv_rows = {TK: pos, **group_of}
            s = wc.mma(qr, wc.read(k, mapping=kv_rows), Register[M, N, f32](0.0))
            if softcap:
                s = wc.tanh(s * (scale * (1.0 / softcap)))
            if slope is not None:
                s = alibi_bias(s * softcap if softcap else s * scale, slope, len_q, len_k)
            s = _mask(s, spec, len_q, len_k)
            m_new = wc.maximum(m_i, wc.max(s, N))
            m_use = wc.where(m_new > NEG_INF, m_new, 0.0) * c  # a row with no key yet: exp2(-inf) = 0, no NaN
            p = wc.exp2(s * c - m_use[:, None])
            alpha = wc.exp2(m_i * c - m_use)
            l_new = l_i * alpha + wc.sum(p, N)
            vt = wc.permute(wc.read(v, mapping=kv_rows), (D, N))
            return m_new, l_new, wc.mma(wc.cast(p, dtype), vt, acc * alpha[:, None])

        _m, l_fin, acc = loop
        live = wc.arange(M) < len_q
        out = wc.where(live[:, None], acc * wc.reciprocal(wc.maximum(l_fin, 1.0))[:, None], 0.0)
        wc.write(wc.cast(out, dtype), o, mapping={TO: wc.where(live, start_q + rows, spare)})

    # K/V rows are gathered, which TMA boxes cannot express: cp.async on every target
    constraints = attention_constraints(dtype, waves, mma, heavy_first, async_copy="cp.async")
    if alibi is None:

        @wc.wave(constraints)
        def varlen_attention(
            q: Memory[T, H, D, dtype], k: Memory[TK, KVH, D, dtype], v: Memory[TK, KVH, D, dtype],
            cu_q: Memory[C, wc.i32], cu_k: Memory[C, wc.i32], m_carrier: Memory[M, wc.i32],
            n_carrier: Memory[N, wc.i32], o: Memory[TO, H, D, dtype], scale: wc.Scalar[f32], spare: wc.Scalar[wc.i32],
        ):  # fmt: skip
            body(q, k, v, None, cu_q, cu_k, o, scale, spare)

        return varlen_attention

    @wc.wave(constraints)
    def varlen_attention_alibi(
        q: Memory[T, H, D, dtype], k: Memory[TK, KVH, D, dtype], v: Memory[TK, KVH, D, dtype],
        slopes: Memory[SB, H, f32], cu_q: Memory[C, wc.i32], cu_k: Memory[C, wc.i32], m_carrier: Memory[M, wc.i32],
        n_carrier: Memory[N, wc.i32], o: Memory[TO, H, D, dtype], scale: wc.Scalar[f32], spare: wc.Scalar[wc.i32],
    ):  # fmt: skip
        body(q, k, v, slopes, cu_q, cu_k, o, scale, spare)

    return varlen_attention_alibi


def _key_range(spec: MaskSpec) -> tuple:
    """(start, end) of the key loop: top-left masks bound it by the tile's own rows (the first key its
    first query sees, rounded down to a tile; past the last key its last query sees); bottom-right
    diagonals depend on the lengths, so those loops walk every key tile up to max_seqlen_k."""
    if spec.align != "top_left":
        return None, None
    row = wc.tile_start(M)
    end = None if spec.right is None else row + BLOCK_M + spec.right
    start = None if spec.left is None else sympy.Max(0, row - spec.left) // BLOCK_N * BLOCK_N
    return start, end


def _mask(s, spec: MaskSpec, len_q, len_k):
    """``s`` with -inf at keys past the sequence's and those ``spec`` hides: key j of query i is seen when
    ``diag - left <= j <= diag + right`` with ``diag = i`` (top-left) or ``i + len_k - len_q``
    (bottom-right, compared as ``j + len_q`` against ``i + len_k``: no negative term)."""
    j = wc.arange(N)[None, :]
    s = wc.where(j < len_k, s, NEG_INF)
    if not spec.masked:
        return s
    i = wc.arange(M)[:, None]
    if spec.align == "bottom_right":
        i, j = i + len_k, j + len_q
    if spec.right is not None:
        s = wc.where(j <= (i + spec.right if spec.right else i), s, NEG_INF)
    if spec.left is not None:
        s = wc.where(j + spec.left >= i, s, NEG_INF)
    return s


def varlen_subs(head_dim: int, mma: str = "mma_sync", config: tuple | None = None) -> tuple[dict, int]:
    """(subs, waves): the dense kernel's tile for ``head_dim`` (``attention_config``) and the derived
    size B from cu_seqlens (``C = B + 1``)."""
    subs, waves = attention_config(head_dim, None, config, "wgmma" if mma == "wgmma" else "mma_sync")
    return {**subs, B: C - 1}, waves


_COMPILED: dict = {}
_CARRIERS: dict = {}


def _kernel(
    dtype, spec: MaskSpec, softcap: float, head_dim: int, mma: str, config, backend, alibi: str | None = None
) -> Any:
    key = (dtype.name, spec, softcap, head_dim, mma, config, backend, alibi, code_key())
    kernel = _COMPILED.get(key)
    if kernel is None:
        subs, waves = varlen_subs(head_dim, mma, config)
        definition = make_varlen_attention(dtype, spec, waves, mma, softcap, alibi)
        kernel = _COMPILED[key] = wc.compile(definition, subs, backend=backend, target=TARGET[mma])
    return kernel


def _new_output(q) -> Any:
    """The output with its spare row (the GPU tests replace this to NaN-fill it)."""
    return q.new_empty(q.shape[0] + 1, *q.shape[1:])


def _carrier(size: int, device: Any) -> Any:
    """A cached int32 [size] tensor whose only use is its length (max_seqlen_q or max_seqlen_k)."""
    import torch

    key = (size, str(device))
    t = _CARRIERS.get(key)
    if t is None:
        t = _CARRIERS[key] = torch.zeros(size, dtype=torch.int32, device=device)
    return t


def _check(q, k, v, cu_q, cu_k, max_q, max_k, causal) -> Any:
    """A ``WavecError`` naming the argument for what the kernel cannot run; returns q's wavec dtype."""
    import torch

    fn = "varlen_attention"
    dtype = torch_to_wavec(fn, q.dtype)
    if q.dim() != 3:
        raise fail(fn, f"q must be 3-D [total_q, heads, head_dim], got shape {list(q.shape)}")
    for name, t in (("k", k), ("v", v)):
        if t.dim() != 3 or t.dtype != q.dtype:
            raise fail(
                fn, f"{name} must be a 3-D {q.dtype} tensor [total_k, kv_heads, head_dim], got {t.dim()}-D {t.dtype}"
            )
        if t.device != q.device:
            raise fail(fn, f"{name} is on {t.device} but q is on {q.device}")
    if tuple(v.shape) != tuple(k.shape):
        raise fail(fn, f"v has shape {list(v.shape)} but k {list(k.shape)}")
    if q.shape[2] not in HEAD_DIMS or k.shape[2] != q.shape[2]:
        raise fail(fn, f"head_dim must be one of {HEAD_DIMS} in q and k, got q {q.shape[2]}, k {k.shape[2]}")
    if q.shape[1] % k.shape[1]:
        raise fail(
            fn, f"{q.shape[1]} query heads (q.shape[1]) are not a multiple of {k.shape[1]} kv heads (k.shape[1])"
        )
    for name, t in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32:
            raise fail(fn, f"{name} must be an int32 tensor, got {getattr(t, 'dtype', type(t).__name__)}")
        if t.dim() != 1 or t.shape[0] < 2:
            raise fail(fn, f"{name} must be 1-D [batch + 1] with batch >= 1, got shape {list(t.shape)}")
        if t.device != q.device:
            raise fail(fn, f"{name} is on {t.device} but q is on {q.device}")
    if cu_k.shape[0] != cu_q.shape[0]:
        raise fail(fn, f"cu_seqlens_k has {cu_k.shape[0]} entries but cu_seqlens_q {cu_q.shape[0]}")
    for name, x in (("max_seqlen_q", max_q), ("max_seqlen_k", max_k)):
        if not isinstance(x, int) or isinstance(x, bool) or not 0 <= x < 2**31:
            raise fail(fn, f"{name} must be an int >= 0, got {x!r}")
    if not any(causal is c for c in CAUSAL[:1]) and causal not in ALIGNS and causal is not True:
        raise fail(fn, f"causal must be one of {(*CAUSAL, True)}, got {causal!r}")
    return dtype


def _check_data(q, k, cu_q, cu_k, max_q: int, max_k: int) -> None:
    """cu_seqlens start at 0, never decrease, end at the packed length, and no sequence is longer than its
    max_seqlen.  On a GPU this reads cu_seqlens back (a synchronisation): only under
    ``WAVEC_CHECK_BOUNDS=1``; the emulator (CPU tensors) always checks."""
    from wavec.knobs import knobs

    if q.is_cuda and not knobs.check_bounds:
        return
    for name, cu, total, most, what in (
        ("cu_seqlens_q", cu_q, q.shape[0], max_q, "max_seqlen_q"),
        ("cu_seqlens_k", cu_k, k.shape[0], max_k, "max_seqlen_k"),
    ):
        vals = [int(x) for x in cu.tolist()]
        if vals[0] != 0:
            raise fail("varlen_attention", f"{name}[0] must be 0, got {vals[0]}")
        for b in range(len(vals) - 1):
            if vals[b + 1] < vals[b]:
                raise fail("varlen_attention", f"{name} decreases at {b + 1}: {vals[b]} -> {vals[b + 1]}")
            if vals[b + 1] - vals[b] > most:
                raise fail(
                    "varlen_attention", f"{name}: sequence {b} has {vals[b + 1] - vals[b]} rows > {what} = {most}"
                )
        if vals[-1] != total:
            raise fail("varlen_attention", f"{name}[-1] = {vals[-1]} must equal the packed length {total}")


def varlen_attention(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool | str = False,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    scale: float | None = None,
    backend: str | None = None,
    mma: str | None = None,
    config: tuple | None = None,
    alibi_slopes=None,
):
    """Attention over packed variable-length sequences, like ``flash_attn_varlen_func``; returns a new
    tensor shaped like q.

    q [total_q, Hq, D], k / v [total_k, Hkv, D] (f16 or bf16, contiguous; D 64 or 128; Hq a multiple of
    Hkv), ``cu_seqlens_q`` / ``cu_seqlens_k`` int32 [B + 1]: sequence b's queries are rows
    ``cu_seqlens_q[b] .. cu_seqlens_q[b + 1]`` of q, its keys those of k.  ``max_seqlen_q`` / ``_k``: at
    least every sequence's length (the grid and the key loop are sized by them).  Zero-length sequences
    are allowed (a sequence with queries and no keys outputs 0).  ``causal``: False; "top_left" (query i
    sees keys j <= i); "bottom_right" (j <= i + len_k - len_q, flash-attn >= 2.1; queries left of key 0
    output 0); True is "bottom_right" (flash-attn's meaning).  ``window = (left, right)``: query i sees keys
    ``diag(i) - left .. diag(i) + right`` (-1: unbounded; the diagonal bottom-right when not causal, causal
    makes ``right`` 0: flash-attn's ``window_size``).  ``softcap = c > 0``: scores ``c·tanh(scale·q·k / c)``
    before the mask.  A query that sees no key outputs 0.  ``scale``: default 1/sqrt(D).  ``mma``:
    "mma_sync" (default) or "wgmma" (sm_90a); ``config = (BLOCK_M, BLOCK_N, waves[, stages])`` overrides
    the dense kernel's tile.  ``alibi_slopes``: f32 [Hq] or [B, Hq] (flash-attn's): the bias
    ``-slope * |i + len_k - len_q - j|`` added to the scaled (and capped) scores.  cu_seqlens that do not
    start at 0, decrease, do not end at the packed length or hold a sequence longer than its max_seqlen are
    a ``WavecError`` on the emulator (CPU tensors) and, on a GPU, under ``WAVEC_CHECK_BOUNDS=1``."""
    tensors = (q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes)
    opts = (max_seqlen_q, max_seqlen_k, causal, window, softcap, backend, mma, config)
    key = (*(tensor_key(t) for t in tensors), opts)
    run = _DECIDED.get(key)
    if run is None:
        built = _runner(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window, softcap,
                        backend, mma, config, alibi_slopes)  # fmt: skip
        run = _DECIDED.remember(key, built)
    _check_data(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return run(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, scale)


_DECIDED = Decisions("varlen_attention")  # (tensor keys, options) -> run(q, k, v, cu_q, cu_k, slopes, scale)


def _runner(q, k, v, cu_q, cu_k, max_q, max_k, causal, window, softcap, backend, mma, config, slopes):
    """Validate a call, compile its kernel and prepare the launch: ``run(q, k, v, cu_q, cu_k, slopes,
    scale)`` returns the output rows (a view of a buffer with the spare row) for calls with the same keys."""
    dtype = _check(q, k, v, cu_q, cu_k, max_q, max_k, causal)
    mma = mma or "mma_sync"
    if mma not in MMA:
        raise fail("varlen_attention", f"mma must be one of {MMA}, got {mma!r}")
    spec = mask_spec("bottom_right" if causal is True else causal, window)  # an OptionError naming either
    if not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap >= 0):
        raise fail("varlen_attention", f"softcap must be a finite number >= 0 (0: off), got {softcap!r}")
    total_q, default_scale = q.shape[0], 1.0 / math.sqrt(q.shape[2])
    alibi = alibi_kind("varlen_attention", slopes, q.device, q.shape[1], cu_q.shape[0] - 1)
    if not total_q or not max_q:
        return lambda q, *_: _new_output(q)[:total_q]
    if not k.shape[0] or not max_k:
        return lambda q, *_: _new_output(q)[:total_q].zero_()
    kernel = _kernel(dtype, spec, float(softcap), q.shape[2], mma, config, backend, alibi)
    m_c, n_c = _carrier(max_q, q.device), _carrier(max_k, q.device)
    heads = q.shape[1]
    per_head = () if alibi is None else (slopes.view(-1, heads),)
    launch = kernel.prepare(q, k, v, *per_head, cu_q, cu_k, m_c, n_c, _new_output(q), default_scale, total_q)

    def run(q, k, v, cu_q, cu_k, slopes, scale):
        o = _new_output(q)
        sc = default_scale if scale is None else float(scale)
        if alibi is None:
            launch(q, k, v, cu_q, cu_k, m_c, n_c, o, sc, total_q)
        else:
            launch(q, k, v, slopes, cu_q, cu_k, m_c, n_c, o, sc, total_q)
        return o[:total_q]

    return run
