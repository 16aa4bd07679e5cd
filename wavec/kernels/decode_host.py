"""The repeated-call path of split-KV decode (``decode.decode_attention``, ``paged_attention``): what one
set of tensor keys and options decided, run with only what changes per call (docs/performance.md,
"Host path"; docs/attention.md, "Decode attention").

Requires: a call that passed the entry point's validation, and its compiled split kernel (and combine);
later calls pass tensors of the same keys (``fastpath.tensor_key``) in the split kernel's order before
the partials.

Guarantees:

* ``SplitKV(...)`` holds the launch shapes, the default scale, the per-call checks (None where the
  plan decided there are none: a GPU launch without ``WAVEC_CHECK_BOUNDS=1``), the lengths tensor for
  ``seq_lens=None`` and, after its first call, the prepared launches (``CompiledKernel.prepare``).  A
  call does no validation and no planning: the checks it was given, one output allocation, a workspace
  lookup and one launch (one launch) or two; with neither a combine nor counters (one split,
  ``decode.DIRECT_SINGLE_SPLIT``) no workspace: the split kernel writes the output.
* The partials (O, row maxima, row sums: one f32 buffer, each part 16-byte aligned) live in a workspace
  cached per (thread, current CUDA stream): one thread's launches on one stream run in order, so the
  split kernel of a later call overwrites them only after the combine that read them.  During a CUDA
  graph capture a call takes fresh partials (from the capture's pool: a graph's replays and eager calls
  never share them).  A workspace past ``BUDGET`` (``fastpath.WorkspaceBudget``: per workspace, and
  held by every plan together) is allocated per call.  The output is always a new tensor; nothing of a workspace is
  returned.
* On a GPU, the partials are passed as addresses inside the workspace (``FastLaunch.pointers``: no views
  per call); the emulator and kernels prepared as ``CheckedLaunch`` get the workspace's views.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from wavec.kernels.fastpath import WorkspaceBudget

BUDGET = WorkspaceBudget()  # 16 MiB a (plan, thread, stream), 512 MiB over every plan


class Partials:
    """One f32 buffer holding a call shape's partials: its views (for launches that take tensors) and
    the parts' addresses (for launches that take pointers)."""

    __slots__ = ("buf", "views", "flat", "ptrs")

    def __init__(self, plan: SplitKV) -> None:
        import torch

        o_end, l_start = plan.o_size, plan.o_size + plan.s_stride
        self.buf = buf = torch.empty(l_start + plan.s_stride, dtype=torch.float32, device=plan.device)
        o_part = buf[:o_end].view(plan.o_shape)
        m_part = buf[o_end : o_end + plan.s_size].view(plan.s_shape)
        l_part = buf[l_start : l_start + plan.s_size].view(plan.s_shape)
        self.views = (o_part, m_part, l_part)
        self.flat = (o_part.view(*plan.flat, plan.o_shape[-1]), m_part.view(plan.flat), l_part.view(plan.flat))
        base = buf.data_ptr()
        self.ptrs = (base, base + 4 * o_end, base + 4 * l_start)


class SplitKV:
    """A call shape's launches: the split kernel into the partials, then the combine into a new tensor
    shaped like q; stream-ordered, no synchronisation.  In one launch (``counters``: a
    ``split_combine.Counters``) the split kernel combines too, with no second launch (module docstring);
    with neither ``combine`` nor ``counters`` (``direct``: one split) it writes the output itself.

    ``check(head)``: the per-call checks of the emulator or of ``WAVEC_CHECK_BOUNDS=1``, or None;
    ``lengths``: the seq_lens tensor of ``seq_lens=None`` calls; ``scale``: the default scale."""

    def __init__(
        self, split: Any, combine: Any, q: Any, splits: int, counters: Any = None,
        check: Callable[[tuple], None] | None = None, lengths: Any = None, scale: float = 1.0,
    ) -> None:  # fmt: skip
        import torch

        batch, q_len, heads, head_dim = q.shape
        self.split, self.combine, self.counters, self.splits = split, combine, counters, splits
        self.check, self.lengths, self.scale = check, lengths, scale
        self.direct = combine is None and counters is None
        self.out_shape, self.dtype, self.device, self.empty = tuple(q.shape), q.dtype, q.device, torch.empty
        self.o_shape = (batch, splits, q_len, heads, head_dim)
        self.s_shape = (batch, splits, q_len, heads)
        self.flat = (batch, splits, q_len * heads)
        self.o_size, self.s_size = math.prod(self.o_shape), math.prod(self.s_shape)
        self.s_stride = -(-self.s_size // 4) * 4  # each part starts 16-byte aligned (the kernels' vector runs)
        self.nbytes = 4 * (self.o_size + 2 * self.s_stride)
        self.launches: tuple[Any, ...] | None = None
        self.raw = False  # the launches take addresses (FastLaunch.pointers)
        cuda = q.device.type == "cuda"
        self._stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) if cuda else None
        # torch.cuda.is_current_stream_capturing's C function (the wrapper is a Python call per call)
        capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)
        self._capturing = capturing if cuda else None
        self.spaces: dict = {}  # (thread, stream) -> Partials

    def partials(self) -> Partials:
        """The workspace of this thread and stream (module docstring): cached, or fresh per call under a
        capture and past the caps."""
        if self._capturing is not None and self._capturing():
            return Partials(self)
        stream = self._stream(self.device.index) if self._stream is not None else None
        key = (threading.get_ident(), stream)
        space = self.spaces.get(key)
        if space is None:
            space = Partials(self)
            if BUDGET.keep(space.buf, self.nbytes):
                self.spaces[key] = space
        return space

    def __call__(self, head: tuple, scale: float | None) -> Any:
        if self.check is not None:
            self.check(head)
        sc = self.scale if scale is None else float(scale)
        out = self.empty(self.out_shape, dtype=self.dtype, device=self.device)
        if not self.o_size:
            return out
        if self.direct:
            return self._direct(head, out, sc)
        parts = self.partials()
        if self.launches is None:
            self._prepare(head, parts, out, sc)
        assert self.launches is not None
        if self.raw:
            ptrs = [t.data_ptr() for t in head]
            if self.counters is not None:
                self.launches[0].pointers(*ptrs, *parts.ptrs, self.counters.get().data_ptr(), out.data_ptr(), sc)
                return out
            self.launches[0].pointers(*ptrs, *parts.ptrs, sc)
            self.launches[1].pointers(*parts.ptrs, out.data_ptr())
            return out
        if self.counters is not None:
            self.launches[0](*head, *parts.views, self.counters.get(), out, sc)
            return out
        self.launches[0](*head, *parts.views, sc)
        self.launches[1](*parts.flat, self._flat_out(out))
        return out

    def _direct(self, head: tuple, out: Any, scale: float) -> Any:
        """One split: the split kernel into the output, no partials."""
        if self.launches is None:
            self._prepare(head, None, out, scale)
        assert self.launches is not None
        if self.raw:
            self.launches[0].pointers(*[t.data_ptr() for t in head], out.data_ptr(), scale)
        else:
            self.launches[0](*head, out, scale)
        return out

    def _flat_out(self, out: Any) -> Any:
        return out.view(self.flat[0], self.flat[2], self.o_shape[-1])

    def _prepare(self, head: tuple, parts: Partials | None, out: Any, scale: float) -> None:
        """The launches, validated on this call's tensors (``parts`` None: ``direct``, no partials).
        ``fresh_outputs``: the partials are this plan's own and the output is new, so no output overlaps
        an input."""
        if self.direct or parts is None:
            self.launches = (self.split.prepare(*head, out, scale, fresh_outputs=True),)
        elif self.counters is not None:
            args = (*head, *parts.views, self.counters.get(), out, scale)
            self.launches = (self.split.prepare(*args, fresh_outputs=True),)
        else:
            self.launches = (
                self.split.prepare(*head, *parts.views, scale, fresh_outputs=True),
                self.combine.prepare(*parts.flat, self._flat_out(out), fresh_outputs=True),
            )
        self.raw = all(hasattr(x, "pointers") and x.maps is None for x in self.launches)
