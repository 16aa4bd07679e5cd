"""The library's host path: a repeated call to an entry point is one dictionary lookup, an output
allocation and prepared launches (``CompiledKernel.prepare``); docs/performance.md, "Host path".

Requires: torch tensors (or anything else: a key of a non-tensor is None, and the entry point's full path
raises its error).

Guarantees:

* :func:`tensor_key` is what a decision may depend on of a tensor: dtype, shape, device, and its strides
  unless it is dense row-major.  Its base address is not in the key; the prepared launch checks its
  alignment on every call.
* :class:`Decisions` maps keys to runners, built by the entry point's slow path on a miss
  (``run = table.get(key)``, else ``table.remember(key, build(...))``; an unhashable key is decided on
  every call), each key joined with ``knobs.code_key()`` (a runner built with bounds checks is not reused
  without them); at ``limit`` entries it starts over (a serving loop sees a few dozen shapes; a sweep must
  not grow without bound).
* :class:`WorkspaceBudget` is how many bytes of cached per-(thread, stream) workspaces one entry point
  keeps alive: ``keep(owner, nbytes)`` admits a workspace up to ``per_entry`` bytes while the live total
  stays within ``total``, and counts it until ``owner`` is collected.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from wavec.knobs import code_key
from wavec.runtime.fast_launch import tensor_key

__all__ = ["Decisions", "WorkspaceBudget", "tensor_key", "as_rows"]


def as_rows(x: Any, shape: tuple) -> tuple[Any, Callable[[Any], Any]]:
    """(``x`` reshaped to ``shape`` for the kernel, ``per_call(x)``): a view where the strides allow and the
    innermost elements are adjacent (a slice, a head of a packed projection: the kernel takes its strides),
    else a dense copy (a transposed ``x``: copying beats reading one element at a time).  ``per_call`` does
    the same to a later ``x`` of the same key: the tensor itself when the first call's was a view at its
    own address (the prepared launch reads only its pointer), a fresh copy otherwise."""
    rows = x.reshape(shape)
    if rows.stride(-1) != 1 and rows.shape[-1] > 1:
        rows = rows.contiguous()
    if rows.data_ptr() == x.data_ptr() and rows.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
        return rows, _same
    return rows, lambda t: t.reshape(shape).contiguous()


def _same(t: Any) -> Any:
    return t


class Decisions:
    """key -> runner for one entry point."""

    __slots__ = ("name", "table", "limit")

    def __init__(self, name: str, limit: int = 1024) -> None:
        self.name, self.limit = name, limit
        self.table: dict[Any, Callable[..., Any]] = {}

    def get(self, key: Any) -> Callable[..., Any] | None:
        """The runner decided for ``key``; None for a new key or an unhashable one (an option passed as a
        list: decided, and validated, on every call)."""
        try:
            return self.table.get((code_key(), key))
        except TypeError:
            return None

    def remember(self, key: Any, runner: Callable[..., Any]) -> Callable[..., Any]:
        """``runner``, kept for ``key`` when the key is hashable."""
        try:
            hash(key)
        except TypeError:
            return runner
        if len(self.table) >= self.limit:
            self.table.clear()
        self.table[(code_key(), key)] = runner
        return runner

    def clear(self) -> None:
        self.table.clear()

    def __len__(self) -> int:
        return len(self.table)


class WorkspaceBudget:
    """The bytes of cached workspaces one entry point keeps (module docstring): a sweep of shapes must not
    hold GPU memory."""

    def __init__(self, per_entry: int = 16 << 20, total: int = 512 << 20) -> None:
        self.per_entry, self.total, self.held = per_entry, total, 0

    def keep(self, owner: Any, nbytes: int) -> bool:
        """Whether a workspace of ``nbytes`` may be cached; if so it is counted while ``owner`` lives."""
        if nbytes > self.per_entry or self.held + nbytes > self.total:
            return False
        self.held += nbytes
        weakref.finalize(owner, self._release, nbytes)
        return True

    def _release(self, nbytes: int) -> None:
        self.held -= nbytes
