"""Launch tracing: which compiled kernels a piece of Python launches, with the shapes and scalars each
launch saw, so that the performance model can predict a whole program (``wavec.perf.forward``) from the
kernels it actually ran rather than from a hand-written list.

Requires: nothing beyond the standard library; the launchers call :func:`note` only while a trace is
active (``ACTIVE is not None``: one attribute test per launch otherwise).

Guarantees:

* Inside ``with trace_launches() as launches:`` every launch that reaches a device or the emulator — a
  prepared launch (``FastLaunch``, by tensors or by pointers), the CUDA full path, the emulator — appends
  one :class:`TracedLaunch` to ``launches``, in launch order: the kernel's artifact, the shapes of its
  tensor arguments as the kernel sees them (a prepared launch's shapes), its scalars by name and, where it
  was given tensors, which of them view one buffer (``storage_groups``).  Launches of an empty grid are not
  noted (nothing runs).
* Traces do not nest: entering one while another is active raises ``RuntimeError``; the trace ends when
  the ``with`` block exits, by an exception too.  Tracing is process-wide (launches from every thread go
  into the active trace).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["TracedLaunch", "trace_launches", "note", "storage_groups", "ACTIVE"]


@dataclass(frozen=True)
class TracedLaunch:
    """One launch: ``artifact`` (``wavec.runtime.Artifact``), tensor ``shapes`` in binding order and the
    ``scalars`` by name."""

    artifact: Any
    shapes: tuple[tuple[int, ...], ...]
    scalars: dict[str, Any]
    views: tuple[int, ...] | None = None  # ``storage_groups`` of the tensors (None: launched by pointers)

    @property
    def kernel(self) -> str:
        return str(self.artifact.metadata.kernel)


ACTIVE: list[TracedLaunch] | None = None


def storage_groups(tensors: Sequence[Any]) -> tuple[int, ...] | None:
    """Per tensor, the index of the first tensor on the same storage (views of one buffer share it: the odd
    row kernels read x as chunks and flat); None where an argument is not a tensor (a raw pointer).  A
    storage is told by its object (``_cdata``), not its address: meta and empty tensors have address 0."""
    first: dict[int, int] = {}
    out = []
    for i, t in enumerate(tensors):
        if not hasattr(t, "untyped_storage"):
            return None
        out.append(first.setdefault(t.untyped_storage()._cdata, i))
    return tuple(out)


def note(artifact: Any, shapes: Sequence[Any], scalars: Sequence[Any], tensors: Sequence[Any] = ()) -> None:
    """Append a launch of ``artifact`` to the active trace (callers test ``ACTIVE`` first); ``tensors``: the
    tensor arguments, for ``TracedLaunch.views``."""
    if ACTIVE is None:
        return
    names = [name for name, _ in artifact.metadata.scalars]
    dims = tuple(tuple(int(d) for d in s) for s in shapes)
    views = storage_groups(tensors) if tensors else None
    ACTIVE.append(TracedLaunch(artifact, dims, dict(zip(names, scalars)), views))


@contextmanager
def trace_launches() -> Iterator[list[TracedLaunch]]:
    """The launches of the ``with`` block, in order (module docstring)."""
    global ACTIVE
    if ACTIVE is not None:
        raise RuntimeError("wavec.runtime.trace_launches: a trace is already active (traces do not nest)")
    launches: list[TracedLaunch] = []
    ACTIVE = launches
    try:
        yield launches
    finally:
        ACTIVE = None
