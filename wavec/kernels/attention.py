"""Flash attention forward, ``O = softmax(Q Kᵀ · scale) V``, with an online softmax (FlashAttention-2).

One kernel definition serves both memory layouts (BHSD, BSHD: batch and head are batch dimensions of
the workgroup), f16 and bf16, head dims 64-256 (V's may differ), grouped-query heads (K and V read
through ``mapping``) and every mask: causal aligned top-left or bottom-right, sliding windows (``MaskSpec``)
and the logits soft-cap.  The key tiles a query tile sees in part run masked, those it sees whole run
without a mask, and the rest are skipped by the loop bounds (``_loops``).  How the body maps onto the
passes: docs/attention.md, "Module contracts".
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import sympy

import wavec as wc
from wavec import Memory, Register, f32
from wavec.errors import OptionError
from wavec.kernels.attention_tiles import (  # noqa: F401  (re-exported: the tables' users import them here)
    _SHORT,
    _WGMMA_LONG_CAUSAL,
    _WGMMA_SHORT,
    CONFIGS,
    HEAD_DIMS,
    OVERLAP_SCORES,
    OVERLAP_STAGES,
    WGMMA_CONFIGS,
    WS_CONFIG,
    attention_config,
    ws_default,
)
from wavec.kernels.fastpath import Decisions, tensor_key
from wavec.tuning.plan import MMA_KINDS, mma_type_for

B, H, KVH, M, N, D = wc.sym.B, wc.sym.H, wc.sym.KVH, wc.sym.M, wc.sym.N, wc.sym.D
DV = wc.sym.DV  # V's and O's head dim where it differs from Q's and K's (``make_attention(v_dim=True)``)
BLOCK_M, BLOCK_N, NUM_STAGES = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.NUM_STAGES
LOG2E = 1.0 / math.log(2.0)
NEG_INF = float("-inf")
LAYOUTS = ("bhsd", "bshd")
# Causal query tiles launched last first (SchedulingConstraint.reverse_axis0): wgmma measured faster.
HEAVY_FIRST = {"mma_sync": False, "wgmma": True, "mfma": False}
TARGET = {"mma_sync": None, "wgmma": "sm_90a", "mfma": "gfx942"}  # None: the visible GPU
# "mfma": AMD gfx942's 16x16x16 f16 MFMA on waves of 64 (f16 only; compiled and emulated, not tuned: no
# AMD GPU here), the layout conversion of P through shared memory (docs/attention.md)
ATTENTION_MMA = (*MMA_KINDS, "mfma")


def attention_constraints(
    dtype=wc.f16,
    waves: int = 4,
    mma: str = "mma_sync",
    heavy_first: bool = False,
    async_copy: str = "auto",
    split_epilogue: bool = False,
    intra_wg_overlap: bool = False,
    warp_specialize: bool = False,
    pingpong: bool = False,
) -> list:
    """``waves`` warps (``mma="mma_sync"``, sm_80+) or warpgroups (``"wgmma"``, sm_90a; rows a multiple of
    64) of BLOCK_M / waves query rows each; for wgmma Q and P are register-A operands, K a K-major and V an
    MN-major shared tile (``layout_wgmma_operands``).  ``heavy_first``: query tiles launch last first
    (causal: the tiles with the most keys start first).  ``async_copy``: "auto" (``pipeline_loops`` picks
    TMA for wgmma on sm_90a, docs/attention.md, else ``cp.async``), "tma" or "cp.async".
    ``split_epilogue``: O's store tests each thread's furthest row once instead of every run.
    ``intra_wg_overlap`` (wgmma, TMA, 3+ stages): the next key tile's scores are computed while this tile's
    softmax runs (``passes/hopper/intra_warpgroup_overlap.py``).  ``warp_specialize`` (wgmma, TMA): a producer
    warpgroup issues every K/V fill, the ``waves`` consumer warpgroups release stages through empty mbarriers
    (``passes/hopper/warp_specialize.py``; docs/attention.md, "Warp specialization"); ``pingpong`` (with it, 2
    warpgroups): they issue their wgmmas in turn (``passes/hopper/pingpong_warpgroups.py``)."""
    if mma not in ATTENTION_MMA:
        raise ValueError(f"mma must be one of {ATTENTION_MMA}, got {mma!r}")
    if warp_specialize and (mma != "wgmma" or intra_wg_overlap):
        why = f"mma='wgmma', got {mma!r}" if mma != "wgmma" else "the barrier-released loop of intra_wg_overlap"
        raise OptionError(option="warp_specialize", message=f"a TMA producer warpgroup needs {why}")
    if pingpong and not (warp_specialize and waves == 2):
        raise OptionError(
            option="pingpong", message=f"needs warp_specialize=True and 2 warpgroups (got {warp_specialize}, {waves})"
        )
    if mma == "mfma" and dtype != wc.f16:
        raise OptionError(option="mma", message=f"'mfma' (gfx942) takes f16 only, got {dtype.name}")
    threads, mma_type = mma_type_for(mma, dtype, TARGET[mma] if mma == "mfma" else None)
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(H, 1, 1),
        wc.WorkgroupConstraint(B, 1, 2),
        wc.WorkgroupConstraint(D, D, None),  # the head dim: whole in every workgroup (bound in subs)
        wc.WaveConstraint(M, BLOCK_M / waves),
        wc.TilingConstraint(N, BLOCK_N),
        wc.HardwareConstraint(threads_per_wave=threads, mma_type=mma_type),
        # mma.sync operand rows padded, not XOR-swizzled: the swizzled ldmatrix addresses cost the d64
        # kernels 28-44 spilled registers (ptxas 13.0, sm_90), the GEMM none (swizzle_shared)
        wc.SchedulingConstraint(
            num_stages=NUM_STAGES,
            reverse_axis0=heavy_first,
            async_copy=async_copy,
            split_epilogue=split_epilogue,
            operand_swizzle="auto" if mma == "wgmma" else "none",
            intra_wg_overlap=intra_wg_overlap,
            warp_specialize=warp_specialize,
            producer_regs=WS_PRODUCER_REGS if warp_specialize else None,
            pingpong=pingpong,
        ),
    ]


ALIGNS = ("top_left", "bottom_right")
ALIBI = (None, "h", "bh")  # ALiBi slopes: none, one per head [H], one per batch and head [B, H]
CAUSAL = (False, True, *ALIGNS)


@dataclasses.dataclass(frozen=True)
class MaskSpec:
    """The keys query ``i`` sees: ``diag(i) - left <= j <= diag(i) + right`` (None: unbounded) and ``j < N``,
    with the diagonal ``diag(i) = i`` ("top_left") or ``i + N - M`` ("bottom_right", the last query on the
    last key).  Causal is ``right = 0``; a window sets ``left`` / ``right``."""

    align: str = "top_left"
    left: int | None = None
    right: int | None = None

    @property
    def masked(self) -> bool:
        return self.left is not None or self.right is not None

    @property
    def may_see_nothing(self) -> bool:
        """Whether a query row can see no key at all (or none in the first tiles its workgroup runs): its
        running max is then -inf, so the softmax must not subtract it, and its output is 0."""
        return self.left is not None or (self.align == "bottom_right" and self.right is not None)


def mask_spec(causal: bool | str = False, window: tuple[int, int] = (-1, -1)) -> MaskSpec:
    """The ``MaskSpec`` of ``causal`` (False, True = "top_left" for the kernel; ``attention()`` accepts True
    only when the query and key lengths are equal) and a flash-attn ``window = (left, right)`` (-1: that
    side unbounded; causal makes ``right`` 0).  A window without causal alignment takes flash-attn's
    diagonal, bottom-right."""
    if not any(causal is c for c in CAUSAL[:2]) and causal not in ALIGNS:
        raise OptionError(option="causal", message=f"expected one of {CAUSAL}, got {causal!r}")
    ok = isinstance(window, (tuple, list)) and len(window) == 2
    if not ok or not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window):
        raise OptionError(
            option="window", message=f"expected (left, right), ints >= -1 (-1: unbounded), got {window!r}"
        )
    left = None if window[0] == -1 else window[0]
    right = 0 if causal is not False else None if window[1] == -1 else window[1]
    if left is None and right is None:
        return MaskSpec()
    return MaskSpec("top_left" if causal is True else causal or "bottom_right", left, right)


def _loops(spec: MaskSpec) -> list[tuple[sympy.Expr | None, sympy.Expr | None, bool]]:
    """(start, end, masked) of the loops over the key tiles, in order: the tiles a query tile sees in part
    (masked) before and after the ones every query of it sees whole (no mask).  Tiles no query sees are
    skipped (loop bounds).  ``Max(0, ...)``: a diagonal left of key 0 (bottom-right with more queries than
    keys, or a window's left end) never makes a negative bound (index arithmetic is unsigned)."""
    whole = N // BLOCK_N * BLOCK_N  # keys in full tiles: no mask needed below this
    if not spec.masked:  # full tiles, then the ragged last tile (none when N is a multiple of BLOCK_N)
        return [(None, whole, False), (whole, None, True)]
    diag = wc.tile_start(M) + (N - M if spec.align == "bottom_right" else 0)  # the tile's first query's
    pos = functools.partial(sympy.Max, 0)
    full_end, stop = whole, None
    if spec.right is not None:  # causal: full tiles left of the diagonal block, masked ones up to its end
        full_end = sympy.Min(pos(diag + spec.right) // BLOCK_N * BLOCK_N, whole)
        stop = pos(diag + BLOCK_M + spec.right)
    if spec.left is None:
        return [(None, full_end, False), (full_end, stop, True)]
    lo = pos(diag - spec.left)  # the first key the tile's first query sees; its last query's, rounded up:
    full_start = sympy.ceiling(pos(diag + BLOCK_M - 1 - spec.left) / BLOCK_N) * BLOCK_N
    split = sympy.Max(full_start, full_end)
    return [(lo, full_start, True), (full_start, split, False), (split, stop, True)]


def _mask(s, spec: MaskSpec):
    """``s`` with -inf at the keys past N and those ``spec`` hides.  Bottom-right compares ``j + M`` with
    ``i + N`` (not ``j`` with ``i + N - M``): no negative intermediate."""
    cols = wc.arange(N)[None, :]
    s = wc.where(cols < N, s, NEG_INF)
    if not spec.masked:
        return s
    rows = wc.arange(M)[:, None]
    if spec.align == "bottom_right":
        rows, cols = rows + N, cols + M
    if spec.right is not None:
        s = wc.where((rows + spec.right if spec.right else rows) >= cols, s, NEG_INF)
    if spec.left is not None:
        s = wc.where(cols + spec.left >= rows, s, NEG_INF)
    return s


def make_attention(
    dtype=wc.f16,
    layout: str = "bhsd",
    causal: bool | str = False,
    waves: int = 4,
    mma: str = "mma_sync",
    heavy_first: bool | None = None,
    async_copy: str = "auto",
    split_epilogue: bool = False,
    *,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    v_dim: bool = False,
    alibi: str | None = None,
    intra_wg_overlap: bool = False,
    warp_specialize: bool = False,
    pingpong: bool = False,
) -> wc.WaveKernel:
    """The kernel ``attention(q, k, v, o, scale)`` for one dtype, memory layout and mask (``mask_spec(causal,
    window)``); ``mma`` picks the matrix instruction (``attention_constraints``) and nothing else;
    ``heavy_first`` (default: ``HEAVY_FIRST`` for causal kernels) the launch order of the query tiles;
    ``async_copy``: how K/V tiles are staged ("tma": TMA on sm_90a with wgmma, else ``cp.async``);
    ``split_epilogue``: one bounds test per thread before O's stores (``attention()`` turns it on for
    wgmma: ``SPLIT_EPILOGUE``).  ``softcap = c > 0``: scores ``c·tanh(scale·QKᵀ / c)`` (before the mask);
    ``v_dim``: V and O have their own head dim ``DV`` (bound in subs), else D.  ``alibi``: "h" or "bh" adds
    an argument ``slopes`` ([H] or [B, H] f32) after v and the bias ``-slope * |i + N - M - j|`` to the scaled
    scores (flash-attn's ``alibi_slopes``: the bottom-right diagonal whatever the mask).  ``warp_specialize``:
    ``pingpong``: ``attention_constraints``'."""
    spec = mask_spec(causal, window)
    if alibi not in ALIBI:
        raise OptionError(option="alibi", message=f"expected one of {ALIBI}, got {alibi!r}")
    if not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap >= 0):
        raise OptionError(option="softcap", message=f"expected a finite number >= 0 (0: off), got {softcap!r}")
    heavy_first = bool(causal) and HEAVY_FIRST[mma] if heavy_first is None else heavy_first
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    (q1, q2), (k1, k2) = ((H, M), (KVH, N)) if layout == "bhsd" else ((M, H), (N, KVH))  # dims 1, 2 of Q and K
    dv = DV if v_dim else D
    flags = (split_epilogue, intra_wg_overlap, warp_specialize, pingpong)
    constraints = attention_constraints(dtype, waves, mma, heavy_first, async_copy, *flags)
    every = constraints + ([wc.WorkgroupConstraint(DV, DV, None)] if v_dim else [])
    return _entry(every, (q1, q2, k1, k2, dv), dtype, alibi, _Body(dtype, spec, softcap, alibi is not None, dv))


class _Body:
    """The flash-attention body of ``make_attention`` for one dtype, mask, soft-cap, ALiBi and V head dim:
    ``body(q, k, v, slopes, o, scale)`` traced inside a ``@wc.wave`` kernel."""

    def __init__(self, dtype, spec: MaskSpec, softcap: float, alibi: bool, dv) -> None:
        self.dtype, self.spec, self.softcap, self.alibi, self.dv = dtype, spec, softcap, alibi, dv
        self.kv_head = {KVH: wc.tile_start(H) // (H // KVH)}  # grouped-query: q heads share a kv head

    def __call__(self, q, k, v, slopes, o, scale) -> None:
        spec, dv, guard = self.spec, self.dv, self.spec.may_see_nothing
        qr = wc.read(q)
        slope = None if slopes is None else wc.read(slopes)
        softcap = self.softcap
        # exponents in units of the (capped) scores; with ALiBi in units of the biased logits
        c = LOG2E if self.alibi else softcap * LOG2E if softcap else scale * LOG2E

        def step(m_i, l_i, acc, masked: bool):
            s = wc.mma(qr, wc.read(k, mapping=self.kv_head), Register[M, N, f32](0.0))
            if softcap:
                s = wc.tanh(s * (scale * (1.0 / softcap)))
            if slope is not None:
                s = alibi_bias(s * softcap if softcap else s * scale, slope)
            if masked:  # masked keys contribute exp2(-inf) = 0
                s = _mask(s, spec)
            m_new = wc.maximum(m_i, wc.max(s, N))  # in units of raw scores: one fma per exponent below
            m_sub = wc.where(m_new > NEG_INF, m_new, 0.0) if masked and guard else m_new  # no -inf - -inf
            p = wc.exp2(s * c - (m_sub * c)[:, None])
            alpha = wc.exp2((m_i - m_sub) * c)
            l_new = l_i * alpha + wc.sum(p, N)
            vt = wc.permute(wc.read(v, mapping=self.kv_head), (dv, N))
            return m_new, l_new, wc.mma(wc.cast(p, self.dtype), vt, acc * alpha[:, None])

        carried = [Register[M, f32](NEG_INF), Register[M, f32](0.0), Register[M, dv, f32](0.0)]
        for start, end, masked in _loops(spec):
            carried = list(_loop(step, carried, start, end, masked, dv))

        _m, l_final, acc_final = carried
        # a query that sees no key has l = 0 and acc = 0: 0, not 0 / 0; any other has l >= 1 up to one
        # rounding of ex2.approx (its maximum score contributed exp2(0)), which max(l, 1) keeps
        inv = wc.reciprocal(wc.maximum(l_final, 1.0) if guard else l_final)
        wc.write(wc.cast(acc_final * inv[:, None], self.dtype), o)


def _entry(every: list, dims: tuple, dtype, alibi: str | None, body: _Body) -> wc.WaveKernel:
    """The ``@wc.wave`` kernel around ``body``: ``attention(q, k, v, o, scale)`` (``dims``: Q's dims 1 and 2,
    K's, V's head dim), with ALiBi a ``slopes`` argument ([H] or [B, H] f32) after v."""
    q1, q2, k1, k2, dv = dims
    q_type = Memory[B, q1, q2, D, dtype]
    k_type = Memory[B, k1, k2, D, dtype]
    v_type = Memory[B, k1, k2, dv, dtype]
    o_type = Memory[B, q1, q2, dv, dtype]
    if alibi is None:

        @wc.wave(every)
        def attention(q: q_type, k: k_type, v: v_type, o: o_type, scale: wc.Scalar[f32]):
            body(q, k, v, None, o, scale)

        return attention
    if alibi == "h":

        @wc.wave(every)
        def attention_alibi(q: q_type, k: k_type, v: v_type, slopes: Memory[H, f32], o: o_type, scale: wc.Scalar[f32]):
            body(q, k, v, slopes, o, scale)

        return attention_alibi

    @wc.wave(every)
    def attention_alibi_bh(
        q: q_type, k: k_type, v: v_type, slopes: Memory[B, H, f32], o: o_type, scale: wc.Scalar[f32]
    ):  # fmt: skip
        body(q, k, v, slopes, o, scale)

    return attention_alibi_bh


def alibi_bias(s, slope, len_q=M, len_k=N):
    """``s - slope * |i + len_k - len_q - j|`` over the tile (positions cast to f32 before the difference:
    index arithmetic is unsigned); the lengths are the query and key counts (varlen: one sequence's)."""
    rows = wc.cast(wc.arange(M)[:, None] + len_k, f32)
    cols = wc.cast(wc.arange(N)[None, :] + len_q, f32)
    return s - wc.abs(rows - cols) * slope


def _loop(step, carried: list, start, end, masked: bool, dv):
    """One ``iterate`` over the key tiles [start, end) running ``step`` (masked or not)."""

    @wc.iterate(N, init_args=carried, start=start, end=end)
    def loop(m_i: Register[M, f32], l_i: Register[M, f32], acc: Register[M, dv, f32]):
        return step(m_i, l_i, acc, masked=masked)

    return loop


# warp_specialize: the producer's setmaxnreg (FlashAttention-3's 24), so that 2 consumer warpgroups get 240
WS_PRODUCER_REGS = 24
# O's store after one bounds test per thread (SchedulingConstraint.split_epilogue): wgmma measured faster.
SPLIT_EPILOGUE = {"mma_sync": False, "wgmma": True, "mfma": False}
DEFAULT_MMA = None  # None: "wgmma" for CUDA tensors on an sm_90 GPU (measured faster there), else "mma_sync"


def default_mma(q, backend: str | None = None) -> str:
    """``DEFAULT_MMA``, or when None: "wgmma" for CUDA tensors on an sm_90 GPU run by the CUDA backend (H100 /
    H200: ~1.0x the Triton kernel at d128 where mma.sync reaches 0.65x), else "mma_sync"."""
    if DEFAULT_MMA is not None:
        return DEFAULT_MMA
    import torch

    on_hopper = q.is_cuda and torch.cuda.get_device_capability(q.device) == (9, 0)
    return "wgmma" if on_hopper and backend in (None, "cuda") else "mma_sync"


_COMPILED: dict = {}


def _kernel(
    dtype,
    layout,
    causal,
    subs: dict,
    waves: int,
    backend,
    mma: str = "mma_sync",
    async_copy: str = "auto",
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi: str | None = None,
    intra_wg_overlap: bool = False,
    warp_specialize: bool | str = False,
):
    subs_key = tuple(sorted((str(k), v) for k, v in subs.items()))
    spec = mask_spec(causal, window)
    flags = (softcap, alibi, intra_wg_overlap, warp_specialize)
    key: tuple = (dtype.name, layout, spec, subs_key, waves, backend, mma, async_copy, *flags)
    kernel = _COMPILED.get(key)
    if kernel is None:
        options: dict[str, Any] = dict(async_copy=async_copy, split_epilogue=SPLIT_EPILOGUE[mma], window=window)
        options.update(softcap=softcap, v_dim=DV in subs, alibi=alibi, intra_wg_overlap=intra_wg_overlap)
        options.update(warp_specialize=bool(warp_specialize), pingpong=warp_specialize == "pingpong")
        definition = make_attention(dtype, layout, causal, waves, mma, **options)
        kernel = _COMPILED[key] = wc.compile(definition, subs, backend=backend, target=TARGET[mma])
    return kernel


def _check_inputs(q, k, v, layout: str, causal, softcap) -> None:
    """A ``WavecError`` naming the argument for what ``attention()`` cannot run."""
    if layout not in LAYOUTS:
        raise OptionError(option="layout", message=f"expected one of {LAYOUTS}, got {layout!r}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise wc.WavecError(message="attention: q, k and v must be 4-D ([B, H, S, D] or [B, S, H, D])")
    for name, x in (("q", q), ("v", v)):
        if x.shape[-1] not in HEAD_DIMS:
            raise OptionError(
                option=f"attention: {name}", message=f"head dim must be one of {HEAD_DIMS}, got {x.shape[-1]}"
            )
    if k.shape[-1] != q.shape[-1]:
        raise OptionError(option="attention: k", message=f"head dim {k.shape[-1]} differs from q's {q.shape[-1]}")
    h_ax = 1 if layout == "bhsd" else 2
    if q.shape[h_ax] % k.shape[h_ax]:
        raise wc.WavecError(
            message=f"attention: {q.shape[h_ax]} query heads are not a multiple of {k.shape[h_ax]} key/value heads"
        )
    sq, skv = q.shape[3 - h_ax], k.shape[3 - h_ax]
    if causal is True and sq != skv:
        raise OptionError(
            option="attention: causal",
            message=f"True is ambiguous with {sq} queries and {skv} keys: pass causal='bottom_right' (query i "
            f"sees keys <= i + {skv - sq}, flash-attn >= 2.1, a chunk of queries at the end of a KV cache) or "
            "causal='top_left' (keys <= i, torch's is_causal)",
        )
    if not (isinstance(softcap, (int, float)) and math.isfinite(softcap) and softcap >= 0):
        raise OptionError(
            option="attention: softcap", message=f"expected a finite number >= 0 (0: off), got {softcap!r}"
        )


def attention(
    q,
    k,
    v,
    *,
    causal: bool | str = False,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    scale: float | None = None,
    layout: str = "bhsd",
    backend: str | None = None,
    config: tuple | None = None,
    mma: str | None = None,
    async_copy: str = "auto",
    alibi_slopes=None,
    intra_wg_overlap: bool = False,
    warp_specialize: bool | str | None = None,
):
    """Scaled dot-product attention for torch tensors (f16 or bf16), like
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)`` and
    ``flash_attn_func(q, k, v, causal=, window_size=window, softcap=)``.

    ``layout="bhsd"``: q [B, H, Sq, D], k [B, KVH, Skv, D], v [B, KVH, Skv, Dv]; ``"bshd"``: q [B, Sq, H, D],
    k [B, Skv, KVH, D], v [B, Skv, KVH, Dv]; the output is [..., Dv].  H must be a multiple of KVH
    (grouped-query attention); D and Dv are in ``HEAD_DIMS`` (64, 80, 96, 128, 192, 256).

    ``causal``: False; "top_left" (query i sees keys j <= i, torch's ``is_causal``); "bottom_right" (j <= i +
    Skv - Sq: the last query sees the last key, flash-attn >= 2.1; queries left of key 0 see nothing);
    True only where Sq == Skv (the two agree), else an ``OptionError`` asking for one of them.
    ``window = (left, right)``: query i sees keys from ``diag(i) - left`` to ``diag(i) + right`` (-1:
    unbounded), ``diag(i)`` the causal alignment's diagonal, bottom-right when not causal (flash-attn's
    ``window_size``); causal makes ``right`` 0.  ``softcap = c > 0``: scores ``c·tanh(scale·q·k / c)``
    before the mask (Gemma 2, flash-attn's ``softcap``).  A query row that sees no key outputs 0.
    ``alibi_slopes``: f32 [H] or [B, H] (flash-attn's): the bias ``-slope * |i + Skv - Sq - j|`` added to
    the scaled (and capped) scores.

    ``scale``: default ``1/sqrt(D)``.  ``config = (BLOCK_M, BLOCK_N, waves[, stages])`` overrides the
    heuristic (``attention_config``).  ``mma``: "mma_sync" (sm_80+) or "wgmma" (Hopper warpgroup MMA,
    sm_90a; waves are then warpgroups); default ``default_mma``: wgmma on sm_90 GPUs.  ``async_copy``: how K
    and V are staged: "auto" (``pipeline_loops`` chooses by target: TMA for wgmma on sm_90a, else
    ``cp.async``), "tma" (wgmma only) or "cp.async".  ``intra_wg_overlap`` (wgmma, TMA; off until measured):
    the next key tile's Q Kᵀ runs during this tile's softmax (docs/attention.md).  ``warp_specialize`` (wgmma,
    TMA): True: a producer warpgroup issues the K/V fills (default tile ``WS_CONFIG``); ``"pingpong"``: that,
    and the two consumer warpgroups issue their wgmmas in turn; None (default): True where
    ``attention_tiles.ws_default`` says it was measured faster (d128 from 2048 queries, causal from 4096).
    Returns a new tensor."""
    opts = (causal, window, softcap, layout, backend, config, mma, async_copy, intra_wg_overlap, warp_specialize)
    key = (tensor_key(q), tensor_key(k), tensor_key(v), tensor_key(alibi_slopes), opts)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _attention_runner(q, k, v, alibi_slopes, *opts))
    return run(q, k, v, alibi_slopes, scale)


_DECIDED = Decisions("attention")  # (tensor keys, options) -> run(q, k, v, alibi_slopes, scale)


def _attention_runner(q, k, v, slopes, causal, window, softcap, layout, backend, config, mma, async_copy, overlap, ws):
    """Validate a call, choose and compile its kernel and prepare the launch: ``run(q, k, v, scale)``."""
    import torch

    mma = mma or default_mma(q, backend)
    dtype = {torch.float16: wc.f16, torch.bfloat16: wc.bf16}.get(getattr(q, "dtype", None))
    if dtype is None:
        raise wc.WavecError(message=f"attention: q must be float16 or bfloat16, got {getattr(q, 'dtype', q)!r}")
    if mma not in ATTENTION_MMA:
        raise OptionError(option="attention: mma", message=f"expected one of {ATTENTION_MMA}, got {mma!r}")
    _check_inputs(q, k, v, layout, causal, softcap)
    mask_spec(causal, window)  # an OptionError naming causal or window
    s_ax = 2 if layout == "bhsd" else 1
    if causal and q.shape[s_ax] == k.shape[s_ax]:  # the alignments agree: the top-left kernel (no guards)
        causal = "top_left"
    head_dim, v_head_dim = q.shape[-1], v.shape[-1]
    if ws is None:
        plain = window == (-1, -1) and not softcap and slopes is None and async_copy == "auto"
        plain = plain and config is None and not overlap and causal in (False, "top_left")
        ws = ws_default(head_dim, v_head_dim, q.shape[s_ax], causal, mma, plain)
    if not any(ws is x for x in (False, True)) and ws != "pingpong":
        why = f"expected None, False, True or 'pingpong', got {ws!r}"
        raise OptionError(option="attention: warp_specialize", message=why)
    for name, flag in (("intra_wg_overlap", overlap), ("warp_specialize", ws)):
        if flag and mma != "wgmma":
            raise OptionError(option=f"attention: {name}", message=f"needs mma='wgmma', got {mma!r}")
    subs, waves = attention_config(head_dim, q.shape[s_ax], config, mma, causal, v_head_dim, overlap, ws)
    alibi = alibi_kind("attention", slopes, q.device, q.shape[1 if layout == "bhsd" else 2], q.shape[0])
    win = (window[0], window[1])
    flags = (win, float(softcap), alibi, overlap, ws)
    kernel = _kernel(dtype, layout, causal, subs, waves, backend, mma, async_copy, *flags)
    shape, tdtype, device, empty = (*q.shape[:-1], v_head_dim), q.dtype, q.device, torch.empty
    default_scale = 1.0 / math.sqrt(head_dim)
    head = (q, k, v) if alibi is None else (q, k, v, slopes)
    launch = kernel.prepare(*head, empty(shape, dtype=tdtype, device=device), default_scale, fresh_outputs=True)
    if alibi is None:

        def run(q, k, v, slopes, scale):
            o = empty(shape, dtype=tdtype, device=device)
            launch(q, k, v, o, default_scale if scale is None else float(scale))
            return o

        return run

    def run_alibi(q, k, v, slopes, scale):
        o = empty(shape, dtype=tdtype, device=device)
        launch(q, k, v, slopes, o, default_scale if scale is None else float(scale))
        return o

    return run_alibi


def alibi_kind(fn: str, slopes, device, heads: int, batch: int | None = None) -> str | None:
    """The ``alibi`` of a kernel for ``alibi_slopes``: None, "h" ([heads]) or, where ``batch`` is given,
    "bh" ([batch, heads]); anything else (not a contiguous float32 tensor of those on ``device``) is a
    ``WavecError`` of ``fn`` naming ``alibi_slopes``."""
    import torch

    if slopes is None:
        return None
    shapes = [(heads,)] + ([] if batch is None else [(batch, heads)])
    ok = isinstance(slopes, torch.Tensor) and slopes.dtype == torch.float32 and slopes.device == device
    if not ok or tuple(slopes.shape) not in shapes or not slopes.is_contiguous():
        got = f"{slopes.dtype} {list(slopes.shape)} on {slopes.device}" if isinstance(slopes, torch.Tensor) else slopes
        want = " or ".join(str(list(x)) for x in shapes)
        raise wc.WavecError(
            message=f"{fn}: alibi_slopes must be a contiguous float32 tensor {want} on {device}, got {got}"
        )
    return "h" if slopes.dim() == 1 else "bh"


def register_attention_op(
    dtype=wc.f16,
    layout: str = "bhsd",
    causal: bool | str = False,
    head_dim: int = 128,
    name: str | None = None,
    backend: str | None = None,
    mma: str | None = None,
    *,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    v_head_dim: int | None = None,
):
    """Register the kernel for one configuration as ``torch.ops.<ns>.<op>(q, k, v, scale)`` and return that
    operator; ``mma`` defaults to "mma_sync" (the operator is compiled before any tensor is seen).  The mask
    (``causal``, ``window``) and ``softcap`` are compiled in (the schema stays ``(q, k, v, scale)``);
    ``causal`` must name its alignment ("top_left" or "bottom_right"): the lengths are not known here."""
    if causal is True:
        raise OptionError(
            option="register_attention_op: causal",
            message="True is ambiguous for an operator that sees its lengths only at run time: pass "
            "'bottom_right' (flash-attn >= 2.1) or 'top_left' (torch's is_causal)",
        )
    spec = mask_spec(causal, window)
    mma = mma or DEFAULT_MMA or "mma_sync"
    subs, waves = attention_config(head_dim, mma=mma, v_head_dim=v_head_dim)
    if name is None:
        mask = spec.align if spec.masked else "full"
        mask += "" if window == (-1, -1) else f"_w{window[0]}_{window[1]}".replace("-", "m")
        mask += f"_cap{softcap:g}".replace(".", "p") if softcap else ""
        dims = f"d{head_dim}" + (f"_dv{v_head_dim}" if v_head_dim not in (None, head_dim) else "")
        name = f"wavec::attention_{dtype.name}_{layout}_{mask}_{dims}{'_wgmma' if mma == 'wgmma' else ''}"
    kernel = _kernel(dtype, layout, causal, subs, waves, backend, mma, "auto", (window[0], window[1]), float(softcap))
    return wc.register_torch_op(kernel, name)
