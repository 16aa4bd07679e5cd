"""Split-KV decode attention (flash-decoding) over a dense KV cache, and the combine of its splits.

``out[b, i, h] = softmax(q[b, i, h] · K_bᵀ · scale) V_b`` over the first ``seq_lens[b]`` positions of
sequence ``b``; the ``q_len`` new tokens are its last ``q_len`` positions (their K/V already cached):
query ``i`` sees positions ``<= seq_len - q_len + i``.

Two launches:
- ``decode_split``: one workgroup per (row tile, split, kv head, sequence).  The rows M of the query
  tile are the (query, head-of-the-group) pairs ``m = i * G + g`` (the G query heads of a kv head share
  every K/V tile: K/V are read once per group).  Split ``s`` walks keys ``[s * CHUNK, (s + 1) * CHUNK)``
  (``CHUNK`` = the cache length over the splits, rounded up to BLOCK_N) with the online softmax of
  kernels/attention.py, and stores its unnormalised accumulator, its row maxima (in log2 units) and its
  row sums (f32).  Split and kv head share grid axis 1 (``Y = SP * KVH``: three grid axes, four batch
  coordinates).  A split with no visible key for a row leaves ``m = -inf``, ``l = 0``, ``acc = 0``
  (the running maximum is replaced by 0 in the exponents while it is -inf: no ``-inf - -inf``).
- ``decode_combine``: per (sequence, query, head tile), ``out = Σ_s 2^(m_s - M) acc_s / Σ_s 2^(m_s - M) l_s``
  with ``M = max_s m_s`` (finite: every query sees position 0); empty splits weigh exactly 0.

One split (``DIRECT_SINGLE_SPLIT``): one launch, ``decode_direct``, the split kernel writing ``acc / l``
into the output itself (no partials, no combine; bit-equal to the two launches).

The paged kernel (``kernels/paged_attention.py``) writes the same partials and shares the combine.  The
entry points decide once per tensor keys and options (``plan_split_kv``); a repeated call runs
``decode_host.SplitKV`` (one lookup, cached partials, prepared launches).
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import sympy

import wavec as wc
from wavec import Memory, Register, f32
from wavec.kernels.decode_host import SplitKV
from wavec.kernels.fastpath import Decisions, tensor_key
from wavec.knobs import code_key
from wavec.tuning.plan import MMA_SYNC_FOR_DTYPE, WGMMA_FOR_DTYPE

from . import decode_variants as variants

B, KVH, H, QL, M, N, D = wc.sym.B, wc.sym.KVH, wc.sym.H, wc.sym.QL, wc.sym.M, wc.sym.N, wc.sym.D
SP, Y, R = wc.sym.SP, wc.sym.Y, wc.sym.R  # splits of the keys; grid axis 1 = (split, kv head); QL * H
BLOCK_M, BLOCK_N, NUM_STAGES = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.NUM_STAGES
BLOCK_R, BLOCK_D = wc.sym.BLOCK_R, wc.sym.BLOCK_D
LOG2E = 1.0 / math.log(2.0)
NEG_INF = float("-inf")
HEAD_DIMS = (64, 128)
MAX_Q_LEN = 16
TORCH_DTYPES = ("float16", "bfloat16")
# (rows of the query tile = q_len * G, head dim) -> (BLOCK_N, waves); every wave holds 16 rows: two waves
# while the rows fit 32 (more threads to issue the K/V copies than one wave; the padded rows cost only mma
# work, which decode has to spare), four beyond (more rows: further row tiles).  bf16, ptxas 13 for sm_80 /
# sm_90a: 236-238, 255, 230-232 and 236-252 registers, no spills; one wave with BLOCK_N 64 spilled 1.8 KB
# at d128 (the cp.async addresses of 32 threads), four waves with BLOCK_N 64 at d128 0.9 KB.
CONFIGS = {(32, 64): (64, 2), (32, 128): (32, 2), (64, 64): (64, 4), (64, 128): (32, 4)}
# The split rule (``num_splits_for``): enough workgroups for SPLIT_WAVES per SM, no split shorter than
# MIN_SPLIT_KEYS keys (each pays a prologue and its partials' traffic), at most MAX_SPLITS.
SPLIT_WAVES = 2
MIN_SPLIT_KEYS = 64
MAX_SPLITS = 64
# the in-kernel combine's layout (no mma anchors it): lanes along D (4 f32 each at d128: 16-byte loads of
# the partials), a wave's 16 rows and the step's splits in every lane
COMBINE_SHAPES = {SP: 1, M: 1, D: 128}
EMULATOR_SMS = 2  # the SM count the rule assumes for CPU tensors (the emulator runs workgroups one by one)
# One split: the split kernel normalises its rows into the output (``direct``): no f32 partials written
# and read back, no second launch (docs/attention.md, "One split, no combine").  False: the split kernel
# then the combine, as for several splits (to time against).
DIRECT_SINGLE_SPLIT = True


def split_index() -> sympy.Expr:
    """The split of this workgroup (grid axis 1 is ``split * KVH + kv_head``)."""
    return sympy.floor(wc.tile_start(Y) / KVH)


def kv_head_index() -> sympy.Expr:
    return sympy.Mod(wc.tile_start(Y), KVH)


def split_chunk(keys: sympy.Expr) -> sympy.Expr:
    """Keys per split: ``keys`` over SP splits, rounded up to whole BLOCK_N tiles (run-time sizes)."""
    return sympy.ceiling(keys / (SP * BLOCK_N)) * BLOCK_N


def decode_constraints(
    dtype=wc.f16, waves: int = 1, threads_per_wave: int = 32, mma_type=None, one_launch: bool = False,
    mma: str = "mma_sync", async_copy: str = "auto", min_workgroups_per_sm: int | None = None,
    intra_wg_overlap: bool = False, l2_prefetch: int | None = None,
) -> list:  # fmt: skip
    """``waves`` waves of 16 query rows (``mma_type``: mma.sync m16n8k16 for ``dtype`` by default; gfx942
    takes ``threads_per_wave=64`` and the MFMA); grid (row tiles, SP * KVH, B); K/V tiles of BLOCK_N keys
    staged NUM_STAGES deep (bound in subs) (``cp.async`` where the target has it and the addresses allow).
    ``one_launch``: the combine's loop over the splits, one a step, in ``COMBINE_SHAPES``' layout.
    ``mma="wgmma"`` (sm_90a; ``decode_variants``): waves are warpgroups of 64 rows, K/V by TMA in the
    128-byte swizzle unless ``async_copy="cp.async"``; ``min_workgroups_per_sm``, ``intra_wg_overlap``,
    ``l2_prefetch``: ``SchedulingConstraint``'s."""
    wgmma = mma == "wgmma"
    if wgmma:
        mma_type = mma_type or WGMMA_FOR_DTYPE[dtype.name]
    combine = [wc.TilingConstraint(SP, wc.sym.BLOCK_SP)] if one_launch else []
    return [
        *combine,
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(Y, 1, 1),
        wc.WorkgroupConstraint(B, 1, 2),
        wc.WorkgroupConstraint(D, D, None),
        wc.WaveConstraint(M, BLOCK_M / waves),
        wc.TilingConstraint(N, BLOCK_N),
        wc.HardwareConstraint(
            threads_per_wave=threads_per_wave,
            mma_type=mma_type or MMA_SYNC_FOR_DTYPE[dtype.name],
            vector_shapes=dict(COMBINE_SHAPES) if one_launch else {},
        ),
        wc.SchedulingConstraint(
            num_stages=NUM_STAGES,
            operand_swizzle="auto" if wgmma else "none",
            async_copy=async_copy,
            min_workgroups_per_sm=min_workgroups_per_sm,
            intra_wg_overlap=intra_wg_overlap,
            l2_prefetch=l2_prefetch,
        ),
    ]


def online_softmax_step(qr, kt, vt, keep, c: float, dtype, state: tuple, logits=None) -> tuple:
    """One key tile of the online softmax: scores ``qr · ktᵀ`` (``logits(scores)`` when given: ALiBi's
    biased logits) where ``keep`` holds (else -inf), the new (max, sum, accumulator) from ``state``.  The
    maximum used in the exponents is 0 while a row has seen no key (a split past its sequence's end): its
    probabilities and rescale are exp2(-inf) = 0, not NaN."""
    m_i, l_i, acc = state
    s = wc.mma(qr, kt, Register[M, N, f32](0.0))
    s = wc.where(keep, s if logits is None else logits(s), NEG_INF)
    m_new = wc.maximum(m_i, wc.max(s, N))
    m_use = wc.where(m_new > NEG_INF, m_new, 0.0) * c
    p = wc.exp2(s * c - m_use[:, None])
    alpha = wc.exp2(m_i * c - m_use)
    l_new = l_i * alpha + wc.sum(p, N)
    return m_new, l_new, wc.mma(wc.cast(p, dtype), vt, acc * alpha[:, None])


def make_decode_split(
    dtype=wc.f16, group: int = 1, alibi: bool = False, one_launch: bool = False, direct: bool = False,
    **constraints: Any,
) -> wc.WaveKernel:  # fmt: skip
    """``decode_split(q, k, v, seq_lens, o_part, m_part, l_part, scale)`` for ``group`` query heads per kv
    head: q [B, QL, H, D], k/v [B, N, KVH, D], seq_lens [B] i32, o_part [B, SP, QL, H, D] f32, m_part /
    l_part [B, SP, QL, H] f32.  Compile with ``decode_subs``; ``constraints``: ``decode_constraints``'s.
    ``alibi``: an argument ``slopes`` [H] f32 after ``seq_lens`` and the bias ``-slope * (pos_q - pos_k)``.
    ``one_launch``: arguments ``counter`` [B, C] i32 and ``out`` [B, QL, H, D] after ``l_part``; the last
    split of each group combines (``split_combine.combine_last``): the whole step in one launch.
    ``direct``: one split (``split_kernel_subs`` binds SP = 1), ``out`` [B, QL, H, D] in place of the
    partials, normalised in the kernel: no combine (``write_output``)."""
    q_type = Memory[B, QL, H, D, dtype]
    kv_type = Memory[B, N, KVH, D, dtype]
    split, kv_head = split_index(), kv_head_index()
    first = split * split_chunk(N)

    def body(q, k, v, seq_lens, slopes, parts: tuple, scale) -> None:
        rows = wc.index(M)  # row m is query m // G of head kv_head * G + m % G
        q_rows = {QL: rows // group, H: rows % group + kv_head * group}
        qr = wc.read(q, mapping=q_rows)
        seq_len = wc.read(seq_lens)
        limit = wc.arange(M)[:, None] // group + (seq_len - QL)  # query i sees positions <= seq_len - QL + i
        logits, c = alibi_logits(slopes, q_rows[H], limit, scale)
        kv_map = {KVH: kv_head}
        init = [Register[M, f32](NEG_INF), Register[M, f32](0.0), Register[M, D, f32](0.0)]

        @wc.iterate(N, init_args=init, start=first, end=first + split_chunk(N))
        def loop(m_i: Register[M, f32], l_i: Register[M, f32], acc: Register[M, D, f32]):
            keep = wc.arange(N)[None, :] <= limit
            kt = wc.read(k, mapping=kv_map)
            vt = wc.permute(wc.read(v, mapping=kv_map), (D, N))
            return online_softmax_step(qr, kt, vt, keep, c, dtype, (m_i, l_i, acc), logits)

        finish_split(loop, c, parts, q_rows, group, dtype)

    params: list[tuple[str, Any]] = [("q", q_type), ("k", kv_type), ("v", kv_type), ("seq_lens", Memory[B, wc.i32])]
    params += [("slopes", Memory[H, f32])] if alibi else []
    params += [*partial_params(dtype, one_launch, direct), ("scale", wc.Scalar[f32])]
    name = ("decode_one_launch" if one_launch else "decode_direct" if direct else "decode_split") + (
        "_alibi" if alibi else ""
    )

    def run(*args) -> None:
        q, k, v, seq_lens, *rest = args
        slopes = rest.pop(0) if alibi else None
        body(q, k, v, seq_lens, slopes, tuple(rest[:-1]), rest[-1])

    return wc.wave(decode_constraints(dtype, one_launch=one_launch, **constraints))(kernel_function(name, params, run))


def partial_params(dtype, one_launch: bool, direct: bool = False) -> list:
    """The partials' arguments of a split kernel (and, in one launch, the counters and the output); for
    ``direct`` (one split, no combine) the output alone."""
    if direct:
        assert not one_launch, "direct: one split, the kernel writes the output (no counters)"
        return [("out", Memory[B, QL, H, D, dtype])]
    params: list[tuple[str, Any]] = [
        ("o_part", Memory[B, SP, QL, H, D, f32]), ("m_part", Memory[B, SP, QL, H, f32]),
        ("l_part", Memory[B, SP, QL, H, f32]),
    ]  # fmt: skip
    if one_launch:
        from .split_combine import C  # (split_combine imports this module: imported when used)

        params += [("counter", Memory[B, C, wc.i32]), ("out", Memory[B, QL, H, D, dtype])]
    return params


def finish_split(state: tuple, c, parts: tuple, q_rows: dict, group: int, dtype) -> None:
    """Store the split's partials; in one launch (``parts`` holds the counter and the output) the last
    split of the group combines them all; ``parts`` only the output (``direct``): the normalised rows."""
    if len(parts) == 1:
        write_output(state, parts[0], q_rows, dtype)
        return
    o_part, m_part, l_part, *fused = parts
    write_partials(state, c, o_part, m_part, l_part, {**q_rows, SP: split_index()})
    if fused:
        from .split_combine import combine_last

        counter, out = fused
        combine_last(o_part, m_part, l_part, counter, out, group, dtype)


def kernel_function(name: str, params: list, run) -> Any:
    """A function named ``name`` taking ``params`` (``(name, Memory[...] or wc.Scalar[...])`` pairs,
    positional) that calls ``run(*args)``: one body for a kernel's argument-list variants."""

    def fn(*args):
        return run(*args)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    fn.__signature__ = inspect.Signature([inspect.Parameter(n, kind, annotation=t) for n, t in params])  # type: ignore[attr-defined]
    fn.__annotations__ = dict(params)
    fn.__name__ = fn.__qualname__ = name
    return fn


def alibi_logits(slopes, heads, limit, scale) -> tuple:
    """(``logits``, ``c``) of a split kernel: without ``slopes`` no transform and exponents in units of
    scaled scores (``c = scale·log2 e``); with them each row's slope (at its query head ``heads``) and
    ``logits(s) = s·scale - slope·(limit - j)`` (the distance of key j from the row's own position; keys
    past it are masked), exponents in units of logits (``c = log2 e``)."""
    if slopes is None:
        return None, scale * LOG2E
    slope = wc.read(slopes, mapping={H: heads})

    def logits(s):
        distance = wc.cast(limit, f32) - wc.cast(wc.arange(N)[None, :], f32)
        return s * scale - distance * slope[:, None]

    return logits, LOG2E


def write_partials(state: tuple, c, o_part, m_part, l_part, rows: dict) -> None:
    """Store a split's accumulator, its row maxima in log2 units and its row sums."""
    m_fin, l_fin, acc = state
    wc.write(acc, o_part, mapping=rows)
    wc.write(m_fin * c, m_part, mapping=rows)
    wc.write(l_fin, l_part, mapping=rows)


def write_output(state: tuple, out, rows: dict, dtype) -> None:
    """The rows of a sequence's only split, normalised: ``acc / l`` in ``dtype`` (rows past M, never
    stored, may have seen no key: their sum taken as 1)."""
    _m, l_fin, acc = state
    total = wc.where(l_fin > 0.0, l_fin, 1.0)
    wc.write(wc.cast(acc * wc.reciprocal(total)[:, None], dtype), out, mapping=rows)


def make_decode_combine(dtype=wc.f16, waves: int = 4, threads_per_wave: int = 32) -> wc.WaveKernel:
    """``decode_combine(o_part [B, SP, R, D], m_part, l_part [B, SP, R], out [B, R, D])`` where R = QL * H
    (the split kernel's [B, SP, QL, H, ...] partials and [B, QL, H, D] output, viewed flat): grid (row
    tiles, BLOCK_D columns, sequences); each lane owns one row (32 rows per wave) and its BLOCK_D columns
    of every split, so the [SP, R] statistics need no exchange between lanes.  SP bound in subs."""
    constraints = [
        wc.WorkgroupConstraint(R, BLOCK_R, 0),
        wc.WorkgroupConstraint(D, BLOCK_D, 1),
        wc.WorkgroupConstraint(B, 1, 2),
        wc.WorkgroupConstraint(SP, SP, None),
        wc.WaveConstraint(R, BLOCK_R / waves),
        wc.HardwareConstraint(threads_per_wave=threads_per_wave, vector_shapes={SP: 1, R: threads_per_wave, D: 1}),
    ]

    @wc.wave(constraints)
    def decode_combine(
        o_part: Memory[B, SP, R, D, f32],
        m_part: Memory[B, SP, R, f32],
        l_part: Memory[B, SP, R, f32],
        out: Memory[B, R, D, dtype],
    ):
        m_s = wc.read(m_part)
        w = wc.exp2(m_s - wc.max(m_s, SP)[None, :])  # [SP, R]; empty splits (m = -inf) weigh 0
        total = wc.sum(wc.read(l_part) * w, SP)
        o = wc.sum(wc.read(o_part) * w[:, :, None], SP)
        wc.write(wc.cast(o * wc.reciprocal(total)[:, None], dtype), out)

    return decode_combine


def combine_subs(splits: int, waves: int = 4, threads_per_wave: int = 32) -> dict:
    """``subs`` of the combine for ``splits`` splits: a row per lane; each lane holds ``splits *
    BLOCK_D`` partial values, so BLOCK_D shrinks as the splits grow (at most 128 values per lane)."""
    block_d = next(d for d in (8, 4, 2, 1) if splits * d <= 128 or d == 1)
    return {SP: splits, BLOCK_R: threads_per_wave * waves, BLOCK_D: block_d}


def decode_subs(head_dim: int, group: int, block_n: int, waves: int, stages: int = 2, wave_rows: int = 16) -> dict:
    """``subs`` of a split kernel: the tile, the head dim and the derived sizes (rows ``M = QL * G``, grid
    axis 1 ``Y = SP * KVH``), so one binary serves every q_len, batch, cache length and split count.
    ``wave_rows``: query rows per wave (64 for a wgmma warpgroup)."""
    return {BLOCK_M: wave_rows * waves, BLOCK_N: block_n, D: head_dim, NUM_STAGES: stages, M: QL * group, Y: SP * KVH}


def decode_config(head_dim: int, rows: int, config: tuple | None = None, mma: str = "mma_sync") -> tuple[int, int, int]:
    """(BLOCK_N, waves, stages): ``config`` (``(BLOCK_N, waves[, stages])``) if given, else ``CONFIGS``'s
    entry for ``rows = q_len * G`` query rows, two stages (``mma="wgmma"``: ``WGMMA_CONFIG``)."""
    if config is None and mma == "wgmma":
        config = variants.WGMMA_CONFIG
    if config is None:
        config = CONFIGS[(32 if rows <= 32 else 64, 128 if head_dim > 64 else 64)]
    block_n, waves, *stages = config
    return block_n, waves, stages[0] if stages else 2


def num_splits_for(batch: int, kv_heads: int, row_tiles: int, keys: int, sms: int, per_sm: int | None = None) -> int:
    """The split rule: ``SPLIT_WAVES * sms`` workgroups over the ``batch * kv_heads * row_tiles`` that need
    no split (rounded up), or with ``per_sm`` (a variant's ``split_per_sm``) at most ``per_sm * sms``
    (rounded down); no split shorter than ``MIN_SPLIT_KEYS`` keys and at most ``MAX_SPLITS`` (at least 1)."""
    units = batch * kv_heads * row_tiles
    want = -(-SPLIT_WAVES * sms // units) if per_sm is None else per_sm * sms // units
    return max(1, min(want, keys // MIN_SPLIT_KEYS, MAX_SPLITS))


def sm_count(t: Any) -> int:
    """Streaming multiprocessors of ``t``'s GPU, ``EMULATOR_SMS`` for CPU tensors."""
    import torch

    if not t.is_cuda:
        return EMULATOR_SMS
    return int(torch.cuda.get_device_properties(t.device).multi_processor_count)


_COMPILED: dict = {}


def compiled(key: tuple, build) -> Any:
    """``build()`` compiled once per ``key`` (a kernel's configuration and backend) and ``code_key()``."""
    key = (*key, code_key())
    kernel = _COMPILED.get(key)
    if kernel is None:
        kernel = _COMPILED[key] = build()
    return kernel


def combine_kernel(dtype, splits: int, backend: str | None) -> Any:
    return compiled(
        ("combine", dtype.name, splits, backend),
        lambda: wc.compile(make_decode_combine(dtype), combine_subs(splits), backend=backend),
    )


def plan_split_kv(
    fn: str, q: Any, kv_heads: int, keys: int, options: tuple, build_split, check=None, lengths=None,
    variant: variants.Variant = variants.DEFAULT,
) -> SplitKV:  # fmt: skip
    """The tile (``decode_config``), the splits (``num_splits`` or ``num_splits_for``), the split kernel
    (``build_split(group, block_n, waves, stages, one_launch, direct)``, compiled) and, in two launches,
    the combine of a validated call; in one launch the counters (``split_combine.Counters``); with one
    split (``DIRECT_SINGLE_SPLIT``, two launches asked) neither: the kernel writes the output.  ``options`` =
    (num_splits, config, one_launch); ``check(head)``: the per-call checks, kept where the split kernel
    runs on the emulator or under ``WAVEC_CHECK_BOUNDS=1`` (``per_call_checks``); ``lengths``: the seq_lens
    tensor of a ``seq_lens=None`` call; ``variant``: the rows of a wave (a wgmma warpgroup's 64)."""
    num_splits, config, one_launch = options
    batch, q_len, heads, head_dim = q.shape
    group = heads // kv_heads
    block_n, waves, stages = decode_config(head_dim, q_len * group, config, variant.mma or "mma_sync")
    if num_splits is not None and not (isinstance(num_splits, int) and 1 <= num_splits <= MAX_SPLITS):
        raise fail(fn, f"num_splits must be an int in 1..{MAX_SPLITS} or None, got {num_splits!r}")
    if not isinstance(one_launch, bool):
        raise fail(fn, f"one_launch must be True or False, got {one_launch!r}")
    row_tiles = -(-q_len * group // (variant.wave_rows * waves))
    splits = num_splits or num_splits_for(batch, kv_heads, row_tiles, keys, sm_count(q), variant.split_per_sm)
    direct = splits == 1 and not one_launch and DIRECT_SINGLE_SPLIT
    split = build_split(group, block_n, waves, stages, one_launch, direct)
    check = check if per_call_checks(split) else None
    run = {"check": check, "lengths": lengths, "scale": 1.0 / math.sqrt(head_dim)}
    if direct:
        return SplitKV(split, None, q, splits, None, **run)
    if one_launch:
        from .split_combine import Counters

        return SplitKV(split, None, q, splits, Counters((batch, row_tiles * kv_heads), q.device), **run)
    return SplitKV(split, combine_kernel(torch_to_wavec(fn, q.dtype), splits, split.backend), q, splits, None, **run)


def per_call_checks(kernel: Any) -> bool:
    """Whether a call checks the lengths (and block ids) it passes ``kernel``: always on the emulator (its
    padded buffers would not catch an index out of range); on a GPU only when ``WAVEC_CHECK_BOUNDS=1``
    (read when the call shape is planned): the check reads the lengths back, a synchronisation, which the
    launches of such a kernel pay anyway."""
    from wavec.knobs import knobs

    return kernel.backend == "emulator" or bool(knobs.check_bounds)


def split_kernel_subs(subs: dict, one_launch: bool, direct: bool = False) -> dict:
    """A split kernel's ``subs`` with, in one launch, the combine's splits per step; ``direct``: one split
    (SP = 1, grid axis 1 the kv heads), no partial carrying SP."""
    if direct:
        return {**subs, SP: 1, Y: KVH}
    if not one_launch:
        return subs
    from .split_combine import BLOCK_SP, SPLITS_PER_STEP

    return {**subs, BLOCK_SP: SPLITS_PER_STEP}


def fail(fn: str, message: str) -> wc.WavecError:
    return wc.WavecError(message=f"{fn}: {message}")


def torch_to_wavec(fn: str, torch_dtype: Any) -> Any:
    name = str(torch_dtype).removeprefix("torch.")
    if name not in TORCH_DTYPES:
        raise fail(fn, f"q must be float16 or bfloat16, got {name}")
    return wc.f16 if name == "float16" else wc.bf16


def check_query_and_cache(fn: str, q: Any, k: Any, v: Any, cache_shape: str) -> Any:
    """Shape, dtype and device checks shared by the dense and the paged kernels; returns q's wavec dtype.
    ``cache_shape`` names the cache dims in messages."""
    dtype = torch_to_wavec(fn, q.dtype)
    if q.dim() != 4:
        raise fail(fn, f"q must be 4-D [batch, q_len, heads, head_dim], got shape {list(q.shape)}")
    names = ("k_cache", "v_cache") if fn == "paged_attention" else ("k", "v")
    for name, t in zip(names, (k, v)):
        if t.dim() != 4 or t.dtype != q.dtype:
            raise fail(fn, f"{name} must be a 4-D {q.dtype} tensor {cache_shape}, got {t.dim()}-D {t.dtype}")
        if t.device != q.device:
            raise fail(fn, f"{name} is on {t.device} but q is on {q.device}")
    if tuple(v.shape) != tuple(k.shape):
        raise fail(fn, f"{names[1]} has shape {list(v.shape)} but {names[0]} {list(k.shape)}")
    _batch, q_len, heads, head_dim = q.shape
    kv_heads, cache_dim = k.shape[2], k.shape[3]
    if head_dim not in HEAD_DIMS or cache_dim != head_dim:
        raise fail(fn, f"head_dim must be one of {HEAD_DIMS} in q and the caches, got q {head_dim}, cache {cache_dim}")
    if not 1 <= q_len <= MAX_Q_LEN:
        raise fail(fn, f"q_len (q.shape[1]) must be 1..{MAX_Q_LEN}, got {q_len}")
    if heads % kv_heads:
        raise fail(
            fn, f"{heads} query heads (q.shape[2]) are not a multiple of {kv_heads} kv heads ({names[0]}.shape[2])"
        )
    return dtype


def check_slopes(fn: str, slopes: Any, q: Any) -> bool:
    """Whether ALiBi ``slopes`` ([Hq] f32) are given (``attention.alibi_kind``'s checks)."""
    from wavec.kernels.attention import alibi_kind

    return alibi_kind(fn, slopes, q.device, q.shape[2]) is not None


def check_index_tensor(fn: str, name: str, t: Any, q: Any, dims: int) -> None:
    import torch

    if t.dtype != torch.int32:
        raise fail(fn, f"{name} must be int32, got {str(t.dtype).removeprefix('torch.')}")
    shape = "[batch]" if dims == 1 else "[batch, max_blocks]"
    if t.dim() != dims or t.shape[0] != q.shape[0]:
        raise fail(fn, f"{name} must be {shape} with batch = {q.shape[0]}, got shape {list(t.shape)}")
    if t.device != q.device:
        raise fail(fn, f"{name} is on {t.device} but q is on {q.device}")


def check_lengths(fn: str, q: Any, seq_lens: Any, capacity: int, what: str) -> None:
    """``q_len <= seq_lens[b] <= capacity`` for every b (a read of the lengths: on a GPU a synchronisation;
    ``per_call_checks`` says where it runs)."""
    q_len = q.shape[1]
    bad = (seq_lens < q_len) | (seq_lens > capacity)
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise fail(fn, f"seq_lens[{b}] = {int(seq_lens[b])} must be in [q_len, {what}] = [{q_len}, {capacity}]")


# (tensor keys, options) -> SplitKV: what decode_attention decided for them (a repeated call: one lookup)
_DISPATCH = Decisions("decode_attention")


def decode_attention(
    q,
    k,
    v,
    *,
    seq_lens=None,
    scale: float | None = None,
    num_splits: int | None = None,
    backend: str | None = None,
    config: tuple | None = None,
    alibi_slopes=None,
    one_launch: bool = False,
    mma: str | None = None,
    async_copy: str = "auto",
    launch_bound: int | None = None,
    intra_wg_overlap: bool = False,
    l2_prefetch: int | None = None,
):
    """Decode attention over a dense KV cache (flash-decoding); returns a new tensor shaped like q.

    q [B, q_len, Hq, D] (f16 or bf16; q_len 1..16), k / v [B, S_max, Hkv, D] (BSHD; Hq a multiple of Hkv;
    D 64 or 128), ``seq_lens`` [B] int32: each sequence's length including its q_len new tokens (whose K/V
    are already in the cache); None: every sequence is S_max long.  Query i attends to positions
    ``<= seq_len - q_len + i``.  Cache rows past a sequence's length are masked but read: they must be
    finite (any value; a zeroed or reused cache is).  f32 softmax and accumulation; ``scale`` defaults to
    1/sqrt(D).  ``num_splits``: splits of the keys (default ``num_splits_for``'s rule); ``config =
    (BLOCK_N, waves[, stages])`` overrides ``decode_config``.  ``alibi_slopes`` [Hq] f32: the bias
    ``-slope * (pos_q - pos_k)`` on the scaled scores.  Tensors of any strides on one device (a
    transformers cache [B, H, S, D] transposed is a view: read in place; CPU tensors run on the emulator).
    Lengths outside [q_len, S_max] are a ``WavecError`` on the emulator and, on a GPU, under
    ``WAVEC_CHECK_BOUNDS=1``.  ``one_launch``: the last split of each group combines, in the split
    kernel's launch (``split_combine``); False (the default until it is timed on a GPU: it spills where the
    two-launch kernels do not, docs/attention.md): the split kernel, then ``decode_combine``.  Split kernel
    variants (``decode_variants``): ``mma="wgmma"`` (sm_90a: one warpgroup of 64 rows, K/V by TMA unless
    ``async_copy="cp.async"``; ``intra_wg_overlap=True``: the next tile's scores during this tile's
    softmax); ``mma=None`` (the default): wgmma where ``decode_variants.AUTO_GROUPS`` measured it faster (an
    sm_90 GPU, 32-128 KV-head groups, no ``config`` or ALiBi), else "mma_sync"; ``launch_bound=N``
    (registers for N workgroups an SM), ``l2_prefetch=64 | 128 | 256`` (the L2's fetch for a missed
    ``cp.async`` sector)."""
    opts = (num_splits, config, one_launch)
    variant = variants.Variant(mma, async_copy, launch_bound, intra_wg_overlap, l2_prefetch)
    # 2.0 and 0 hash as 2 and False do; the plan refuses them
    types = (type(num_splits), type(one_launch), type(launch_bound), type(intra_wg_overlap), type(l2_prefetch))
    key = (
        tensor_key(q),
        tensor_key(k),
        tensor_key(v),
        tensor_key(seq_lens),
        tensor_key(alibi_slopes),
        opts,
        variant,
        types,
        backend,
    )
    run: Any = _DISPATCH.get(key)  # a SplitKV
    if run is None:
        run = _DISPATCH.remember(key, _plan_dense(q, k, v, seq_lens, opts, backend, alibi_slopes, variant))
    if seq_lens is None:
        seq_lens = run.lengths
    return run((q, k, v, seq_lens) if alibi_slopes is None else (q, k, v, seq_lens, alibi_slopes), scale)


def _plan_dense(
    q, k, v, seq_lens, options: tuple, backend, slopes=None, variant: variants.Variant = variants.DEFAULT
) -> SplitKV:
    import torch

    fn = "decode_attention"
    dtype = check_query_and_cache(fn, q, k, v, "[batch, seq, kv_heads, head_dim]")
    alibi = check_slopes(fn, slopes, q)
    plain = options[1] is None and options[2] is False and slopes is None
    variant = variants.resolve(variant, q, {"k": k, "v": v}, k.shape[2], plain, backend)
    variant = variants.check_variant(fn, q, variant, options[2], backend)
    variants.check_tma_strides(fn, variant, {"k": k, "v": v})
    if k.shape[0] != q.shape[0]:
        raise fail(fn, f"k has batch {k.shape[0]} but q {q.shape[0]}")
    head_dim, s_max, lengths = q.shape[-1], k.shape[1], None
    if seq_lens is not None:
        check_index_tensor(fn, "seq_lens", seq_lens, q, 1)
    elif s_max < q.shape[1]:
        raise fail(fn, f"seq_lens is None (every sequence S_max long) but S_max = {s_max} < q_len = {q.shape[1]}")
    else:
        lengths = torch.full((q.shape[0],), s_max, dtype=torch.int32, device=q.device)

    def build(group: int, block_n: int, waves: int, stages: int, one: bool, direct: bool) -> Any:
        variants.check_stages(fn, variant, stages)
        subs = decode_subs(head_dim, group, block_n, waves, stages, variant.wave_rows)
        subs = split_kernel_subs(subs, one, direct)
        options = variant.constraint_options()
        key = ("dense", dtype.name, head_dim, group, block_n, waves, stages, backend, alibi, tuple(subs.items()))
        return compiled(
            (*key, variant),
            lambda: wc.compile(
                make_decode_split(dtype, group, alibi, one, direct, waves=waves, **options),
                subs,
                backend=backend,
                target=variant.target,
            ),
        )

    def check(head: tuple) -> None:
        check_lengths(fn, head[0], head[3], s_max, "S_max")

    # the full lengths are valid by the test above: no per-call check
    check_fn = None if lengths is not None else check
    return plan_split_kv(fn, q, k.shape[2], s_max, options, build, check_fn, lengths, variant)
