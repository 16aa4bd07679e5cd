"""Flash attention forward, ``O = softmax(Q Kᵀ · scale) V``, with an online softmax (FlashAttention-2).

One kernel definition serves both memory layouts (BHSD, BSHD: batch and head are batch dimensions of
the workgroup), causal and not, f16 and bf16, head dims 64 and 128 and grouped-query heads (K and V read
through ``mapping``).  How the body maps onto the passes: docs/attention.md, "Module contracts".
"""

from __future__ import annotations

import math

import sympy

import wavec as wc
from wavec import Memory, Register, f32
from wavec.tuning.plan import MMA_KINDS, check_mma, mma_type_for

B, H, KVH, M, N, D = wc.sym.B, wc.sym.H, wc.sym.KVH, wc.sym.M, wc.sym.N, wc.sym.D
BLOCK_M, BLOCK_N, NUM_STAGES = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.NUM_STAGES
LOG2E = 1.0 / math.log(2.0)
NEG_INF = float("-inf")
LAYOUTS = ("bhsd", "bshd")
# Causal query tiles launched last first (SchedulingConstraint.reverse_axis0): wgmma measured faster.
HEAVY_FIRST = {"mma_sync": False, "wgmma": True}
TARGET = {"mma_sync": None, "wgmma": "sm_90a"}  # None: the visible GPU


def attention_constraints(
    dtype=wc.f16,
    waves: int = 4,
    mma: str = "mma_sync",
    heavy_first: bool = False,
    async_copy: str = "auto",
    split_epilogue: bool = False,
) -> list:
    """``waves`` warps (``mma="mma_sync"``, sm_80+) or warpgroups (``"wgmma"``, sm_90a; rows a multiple of
    64) of BLOCK_M / waves query rows each; for wgmma Q and P are register-A operands, K a K-major and V an
    MN-major shared tile (``layout_wgmma_operands``).  ``heavy_first``: query tiles launch last first
    (causal: the tiles with the most keys start first).  ``async_copy``: "auto" (``pipeline_loops`` picks
    TMA for wgmma on sm_90a, docs/attention.md, else ``cp.async``), "tma" or "cp.async".
    ``split_epilogue``: O's store tests each thread's furthest row once instead of every run."""
    if mma not in MMA_KINDS:
        raise ValueError(f"mma must be one of {MMA_KINDS}, got {mma!r}")
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(H, 1, 1),
        wc.WorkgroupConstraint(B, 1, 2),
        wc.WorkgroupConstraint(D, D, None),  # the head dim: whole in every workgroup (bound in subs)
        wc.WaveConstraint(M, BLOCK_M / waves),
        wc.TilingConstraint(N, BLOCK_N),
        wc.HardwareConstraint(threads_per_wave=32, mma_type=mma_type_for(mma, dtype)[1]),
        # mma.sync operand rows padded, not XOR-swizzled: the swizzled ldmatrix addresses cost the d64
        # kernels 28-44 spilled registers (ptxas 13.0, sm_90), the GEMM none (swizzle_shared)
        wc.SchedulingConstraint(
            num_stages=NUM_STAGES,
            reverse_axis0=heavy_first,
            async_copy=async_copy,
            split_epilogue=split_epilogue,
            operand_swizzle="auto" if mma == "wgmma" else "none",
        ),
    ]


def make_attention(
    dtype=wc.f16,
    layout: str = "bhsd",
    causal: bool = False,
    waves: int = 4,
    mma: str = "mma_sync",
    heavy_first: bool | None = None,
    async_copy: str = "auto",
    split_epilogue: bool = False,
) -> wc.WaveKernel:
    """The kernel ``attention(q, k, v, o, scale)`` for one dtype, memory layout and causality; ``mma``
    picks the matrix instruction (``attention_constraints``) and nothing else; ``heavy_first`` (default:
    ``HEAVY_FIRST`` for causal kernels) the launch order of the query tiles; ``async_copy``: how K/V tiles
    are staged ("tma": TMA on sm_90a with wgmma, else ``cp.async``); ``split_epilogue``: one bounds test
    per thread before O's stores (``attention()`` turns it on for wgmma: ``SPLIT_EPILOGUE``)."""
    heavy_first = causal and HEAVY_FIRST[mma] if heavy_first is None else heavy_first
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    (q1, q2), (k1, k2) = ((H, M), (KVH, N)) if layout == "bhsd" else ((M, H), (N, KVH))  # dims 1, 2 of Q and K
    q_type = Memory[B, q1, q2, D, dtype]
    kv_type = Memory[B, k1, k2, D, dtype]
    kv_head = {KVH: wc.tile_start(H) // (H // KVH)}  # grouped-query: q heads share a kv head
    whole = N // BLOCK_N * BLOCK_N  # keys in full tiles: no mask needed below this
    if causal:  # full tiles left of the diagonal block, then the masked tiles up to the diagonal
        split, stop = sympy.Min(wc.tile_start(M) // BLOCK_N * BLOCK_N, whole), wc.tile_start(M) + BLOCK_M
    else:  # full tiles, then the ragged last tile (none when N is a multiple of BLOCK_N)
        split, stop = whole, None

    @wc.wave(attention_constraints(dtype, waves, mma, heavy_first, async_copy, split_epilogue))
    def attention(q: q_type, k: kv_type, v: kv_type, o: q_type, scale: wc.Scalar[f32]):
        qr = wc.read(q)
        c = scale * LOG2E

        def step(m_i, l_i, acc, masked: bool):
            s = wc.mma(qr, wc.read(k, mapping=kv_head), Register[M, N, f32](0.0))
            if masked:  # masked keys contribute exp2(-inf) = 0
                cols = wc.arange(N)[None, :]
                s = wc.where(cols < N, s, NEG_INF)
                if causal:
                    s = wc.where(wc.arange(M)[:, None] >= cols, s, NEG_INF)
            m_new = wc.maximum(m_i, wc.max(s, N))  # in units of raw scores: one fma per exponent below
            p = wc.exp2(s * c - (m_new * c)[:, None])
            alpha = wc.exp2((m_i - m_new) * c)
            l_new = l_i * alpha + wc.sum(p, N)
            vt = wc.permute(wc.read(v, mapping=kv_head), (D, N))
            return m_new, l_new, wc.mma(wc.cast(p, dtype), vt, acc * alpha[:, None])

        init = [Register[M, f32](NEG_INF), Register[M, f32](0.0), Register[M, D, f32](0.0)]

        @wc.iterate(N, init_args=init, end=split)
        def full(m_i: Register[M, f32], l_i: Register[M, f32], acc: Register[M, D, f32]):
            return step(m_i, l_i, acc, masked=False)

        @wc.iterate(N, init_args=list(full), start=split, end=stop)
        def edge(m_i: Register[M, f32], l_i: Register[M, f32], acc: Register[M, D, f32]):
            return step(m_i, l_i, acc, masked=True)

        _m, l_final, acc_final = edge
        wc.write(wc.cast(acc_final * wc.reciprocal(l_final)[:, None], dtype), o)

    return attention


# Candidate tiles (BLOCK_M, BLOCK_N, waves[, cp.async stages]); why: docs/performance.md, "Why the schedule
# tables are what they are" (registers, shared memory, measured TFLOP/s).
CONFIGS = {
    128: [(128, 64, 8), (64, 64, 4), (128, 64, 8, 3)],
    64: [(128, 64, 4), (128, 128, 8), (64, 64, 2), (128, 64, 4, 3)],
}
_SHORT = {128: {32: (32, 64, 2), 64: (64, 64, 4)}, 64: {64: (64, 64, 2)}}
# Hopper wgmma (sm_90a): (BLOCK_M, BLOCK_N, warpgroups[, stages]), each warpgroup 64 query rows; K/V by TMA.
WGMMA_CONFIGS = {
    128: [(64, 64, 1), (128, 128, 2), (128, 64, 2), (128, 128, 2, 3)],
    64: [(128, 64, 2), (64, 64, 1), (128, 128, 2), (128, 128, 2, 3)],
}
_WGMMA_SHORT = {128: {64: (64, 128, 1)}, 64: {64: (64, 128, 1)}}
_WGMMA_LONG_CAUSAL = {128: (16384, (128, 128, 2))}  # causal with at least this many queries
# O's store after one bounds test per thread (SchedulingConstraint.split_epilogue): wgmma measured faster.
SPLIT_EPILOGUE = {"mma_sync": False, "wgmma": True}
DEFAULT_MMA = None  # None: "wgmma" for CUDA tensors on an sm_90 GPU (measured faster there), else "mma_sync"


def default_mma(q, backend: str | None = None) -> str:
    """``DEFAULT_MMA``, or when None: "wgmma" for CUDA tensors on an sm_90 GPU run by the CUDA backend (H100 /
    H200: ~1.0x the Triton kernel at d128 where mma.sync reaches 0.65x), else "mma_sync"."""
    if DEFAULT_MMA is not None:
        return DEFAULT_MMA
    import torch

    on_hopper = q.is_cuda and torch.cuda.get_device_capability(q.device) == (9, 0)
    return "wgmma" if on_hopper and backend in (None, "cuda") else "mma_sync"


def attention_config(
    head_dim: int, seq_q: int | None = None, config: tuple | None = None, mma: str = "mma_sync", causal: bool = False
) -> tuple[dict, int]:
    """(subs, waves) for a head dim (64 or 128): ``config = (BLOCK_M, BLOCK_N, waves[, stages])`` if given,
    else the first candidate of ``CONFIGS`` (``WGMMA_CONFIGS`` for ``mma="wgmma"``, where waves are
    warpgroups), or a smaller tile when the queries fit in it, or (wgmma, causal, many queries)
    ``_WGMMA_LONG_CAUSAL``'s."""
    if config is None:
        hd = 128 if head_dim > 64 else 64
        short_tiles, configs = (_WGMMA_SHORT, WGMMA_CONFIGS) if mma == "wgmma" else (_SHORT, CONFIGS)
        short = [c for rows, c in sorted(short_tiles[hd].items()) if seq_q is not None and seq_q <= rows]
        rows, long_causal = _WGMMA_LONG_CAUSAL.get(hd, (0, None))
        if short:
            config = short[0]
        elif mma == "wgmma" and causal and long_causal and seq_q is not None and seq_q >= rows:
            config = long_causal
        else:
            config = configs[hd][0]
    bm, bn, waves, *stages = config
    return {BLOCK_M: bm, BLOCK_N: bn, NUM_STAGES: stages[0] if stages else 2, D: head_dim}, waves


_COMPILED: dict = {}


def _kernel(dtype, layout, causal, subs: dict, waves: int, backend, mma: str = "mma_sync", async_copy: str = "auto"):
    subs_key = tuple(sorted((str(k), v) for k, v in subs.items()))
    key = (dtype.name, layout, causal, subs_key, waves, backend, mma, async_copy)
    kernel = _COMPILED.get(key)
    if kernel is None:
        split_epilogue = SPLIT_EPILOGUE[mma]
        definition = make_attention(
            dtype, layout, causal, waves, mma, async_copy=async_copy, split_epilogue=split_epilogue
        )
        kernel = _COMPILED[key] = wc.compile(definition, subs, backend=backend, target=TARGET[mma])
    return kernel


def attention(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale: float | None = None,
    layout: str = "bhsd",
    backend: str | None = None,
    config: tuple | None = None,
    mma: str | None = None,
    async_copy: str = "auto",
):
    """Scaled dot-product attention for torch tensors (f16 or bf16), like
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)``.

    ``layout="bhsd"``: q [B, H, Sq, D], k and v [B, KVH, Skv, D]; ``"bshd"``: q [B, Sq, H, D], k and v
    [B, Skv, KVH, D].  H must be a multiple of KVH (grouped-query attention); D is 64 or 128.  Causal masks
    are aligned top-left, as in torch.  ``config = (BLOCK_M, BLOCK_N, waves[, stages])`` overrides the heuristic
    (``attention_config``).  ``mma``: "mma_sync" (sm_80+) or "wgmma" (Hopper warpgroup MMA, sm_90a; waves
    are then warpgroups); default ``default_mma``: wgmma on sm_90 GPUs.  ``async_copy``: how K and V are
    staged: "auto" (``pipeline_loops`` chooses by target: TMA for wgmma on sm_90a, else ``cp.async``),
    "tma" (wgmma only) or "cp.async".  Returns a new tensor shaped like q."""
    import torch

    mma = mma or default_mma(q, backend)
    dtype = {torch.float16: wc.f16, torch.bfloat16: wc.bf16}.get(q.dtype)
    if dtype is None:
        raise wc.WavecError(message=f"attention: q must be float16 or bfloat16, got {q.dtype}")
    if layout not in LAYOUTS:
        raise wc.WavecError(message=f"attention: layout must be one of {LAYOUTS}, got {layout!r}")
    check_mma(mma, "attention: ")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise wc.WavecError(message="attention: q, k and v must be 4-D ([B, H, S, D] or [B, S, H, D])")
    head_dim = q.shape[-1]
    if head_dim not in (64, 128):
        raise wc.WavecError(message=f"attention: head dim must be 64 or 128, got {head_dim}")
    h_ax = 1 if layout == "bhsd" else 2
    s_ax = 3 - h_ax
    if q.shape[h_ax] % k.shape[h_ax]:
        raise wc.WavecError(
            message=f"attention: {q.shape[h_ax]} query heads are not a multiple of {k.shape[h_ax]} key/value heads"
        )
    subs, waves = attention_config(head_dim, q.shape[s_ax], config, mma, causal)
    kernel = _kernel(dtype, layout, causal, subs, waves, backend, mma, async_copy)
    o = torch.empty_like(q)
    kernel(q, k, v, o, 1.0 / math.sqrt(head_dim) if scale is None else float(scale))
    return o


def register_attention_op(
    dtype=wc.f16,
    layout: str = "bhsd",
    causal: bool = False,
    head_dim: int = 128,
    name: str | None = None,
    backend: str | None = None,
    mma: str | None = None,
):
    """Register the kernel for one configuration as ``torch.ops.<ns>.<op>(q, k, v, scale)`` and return that
    operator; ``mma`` defaults to "mma_sync" (the operator is compiled before any tensor is seen)."""
    mma = mma or DEFAULT_MMA or "mma_sync"
    subs, waves = attention_config(head_dim, mma=mma)
    suffix = "_wgmma" if mma == "wgmma" else ""
    name = name or f"wavec::attention_{dtype.name}_{layout}_{'causal' if causal else 'full'}_d{head_dim}{suffix}"
    kernel = _kernel(dtype, layout, causal, subs, waves, backend, mma)
    return wc.register_torch_op(kernel, name)
