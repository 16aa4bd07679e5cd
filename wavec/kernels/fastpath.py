"""The library's host path: a repeated call to an entry point is one dictionary lookup, an output
allocation and prepared launches (``CompiledKernel.prepare``); docs/performance.md, "Host path".

Requires: torch tensors (or anything else: a key of a non-tensor is None, and the entry point's full path
raises its error).

Guarantees:

* :func:`tensor_key` is what a decision may depend on of a tensor: dtype, shape, device and whether it is
  dense row-major (strides beyond that are not looked at: a non-dense tensor is copied by the runner).
  Its base address is not in the key; the prepared launch checks its alignment on every call.
* :class:`Decisions` maps keys to runners, built by the entry point's slow path on a miss; at ``limit``
  entries it starts over (a serving loop sees a few dozen shapes; a sweep must not grow without bound).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Decisions", "tensor_key"]


def tensor_key(t: Any) -> tuple | None:
    """(dtype, shape, device, dense) of a tensor, None for None; raises AttributeError for a non-tensor."""
    if t is None:
        return None
    return (t.dtype, t.shape, t.device, t.is_contiguous())


class Decisions:
    """key -> runner for one entry point."""

    __slots__ = ("name", "table", "limit")

    def __init__(self, name: str, limit: int = 1024) -> None:
        self.name, self.limit = name, limit
        self.table: dict[Any, Callable[..., Any]] = {}

    def get(self, key: Any) -> Callable[..., Any] | None:
        return self.table.get(key)

    def remember(self, key: Any, runner: Callable[..., Any]) -> Callable[..., Any]:
        if len(self.table) >= self.limit:
            self.table.clear()
        self.table[key] = runner
        return runner

    def clear(self) -> None:
        self.table.clear()

    def __len__(self) -> int:
        return len(self.table)
