"""Zero-padding of K for ``matmul``'s odd-K path: A [MA, K] and B [MB, K] copied, in ONE launch, into one
workspace ``[MA + MB, KP]`` (``KP`` = K rounded up to the 16-byte run) whose rows are 16-byte aligned, so
the wide GEMM kernel (16-byte ``cp.async``, TMA) reads them; the pad columns are zeros.

A row of odd K starts at any byte within 16 (pitch ``K * es`` bytes), so a 16-byte load of it is
impossible, and the DSL has no register permute to shift a 16-byte chunk by a per-row amount.  The kernel
moves *words* instead: each operand's buffer is bound as a flat array of integer words (``W``: 8 bytes
where the storage allows; 4, 2 or 1 otherwise, ``word_bytes``), and output word ``w`` of a row whose first
byte lies ``sh`` bits into word ``w0`` is the funnel shift of input words ``w0 + w`` and ``w0 + w + 1``:
``(lo >> sh) & low_mask | hi << (bits - sh)`` (``>>`` is arithmetic on signed words: the mask clears the
sign fill).  Each thread writes 16-byte chunks (``T`` words, ``16 // W`` per chunk) of its row with one
aligned 16-byte store; its loads are single words (8 bytes: the ``T + 1`` words its chunk spans, the last
also the next lane's first, an L1 hit), so DRAM sees one read of each operand and one write of the
workspace.  Bytes past ``K * es`` (the pad, and anything the last words read past the row) are masked
to zero.  Where the word is the element (``W == es``: a storage that ends off every wider word) no shift
is needed.

One launch serves both operands: one workgroup per row and column tile, workgroups of rows below ``ma``
take A (a workgroup-uniform ``wc.conditional``), the others B at row ``m - ma``.

The workspace (``pad_runner``) is allocated once per decision and CUDA stream and reused: a later call
overwrites it only in stream order, after the GEMM that read it; a call on another stream takes its own;
a call during a CUDA graph capture takes a fresh one from the capture's private pool (the graph keeps it;
replays of two graphs never share one, nor a replay and an eager call).  Rule: a workspace is rewritten
only by a later launch on the stream that last used it, so stream order protects its reader.

Requires (``pad_args``): each operand's buffer bound from the 16-byte boundary at or before its first
element to the word holding its last element, inside its storage; ``shift`` (bytes from that address to
the row-0 start), ``pitch`` (bytes between rows), ``last`` (the buffer's last word index), ``kbytes``
(``K * es``); byte offsets below 2**31.  Guarantees: workspace row ``m`` holds row ``m`` of A (row
``m - ma`` of B) in its first ``K`` elements and zeros after; nothing is read outside the bound buffers
(indices clamp to ``last``), nothing written outside the workspace.
"""

from __future__ import annotations

from typing import Any

import wavec as wc
from wavec import Memory
from wavec.frontend import dtypes as dt
from wavec.knobs import code_key

M, J, T, FA, FB = wc.sym.M, wc.sym.J, wc.sym.T, wc.sym.FA, wc.sym.FB
WORDS = {8: dt.i64, 4: dt.i32, 2: dt.i16, 1: dt.i8}
CHUNKS_PER_LANE = 4  # 16-byte chunks per lane and wave: 12 8-byte loads in flight per thread


def pad_constraints(block_j: int, waves: int, t: int, tpw: int = 32, chunked: bool = True) -> list:
    """One row per workgroup (so the A/B choice is uniform), ``block_j`` chunks of it over ``waves``;
    ``chunked``: each lane holds whole 16-byte chunks (16-byte stores), else consecutive lanes consecutive
    words (8-byte stores, each load instruction one contiguous run: half the L1 sectors; benchmarked)."""
    split = [wc.WaveConstraint(J, block_j // waves)] if waves > 1 else []
    shapes = {M: 1, J: tpw, T: t} if chunked else {M: 1, J: tpw // t, T: t}  # (a wave's words: one a lane)
    return [
        wc.WorkgroupConstraint(M, 1, 0),
        wc.WaveConstraint(M, 1),
        wc.WorkgroupConstraint(J, block_j, 1),
        *split,
        wc.WorkgroupConstraint(T, t, None),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes=shapes, per_thread=(T,) if chunked else ()),
    ]


def _funnel(lo, hi, sh, word):
    """The word starting ``sh`` bits (rank-0, ``< bits``) into ``lo``, continuing into ``hi``."""
    bits = word.bytes * 8
    up = wc.cast(wc.minimum(bits - sh, bits - 1), word)  # clamped: sh == 0 takes lo itself
    return wc.where(sh == 0, lo, ((lo >> wc.cast(sh, word)) & ((1 << up) - 1)) | (hi << up))


def _masked(v, valid, word):
    """``v`` with its bytes from ``valid`` on zeroed (``valid`` <= 0: all; >= the word: none)."""
    keep = wc.cast(wc.clip(valid, 0, word.bytes - 1) * 8, word)
    return wc.where(valid >= word.bytes, v, v & ((1 << keep) - 1))


def _padded_row(x, dim, start, last, kbytes, word, es: int, chunked: bool):
    """The workspace words [J, T] of the row whose first element lies ``start`` bytes into ``x`` (words).
    Chunked lanes read their chunk's ``T + 1`` words once each (three 8-byte loads per 16-byte chunk) and
    assemble the chunk by its ``T`` coordinate (constant per register: moves); the words layout reads each
    word's two sources (one instruction, one contiguous run each)."""
    wb, t = word.bytes, 16 // word.bytes
    col = wc.index(J)[:, None] * t + wc.index(T)[None, :]  # word of the padded row
    valid = kbytes - col * wb  # bytes of this word that are the row's (<= 0: pad)
    if wb == es:  # words are elements: no shift
        return wc.where(valid > 0, wc.read(x, mapping={dim: wc.minimum(start // wb + col, last)}), 0)
    sh = (start % wb) * 8  # the row's start lies sh bits into its first word: a funnel shift of two words
    if not chunked:
        at = start // wb + col
        lo = wc.read(x, mapping={dim: wc.minimum(at, last)})
        return _masked(_funnel(lo, wc.read(x, mapping={dim: wc.minimum(at + 1, last)}), sh, word), valid, word)
    first = start // wb + wc.index(J) * t
    src = [wc.read(x, mapping={dim: wc.minimum(first + i, last)}) for i in range(t + 1)]  # each [J]
    cols = [wc.index(J) * t + i for i in range(t)]
    words = [_masked(_funnel(src[i], src[i + 1], sh, word), kbytes - cols[i] * wb, word) for i in range(t)]
    out = wc.broadcast(words[-1], (J, T))
    for i in reversed(range(t - 1)):
        out = wc.where(wc.index(T)[None, :] == i, words[i][:, None], out)
    return out


def make_pad(word: dt.DType, es: int, block_j: int, waves: int, tpw: int = 32, chunked: bool = True) -> wc.WaveKernel:
    """The pad kernel moving ``word``-sized words of rows of ``es``-byte elements."""
    t = 16 // word.bytes

    @wc.wave(pad_constraints(block_j, waves, t, tpw, chunked))
    def pad_k(
        xa: Memory[FA, word], xb: Memory[FB, word], out: Memory[M, J, T, word], ma: wc.Scalar[wc.i32],
        kbytes: wc.Scalar[wc.i32], shift_a: wc.Scalar[wc.i32], pitch_a: wc.Scalar[wc.i32],
        last_a: wc.Scalar[wc.i32], shift_b: wc.Scalar[wc.i32], pitch_b: wc.Scalar[wc.i32],
        last_b: wc.Scalar[wc.i32],
    ):  # fmt: skip
        row = wc.sum(wc.index(M), M)  # the workgroup's row (M is one coordinate per workgroup)

        @wc.conditional(row < ma)
        def _a() -> None:
            wc.write(_padded_row(xa, FA, shift_a + row * pitch_a, last_a, kbytes, word, es, chunked), out)

        @wc.conditional(row >= ma)
        def _b() -> None:
            wc.write(_padded_row(xb, FB, shift_b + (row - ma) * pitch_b, last_b, kbytes, word, es, chunked), out)

    return pad_k


_COMPILED: dict = {}  # (word bytes, element bytes, block_j, waves, chunked, backend) -> compiled kernel


def pad_config(chunks: int) -> tuple[int, int]:
    """(``block_j``, waves) for padded rows of ``chunks`` 16-byte chunks: up to ``CHUNKS_PER_LANE`` chunks
    per lane over up to 4 waves (a 4096-element f16 row is one workgroup of 128 threads)."""
    block_j = 32
    while block_j < chunks and block_j < 4 * 32 * CHUNKS_PER_LANE:
        block_j *= 2
    return block_j, max(1, block_j // (32 * CHUNKS_PER_LANE))


def pad_kernel(word_bytes: int, es: int, chunks: int, backend: str | None, chunked: bool = True):
    """The compiled pad kernel for ``word_bytes`` words of ``es``-byte elements, rows of ``chunks``."""
    config = pad_config(chunks)
    key = (word_bytes, es, *config, chunked, backend, code_key())
    if key not in _COMPILED:
        kernel = make_pad(WORDS[word_bytes], es, *config, chunked=chunked)
        _COMPILED[key] = wc.compile(kernel, {T: 16 // word_bytes}, backend=backend)
    return _COMPILED[key]


def rows_of(x: Any) -> tuple[int, int, int, int]:
    """(M, K, row pitch, K's stride) of a 2-D ``x``, in elements (a single row's pitch: K)."""
    m, k = x.shape
    return m, k, x.stride(0) if m > 1 else k, x.stride(1) if k > 1 else 1


def word_bytes(x: Any, rows: tuple | None = None) -> int:
    """The widest word (8, 4, 2 or 1 bytes, not narrower than an element) in which the rows of ``x`` can be
    read without leaving its storage: the word-aligned span from its first element to its last must lie
    inside it; 0 where no word can (a transposed ``x``, a span past the kernel's i32 byte offsets, a
    storage off 16 bytes: ``from_blob`` memory).
    ``rows``: ``rows_of`` the 2-D view ``x`` stands for (``linear`` passes x with its leading dims)."""
    m, k, pitch, inner = rows or rows_of(x)
    es = x.element_size()
    storage = x.untyped_storage()
    nbytes = storage.nbytes()
    if inner != 1 or nbytes >= 2**31:
        return 0
    end = (x.storage_offset() + (m - 1) * pitch + k) * es
    if storage.data_ptr() % 16:  # (16-byte aligned: then so is the boundary below x's first element)
        return 0
    for wb in (8, 4, 2, 1):
        if wb < es:
            break
        if end + -end % wb <= nbytes:
            return wb
    return 0


def pad_args(x: Any, rows: tuple, wb: int, word: Any) -> tuple[Any, int, int, int]:
    """(``x``'s buffer as ``wb``-byte words from the 16-byte boundary below its first element (a kernel's
    base pointers are 16-byte aligned) to the word holding its last, the byte offset of its first element
    in it, the row pitch in bytes, the last word's index)."""
    m, k, pitch, _ = rows
    es = x.element_size()
    shift = x.data_ptr() % 16
    first = x.storage_offset() - shift // es  # the element at that boundary
    span = -(-(shift + ((m - 1) * pitch + k) * es) // wb) * wb  # bytes, whole words
    return x.as_strided((span // es,), (1,), first).view(word), shift, pitch * es, span // wb - 1


def pad_runner(a: Any, b: Any, unit: int, backend: str | None, chunked: bool = True):
    """``run(a, b) -> (a_padded, b_padded)`` for later a, b of these dtypes, shapes, strides and device (or
    views laying out the same elements in memory: ``linear`` passes x with its leading dims): views
    ``[MA, KP]`` and ``[MB, KP]`` of one workspace written by one launch of the pad kernel.

    The workspace is allocated once and reused: per CUDA stream (``torch.cuda`` current stream; the
    emulator has one), so a later call overwrites it only in stream order after the GEMM that read it;
    during a CUDA graph capture each call takes a fresh one from the capture's private pool instead (a
    graph keeps its buffers for its life, and replays of two graphs must not share one).  A call whose
    operands cannot be read as words of their storage (``word_bytes`` 0: a transposed operand, an
    operand past 2 GiB) pads with ``torch.nn.functional.pad`` (a fill and a copy per operand).
    ``chunked``: the lane layout (``pad_constraints``; the benchmark times both)."""
    import torch

    rows_a, rows_b = rows_of(a), rows_of(b)  # later calls may pass a view of these rows (``linear``'s x)
    ma, mb, k = a.shape[0], b.shape[0], a.shape[1]
    es, kp = a.element_size(), k + -k % unit
    chunks = kp * es // 16
    device, dtype = a.device, a.dtype
    cuda = device.type == "cuda"
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) if cuda else None
    capturing = torch.cuda.is_current_stream_capturing if cuda else lambda: False
    spaces: dict = {}  # stream -> (workspace, its word views by word width)
    launches: dict = {}
    words = {wb: WORDS[wb].torch() for wb in WORDS}

    def fresh() -> tuple[Any, dict]:
        ws = torch.empty(ma + mb, kp, dtype=dtype, device=device)
        return ws, {wb: ws.view(-1).view(w).view(ma + mb, chunks, 16 // wb) for wb, w in words.items() if wb >= es}

    def workspace() -> tuple[Any, dict]:
        if capturing():
            return fresh()
        stream = raw_stream(device.index) if raw_stream is not None else None
        space = spaces.get(stream)
        if space is None:
            space = spaces[stream] = fresh()
        return space

    def run(a: Any, b: Any) -> tuple[Any, Any]:
        wb = min(word_bytes(a, rows_a), word_bytes(b, rows_b))
        if wb == 0:
            pad = torch.nn.functional.pad
            a2, b2 = (x.as_strided(r[:2], r[2:], x.storage_offset()) for x, r in ((a, rows_a), (b, rows_b)))
            return pad(a2, (0, kp - k)), pad(b2, (0, kp - k))
        ws, outs = workspace()
        xa, *row_a = pad_args(a, rows_a, wb, words[wb])
        xb, *row_b = pad_args(b, rows_b, wb, words[wb])
        args = (xa, xb, outs[wb], ma, k * es, *row_a, *row_b)
        key = (wb, xa.shape[0], xb.shape[0])  # (the views' shapes: the prepared launch's)
        launch = launches.get(key)
        if launch is None:
            kernel = pad_kernel(wb, es, chunks, backend, chunked)
            launch = launches[key] = kernel.prepare(*args, fresh_outputs=True)
        launch(*args)
        return ws[:ma], ws[ma:]

    return run
