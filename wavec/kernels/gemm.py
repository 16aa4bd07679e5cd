"""GEMM ``C = A @ B.T`` (A [M, K], B [N, K]) on the matrix units: f16/bf16 in, f32 accumulation, C in f32 or
the input dtype; int8 in, exact i32 out; f32 in as tf32 (opt-in), f32 out.  Split-K for decode shapes
(``make_gemm_splitk``; the rule is ``tuning.plan.splitk_config``)."""

from dataclasses import replace

import sympy

import wavec as wc
from wavec import Memory, Register, f32
from wavec.frontend.dtypes import DTYPES
from wavec.kernels.fastpath import Decisions, tensor_key
from wavec.tuning.plan import DEFAULT_PLAN, GemmPlan, GemmRequest, mma_type_for, plan_matmul, schedule

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
S, P, BLOCK_P = wc.sym.S, wc.sym.P, wc.sym.BLOCK_P  # split-K: slices of K, flat M*N, reduce tile
BLOCK_M, BLOCK_N, BLOCK_K = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
NUM_STAGES, GROUP_M = wc.sym.NUM_STAGES, wc.sym.GROUP_M


def gemm_constraints(
    threads_per_wave: int = 32,
    mma_type=wc.MMAType.NV_F32_16x8x16_F16,
    waves=(2, 2),
    sched: wc.SchedulingConstraint | None = None,
) -> list:
    """Workgroup tile BLOCK_M x BLOCK_N, a waves[0] x waves[1] grid of waves (warpgroups for wgmma), K in
    steps of BLOCK_K, and ``sched`` (default ``schedule()``: NUM_STAGES, GROUP_M, every flag off)."""
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(N, BLOCK_N, 1),
        wc.WaveConstraint(M, BLOCK_M / waves[0]),
        wc.WaveConstraint(N, BLOCK_N / waves[1]),
        wc.TilingConstraint(K, BLOCK_K),
        wc.HardwareConstraint(threads_per_wave=threads_per_wave, mma_type=mma_type),
        sched or schedule(),
    ]


def make_gemm(
    dtype=wc.f16,
    threads_per_wave: int = 32,
    mma_type=wc.MMAType.NV_F32_16x8x16_F16,
    waves=(2, 2),
    sched: wc.SchedulingConstraint | None = None,
    out_dtype=f32,
) -> wc.WaveKernel:
    """The GEMM kernel for ``dtype`` inputs; only the HardwareConstraint (and wgmma's wave tiles) changes per
    GPU.  ``sched``: the schedule flags (default ``DEFAULT_PLAN.schedule``: fragment prefetch on, which
    wgmma tiles ignore); ``out_dtype``: C's dtype, f32 or ``dtype`` (the f32 accumulator rounded once, as
    cuBLAS does for ``torch.matmul``).  ``build_gemm`` makes one from a ``GemmPlan``."""
    sched = sched or DEFAULT_PLAN.schedule
    acc_dt = DTYPES[mma_type.spec.acc_dtype]  # i32 for 8-bit integer operands, else f32
    out_dtype = acc_dt if acc_dt != f32 else out_dtype
    if out_dtype not in (acc_dt, dtype):
        raise ValueError(f"out_dtype must be f32 or the input dtype {dtype.name}, got {out_dtype}")

    @wc.wave(gemm_constraints(threads_per_wave, mma_type, waves, sched))
    def gemm(a: Memory[M, K, dtype], b: Memory[N, K, dtype], c: Memory[M, N, out_dtype]):
        acc = Register[M, N, acc_dt](0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, acc_dt]) -> Register[M, N, acc_dt]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body if out_dtype == acc_dt else wc.cast(body, out_dtype), c)

    return gemm


def build_gemm(plan: GemmPlan, dtype=wc.f16, out_dtype=f32, target: str | None = None) -> wc.WaveKernel:
    """``make_gemm`` (``make_gemm_splitk`` when ``plan.split`` > 1) for ``plan``; compile with ``plan.subs``."""
    tpw, mma_type = mma_type_for(plan.mma, dtype, target)
    if plan.split > 1:
        return make_gemm_splitk(dtype, tpw, mma_type, plan.waves, plan.schedule)
    return make_gemm(dtype, tpw, mma_type, plan.waves, plan.schedule, out_dtype)


# ----- split-K (decode shapes) -----
# Workgroup (m, n, s) reduces the K slice [s*KS, min(K, (s+1)*KS)) of its tile into the f32 partial
# c_part[s]; KS (``split_slice``) is computed at run time (K and S are dynamic).  S is a batch dimension on
# grid axis 2; ``iterate``'s ``start=``/``end=`` bound the K loop by the slice.  Slices past K write zeros,
# the ragged last one is masked like any K tail.  ``make_splitk_reduce`` then sums the partials into C (a
# second, bandwidth-bound pass: wavec has no global atomics for an in-kernel reduction).
def split_slice(k: int, s: int, block_k: int) -> int:
    """KS, the K extent of one slice (what the kernel computes at run time): ceil(k / (s*block_k)) * block_k."""
    return -(-k // (s * block_k)) * block_k


def make_gemm_splitk(
    dtype=wc.f16,
    threads_per_wave: int = 32,
    mma_type=wc.MMAType.NV_F32_16x8x16_F16,
    waves=(1, 2),
    sched: wc.SchedulingConstraint | None = None,
) -> wc.WaveKernel:
    """``gemm_splitk(a [M, K], b [N, K], c_part [S, M, N] f32)``: c_part[s] = A[:, slice s] @ B[:, slice s].T;
    the tiles, pipeline and subs of ``make_gemm`` (``sched`` default ``schedule()``, every flag off)."""
    sched = sched or schedule()
    constraints = [wc.WorkgroupConstraint(S, 1, 2), *gemm_constraints(threads_per_wave, mma_type, waves, sched)]
    ks = sympy.ceiling(K / (S * BLOCK_K)) * BLOCK_K

    @wc.wave(constraints)
    def gemm_splitk(a: Memory[M, K, dtype], b: Memory[N, K, dtype], c_part: Memory[S, M, N, f32]):
        first = wc.tile_start(S) * ks

        @wc.iterate(K, init_args=[Register[M, N, f32](0.0)], start=first, end=first + ks)
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body, c_part)

    return gemm_splitk


def make_splitk_reduce(out_dtype=f32, threads_per_wave: int = 32, waves: int = 4, vec: int = 4) -> wc.WaveKernel:
    """``splitk_reduce(c_part [S, P] f32, c [P])``: C = the sum over S of the partials (P = M*N, flat), in
    f32 or rounded once to ``out_dtype``.  S is bound in subs (each thread sums one ``vec``-wide load per
    slice); BLOCK_P = waves * threads_per_wave * vec."""
    constraints = [
        wc.WorkgroupConstraint(P, BLOCK_P, 0),
        wc.WorkgroupConstraint(S, S, None),
        wc.WaveConstraint(P, BLOCK_P / waves),
        wc.HardwareConstraint(threads_per_wave=threads_per_wave, vector_shapes={S: 1, P: threads_per_wave * vec}),
    ]

    @wc.wave(constraints)
    def splitk_reduce(c_part: Memory[S, P, f32], c: Memory[P, out_dtype]):
        total = wc.sum(wc.read(c_part), S)
        wc.write(total if out_dtype == f32 else wc.cast(total, out_dtype), c)

    return splitk_reduce


_COMPILED: dict = {}  # (dtype, C's dtype, backend, plan) -> compiled kernel


def _cached(key, build):
    kernel = _COMPILED.get(key)
    if kernel is None:
        kernel = _COMPILED[key] = build()
    return kernel


def output_dtype(a, out_dtype) -> tuple:
    """(torch dtype, wavec dtype) of C for ``matmul(out_dtype=)``: a's dtype (None, as ``torch.matmul``)
    or torch.float32 (the f32 accumulator unrounded); int8 inputs give the i32 accumulator (as
    ``torch._int_mm``)."""
    import torch

    if a.dtype == torch.int8:
        if out_dtype not in (None, torch.int32):
            raise wc.WavecError(message=f"matmul: int8 inputs give an int32 C (out_dtype=None), got {out_dtype}")
        return torch.int32, wc.i32
    out_dtype = a.dtype if out_dtype is None else out_dtype
    if out_dtype not in (torch.float32, a.dtype):
        raise wc.WavecError(message=f"matmul: out_dtype must be torch.float32 or a's dtype {a.dtype}, got {out_dtype}")
    return out_dtype, f32 if out_dtype == torch.float32 else {torch.float16: wc.f16, torch.bfloat16: wc.bf16}[a.dtype]


def matmul(
    a,
    b,
    *,
    backend: str | None = None,
    mma: str = "auto",
    async_copy: str = "auto",
    warp_specialize: bool | None = None,
    out_dtype=None,
    split: int | str | None = None,
    persistent: bool | None = None,
    config: tuple[dict, tuple[int, int]] | None = None,
    prefetch_fragments: bool = True,
    allow_tf32: bool = False,
    cluster: tuple[int, int] = (1, 1),
):
    """``a @ b.T`` for torch tensors a [M, K], b [N, K] (f16 or bf16) into a new tensor of ``out_dtype``:
    a's dtype (None, the default, as ``torch.matmul``; rounded from the f32 accumulator) or
    ``torch.float32``.  The keyword arguments become a ``GemmRequest``, which ``plan_matmul`` maps onto a
    plan.  int8 inputs give the exact int32 product (``torch._int_mm(a, b.T)``; a sum past the int32
    range clamps on mma.sync, whose s8 form is ``.satfinite``, and wraps on wgmma).  float32 inputs need
    ``allow_tf32=True`` (torch's ``allow_tf32`` semantics): the products use the operands' 10 leading
    mantissa bits (tf32; mma.sync rounds them with ``cvt.rna``, wgmma reads them from shared memory and
    the tensor core truncates) and accumulate in f32, about 1e-3 relative error; C is float32.  Neither
    takes ``split``.

    ``mma``: "auto" (the default: "wgmma" for CUDA tensors on a compute-capability 9.0 GPU without
    ``split`` or ``config``, else "mma_sync"), "mma_sync" (sm_80+) or "wgmma" (Hopper warpgroup MMA,
    sm_90a; decode shapes, M <= 16, keep the mma.sync decode tiles).  ``async_copy``: the pipeline's
    copies ("auto": TMA for the wgmma tiles; "cp.async" to compare).  ``warp_specialize``: a TMA producer
    warpgroup (wgmma tiles only).
    ``persistent``: a persistent grid over the output tiles (TMA wgmma tiles only; with mma.sync a
    ``ConstraintError``).  None for either: ``wgmma_plan``'s choice for wgmma (with ``async_copy="auto"``
    and no ``config``), else off.  ``split``: K slices of the split-K path (mma.sync only; None or 1: no
    split; ``"auto"``: ``splitk_config``'s rule for M <= 16, opt-in: slower than no split on every
    benchmark decode shape of the H100).  ``config = (subs, waves)`` overrides the tile (benchmarks);
    ``config="rank"``: the tile the configuration ranking model picks per shape among the tuner's space
    of the MMA kind (mma.sync, or wgmma's with ``mma="wgmma"`` and M > 16; ``tuning.rank_plan``; opt-in:
    its first call compiles the space, minutes);
    ``prefetch_fragments``: mma.sync tiles' fragment prefetch (False to compare).  ``cluster``: (2, 1) or
    (1, 2) launches the wgmma tiles as 2-workgroup clusters along M or N that TMA-multicast the shared
    operand's tile (B's or A's), half from each (``mma="wgmma"`` only, no persistent grid; opt-in, default
    (1, 1): ``SchedulingConstraint.cluster``)."""
    # A repeated call is one dict lookup (docs/performance.md, "Host path"); a config's substitutions key
    # by their symbols, whose hashes sympy caches (printing them is what costs).
    try:
        cfg = config if config is None or config == "rank" else (tuple(config[0].items()), tuple(config[1]))
    except (AttributeError, TypeError, IndexError, KeyError):
        raise wc.WavecError(message=f"matmul: config must be (subs dict, waves tuple), got {config!r}") from None
    opts = (mma, async_copy, warp_specialize, persistent, split, cfg, prefetch_fragments, allow_tf32, tuple(cluster))
    key = (tensor_key(a), tensor_key(b), backend, out_dtype, opts)
    run = _DISPATCH.get(key)
    if run is None:
        req = GemmRequest(
            mma, async_copy, warp_specialize, persistent, split, cfg, bool(prefetch_fragments), (cluster[0], cluster[1])
        )
        run = _DISPATCH.remember(key, matmul_runner(a, b, backend, out_dtype, req, None, allow_tf32))
    return run(a, b)


# (tensor keys, backend, C's dtype, options) -> run(a, b): what matmul decided for them.
_DISPATCH = Decisions("matmul")


def _input_dtype(a, b, allow_tf32: bool):
    """The wavec dtype of matmul's operands, or a ``WavecError`` naming what is wrong."""
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dim() != 2 or b.dim() != 2:
        got = ", ".join(f"{t.dim()}-D" if isinstance(t, torch.Tensor) else type(t).__name__ for t in (a, b))
        raise wc.WavecError(message=f"matmul: a [M, K] and b [N, K] must be 2-D tensors, got {got}")
    dtype = {torch.float16: wc.f16, torch.bfloat16: wc.bf16, torch.int8: wc.i8, torch.float32: wc.f32}.get(a.dtype)
    if dtype is None:
        raise wc.WavecError(message=f"matmul: a must be float16, bfloat16, int8 or float32, got {a.dtype}")
    if b.dtype != a.dtype:
        raise wc.WavecError(message=f"matmul: b must have a's dtype {a.dtype}, got {b.dtype}")
    if dtype == wc.f32 and not allow_tf32:
        raise wc.WavecError(
            message="matmul: float32 inputs run on the tf32 matrix instruction (10 mantissa bits, about 1e-3 "
            "relative error): pass allow_tf32=True to accept that"
        )
    return dtype


def matmul_runner(a, b, backend, out_dtype, req: GemmRequest, out_shape: tuple | None = None, allow_tf32: bool = False):
    """``matmul``'s decision for a's and b's dtypes, shapes and device: validate, plan, compile (cached by
    the plan), prepare the launches; ``run(a, b) -> c`` of ``out_shape`` (default [M, N]; ``linear`` asks
    for x's leading dims) for later calls with the same tensor keys."""
    dtype = _input_dtype(a, b, allow_tf32)
    if dtype.bytes != 2 and req.split not in (None, 1):  # the partials are f32: an i32 sum would not be exact
        raise wc.WavecError(message=f"matmul: split-K takes float16 or bfloat16 inputs, not {a.dtype}")
    if req.mma == "auto":
        req = replace(req, mma=auto_mma(a, backend, req))
    out_dtype, out = output_dtype(a, out_dtype)
    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    if req.config == "rank":
        req = replace(req, config=_ranked(m, n, k, dtype, req))
    out_shape = (m, n) if out_shape is None else tuple(out_shape)
    unit = 16 // dtype.bytes  # elements per 16-byte run
    plan = plan_matmul(m, n, k + -k % unit if pads_k(m, n, k, unit) else k, req)
    plan = replace(plan, block_k=plan.block_k * 2 // dtype.bytes)  # K steps of as many bytes as f16's
    target = "sm_90a" if plan.mma == "wgmma" else None
    if plan.split > 1:
        return _splitk_runner(a, b, plan, dtype, out, out_dtype, backend, out_shape)
    kernel = _cached(
        (dtype.name, out.name, backend, plan),
        lambda: wc.compile(build_gemm(plan, dtype, out), plan.subs, backend=backend, target=target),
    )
    if pads_k(m, n, k, unit):
        return padded_k_runner(kernel, out_dtype, a, b, out_shape, unit)
    return output_runner(kernel, out_dtype, a, b, out_shape)


def _ranked(m: int, n: int, k: int, dtype, req: GemmRequest) -> tuple:
    """``config="rank"``'s tile as a request's config: f16/bf16, no split (what it was trained on); wgmma's
    space for wgmma above M = 16, mma.sync's otherwise (decode keeps the mma.sync tiles: ``plan_matmul``)."""
    from ..tuning.rank_plan import ranked_config

    if dtype not in (wc.f16, wc.bf16) or req.split not in (None, 1):
        raise wc.WavecError(message="matmul: config='rank' ranks the tiles of f16/bf16 GEMMs without split-K")
    subs, waves = ranked_config(m, n, k, dtype, mma="wgmma" if req.mma == "wgmma" and m > 16 else "mma_sync")
    return tuple(subs.items()), tuple(waves)


def auto_mma(a, backend: str | None, req: GemmRequest) -> str:
    """``matmul(mma="auto")``'s instruction: wgmma (0.90x cuBLAS over LLM shapes on an H100, against
    mma.sync's 0.67x: docs/performance.md) for CUDA tensors on a compute-capability 9.0 GPU, unless the
    request asks for what only mma.sync tiles have (split-K, an explicit mma.sync config)."""
    import torch

    from wavec.compiler import default_backend

    if (backend or default_backend()) != "cuda" or not a.is_cuda or req.split not in (None, 1) or req.config:
        return "mma_sync"
    return "wgmma" if torch.cuda.get_device_capability(a.device) == (9, 0) else "mma_sync"


PAD_K_MIN_MN = 512  # M and N from which an odd K is zero-padded (bytes against flops: docs/sizes_and_strides.md)


def pads_k(m: int, n: int, k: int, unit: int = 8) -> bool:
    """Whether ``matmul`` zero-pads a K that is not a multiple of ``unit`` (the elements of a 16-byte run:
    8 f16, 16 i8, 4 f32; one launch of ``kernels/pad.py`` moving about 4(M+N)K bytes for f16) rather than
    launching the narrow variant (single-element loads of A and B, synchronous copies): where the
    product's 2MNK flops dwarf the copies, M and N both at least ``PAD_K_MIN_MN``."""
    return k % unit != 0 and min(m, n) >= PAD_K_MIN_MN


def padded_k_runner(kernel, out_dtype, a, b, out_shape: tuple, unit: int = 8):
    """``run(a, b) -> c`` of ``kernel`` on A and B padded with zero columns to the next multiple of
    ``unit`` of K (zeros add nothing to the dot products): one launch of ``kernels/pad.py`` writes both
    into a reused workspace, then the wide kernel (16-byte copies) reads it."""
    import torch

    from wavec.kernels.pad import pad_runner

    pad = pad_runner(a, b, unit, kernel.backend)
    device, empty = a.device, torch.empty
    kp = a.shape[1] + -a.shape[1] % unit
    ap, bp = (empty(t.shape[0], kp, device=device, dtype=t.dtype) for t in (a, b))  # as the workspace's views
    launch = kernel.prepare(ap, bp, empty(a.shape[0], b.shape[0], device=device, dtype=out_dtype), fresh_outputs=True)

    def run(a, b):
        c = empty(out_shape, device=device, dtype=out_dtype)
        launch(*pad(a, b), c)
        return c

    return run


def output_runner(kernel, out_dtype, a, b, out_shape: tuple | None = None):
    """``run(a, b) -> c``: a new C of ``out_shape`` (default [M, N]) and ``out_dtype`` on a's device, filled
    by ``kernel(a, b, c)`` prepared for a's and b's shapes (``CompiledKernel.prepare``)."""
    import torch

    shape = (a.shape[0], b.shape[0])
    out_shape = shape if out_shape is None else out_shape
    launch = kernel.prepare(a, b, torch.empty(shape, device=a.device, dtype=out_dtype), fresh_outputs=True)
    device, empty = a.device, torch.empty

    def run(a, b):
        c = empty(out_shape, device=device, dtype=out_dtype)
        launch(a, b, c)
        return c

    return run


def _splitk_runner(a, b, plan: GemmPlan, dtype, out, out_dtype, backend, out_shape: tuple):
    """Split-K: ``gemm_splitk`` into f32 partials [S, M, N], then ``splitk_reduce`` into C."""
    import torch

    split, m, n = plan.split, a.shape[0], b.shape[0]
    part_kernel = _cached(
        ("splitk", dtype.name, backend, replace(plan, split=2)),  # S is dynamic: one kernel for every S
        lambda: wc.compile(build_gemm(plan, dtype), plan.subs, backend=backend),
    )
    vec = 4 if (m * n) % 4 == 0 else 2 if (m * n) % 2 == 0 else 1  # rows of the flat [S, M*N] view stay aligned
    reduce_kernel = _cached(
        ("splitk_reduce", out.name, split, vec, backend),
        lambda: wc.compile(make_splitk_reduce(out, vec=vec), {S: split, BLOCK_P: 4 * 32 * vec}, backend=backend),
    )
    device, empty, f32 = a.device, torch.empty, torch.float32
    c_part, c = empty(split, m, n, device=device, dtype=f32), empty(m, n, device=device, dtype=out_dtype)
    part = part_kernel.prepare(a, b, c_part, fresh_outputs=True)
    reduce = reduce_kernel.prepare(c_part.view(split, m * n), c.view(m * n), fresh_outputs=True)

    def run(a, b):
        c_part = empty(split, m, n, device=device, dtype=f32)
        part(a, b, c_part)
        c = empty(out_shape, device=device, dtype=out_dtype)
        reduce(c_part, c)
        return c

    return run
