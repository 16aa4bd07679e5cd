"""The combine of split-KV decode inside the split kernel (one launch): the last workgroup of each group
combines.

A group is the ``SP`` workgroups of one (sequence, row tile, kv head): each stores its partials
(``decode.write_partials``), then arrives at the group's counter (``wc.arrive``: release, one GPU-scope
atomic, acquire); the workgroup that arrives last reads all ``SP`` splits' partials in its own
layout (``decode.COMBINE_SHAPES``), ``BLOCK_SP`` splits a step of a loop over ``SP``, combines
them online (the running maximum of the split maxima, each split's sum and accumulator rescaled as it
comes: ``decode_combine``'s ``Σ_s 2^(m_s - M) acc_s / Σ_s 2^(m_s - M) l_s``, empty splits weighing
exactly 0) and writes the output rows.  The others exit after their arrival.

The counters (``Counters``): one zero-initialised int32 per group, ``[B, C]`` with ``C = row tiles *
KVH``; the last arrival returns its counter to 0 (``atom.inc``'s wrap), so the buffer is reused by
every later launch of the call shape.  Rule (``kernels/pad.py``'s, for state the kernel keeps between
launches): a counter buffer is used only by launches on one CUDA stream (stream order keeps two
launches from overlapping); a call on another stream takes its own; a call during a CUDA graph capture
takes one for the graph alone (zeroed before the capture, or by a memset inside it: two graphs, or a
graph and an eager call, never share counters).  The partials are allocated per call (the caching allocator's
stream-ordered reuse, as before).
"""

from __future__ import annotations

from typing import Any

import sympy

import wavec as wc
from wavec import Register, f32

from .decode import BLOCK_M, KVH, NEG_INF, QL, SP, B, D, H, M, kv_head_index

C = wc.sym.C  # counters per sequence: row tiles * kv heads
BLOCK_SP = wc.sym.BLOCK_SP  # splits per step of the combine (subs)


def counter_index() -> sympy.Expr:
    """This workgroup's counter within its sequence: ``row tile * KVH + kv head``."""
    return sympy.floor(wc.tile_start(M) / BLOCK_M) * KVH + kv_head_index()


def combine_last(o_part, m_part, l_part, counter, out, group: int, dtype) -> None:
    """After this workgroup's partials: arrive; the last of the group combines the ``SP`` splits of its
    rows (row ``m``: query ``m // group`` of head ``kv_head * group + m % group``) into ``out``
    [B, QL, H, D], ``BLOCK_SP`` splits a step (the step's maximum, then its weights)."""
    wc.exit_if(~wc.arrive(counter, mapping={C: counter_index()}, expected=SP))
    rows = wc.index(M)  # (its own index chain: the combine's layout is not the mma's)
    q_rows = {QL: rows // group, H: rows % group + kv_head_index() * group}
    init = [Register[M, f32](NEG_INF), Register[M, f32](0.0), Register[M, D, f32](0.0)]

    @wc.iterate(SP, init_args=init)
    def splits(mx: Register[M, f32], total: Register[M, f32], acc: Register[M, D, f32]):
        real = wc.arange(SP)[:, None] < SP  # the last step's splits past SP read zeros: weigh them 0
        m_s = wc.where(real, wc.read(m_part, mapping=q_rows), NEG_INF)  # [BLOCK_SP, M]
        m_new = wc.maximum(mx, wc.max(m_s, SP))
        m_use = wc.where(m_new > NEG_INF, m_new, 0.0)  # no -inf - -inf while every split so far is empty
        alpha, w = wc.exp2(mx - m_use), wc.exp2(m_s - m_use[None, :])
        l_new = total * alpha + wc.sum(wc.read(l_part, mapping=q_rows) * w, SP)
        return m_new, l_new, acc * alpha[:, None] + wc.sum(wc.read(o_part, mapping=q_rows) * w[:, :, None], SP)

    _mx, total, acc = splits
    total = wc.where(total > 0.0, total, 1.0)  # rows past M (masked: never stored) have no keys
    wc.write(wc.cast(acc * wc.reciprocal(total)[:, None], dtype), out, mapping=q_rows)


__all__ = ["B", "BLOCK_SP", "C", "combine_last", "counter_index"]


SPLITS_PER_STEP = 1  # BLOCK_SP of the library's kernels (benchmarks/decode_sweep.py --splits-per-step)


GRAPH_RESERVE = 2  # zeroed counter buffers an eager call keeps ready for later CUDA graph captures


class Counters:
    """The zeroed int32 counters ``[batch, groups]`` of one call shape on one device.

    Eager calls: one buffer per CUDA stream (``torch.cuda`` current stream; the emulator has one), reused
    by every launch there (each leaves it zeroed; stream order keeps two launches from overlapping).  A
    call during a CUDA graph capture takes a buffer of its own for the graph's life: one of the
    ``GRAPH_RESERVE`` zeroed ones an eager call allocated beforehand (kept referenced here, never
    reused), else a fresh one zeroed inside the capture (a memset node that replays before the kernel).
    So two graphs, or a graph and an eager call, never share counters."""

    def __init__(self, shape: tuple, device: Any) -> None:
        import torch

        self.shape, self.device = shape, device
        self.cuda = cuda = device.type == "cuda"
        self._stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) if cuda else None
        self._capturing = torch.cuda.is_current_stream_capturing if cuda else lambda: False
        self.buffers: dict = {}  # stream -> its counters
        self.reserve: list = []  # zeroed, for captures
        self.graph_owned: list = []  # handed to captured graphs (alive as long as this plan)

    def _zeros(self) -> Any:
        import torch

        return torch.zeros(self.shape, dtype=torch.int32, device=self.device)

    def get(self) -> Any:
        if self._capturing():
            buf = self.reserve.pop() if self.reserve else self._zeros()
            self.graph_owned.append(buf)
            return buf
        while self.cuda and len(self.reserve) < GRAPH_RESERVE:
            self.reserve.append(self._zeros())
        stream = self._stream(self.device.index) if self._stream is not None else None
        buf = self.buffers.get(stream)
        if buf is None:
            buf = self.buffers[stream] = self._zeros()
        return buf
