"""The odd-row kernels' output for slices whose offset within 16 bytes drifts from row to row against the
contiguous output's (``x[:, :n]`` of rows ``P`` long, ``(P - n) % V != 0``: bf16 4097 of 4104).  The input is
read as in ``rows_odd`` (16-byte chunks at the input row's alignment, an element-wise edge register) and the
values computed there; only where they are stored differs, two variants (``OddRules.drift``):

- ``"scatter"``: every value is stored alone at its flat output position ``out_start(m) + column`` (the
  edge register's mechanism applied to the interior): 2- or 4-byte stores, 16 bytes apart across a wave's
  lanes, merged into sectors in L2 (V times the store instructions and L2 requests of aligned chunks).
- ``"shared"``: the row passes through shared memory: its chunks stored there 16 bytes at a time at the
  input's alignment (slot ``column - head + V``: the first whole chunk at slot row 1), its edge elements
  alone, then (one workgroup barrier) read back element by element at the *output* row's alignment, so the
  output interior is written as 16-byte chunks of the output (``ceil(out_start / V) + j``) and only the
  output row's own edges (a head of < V, a tail of < 2V elements) element by element.  Global memory sees
  16-byte accesses only; the shift costs V shared loads a chunk (4-way bank conflicts: lanes 16 bytes
  apart) and ``drift_shared_bytes`` of shared memory a workgroup.

Requires: the ``_Row`` of ``rows_odd`` (its ``start``, ``head``, ``j``, ``k``, ``at``, ``ecol``), ``back``
(``rows_odd.back``: how far the output row lies before the input's, ``m * gap``; over one row a workgroup the
row buffer is ``[Q, V]``), the output passed as chunks ``[R2, V]`` of a buffer in which row ``m`` starts at
``start - m * gap``.
Guarantees: every element of each output row is written (identical rewrites aside: lanes past K under
``full``, edge slots past the row), nothing outside the output rows is written.
"""

from __future__ import annotations

from typing import Any

import wavec as wc

M, J, V, E, R2 = wc.sym.M, wc.sym.J, wc.sym.V, wc.sym.E, wc.sym.R2
# the shared row buffer's slot rows [M, Q, V] (Q bound to ``block_j + 3``): column c at slot c - head + V
Q = wc.sym.Q


def _buffer(dims: tuple, sizes: tuple, dtype, rows: int) -> Any:
    """The shared row buffers: ``dims`` a row, [M, *dims] over several rows a workgroup (one row: M is a
    batch dimension)."""
    if rows > 1:
        dims, sizes = (M, *dims), (rows, *sizes)
    return wc.allocate(dims, dtype, distributed_shape=sizes, disjoint_writes=True)


def _split(base: Any, offset: Any, vec: int) -> tuple[Any, Any]:
    """(chunk, element) of the flat position ``base * V + offset`` for ``offset`` in ``[-V, 2V)`` (``base``
    [M] or [M, J], ``offset`` [.., V]): a compare and two selects an element where ``//`` and ``%`` of a
    signed value take a dozen integer instructions."""
    below, above = offset < 0, offset >= vec
    zero = offset * 0  # (the chunk step is the row's and the element's, not the chunk's: selected once)
    step = wc.where(below, zero - 1, wc.where(above, zero + 1, zero))
    return base + step, offset - step * vec


def write_scatter(row: Any, main: Any, edge: Any, out: Any, back: Any, dtype, vec: int) -> None:
    """Each value of ``main`` [M, J, V] and ``edge`` [M, E] at its own output element: interior column
    ``head + j V + e`` of row m at flat ``(c0 + j) V + e - back`` (``rows_odd.back``: ``m * gap``)."""
    chunk, e = _split(row.chunk - back // vec, wc.index(V) - back % vec, vec)
    wc.write(wc.cast(main, dtype), out, mapping={R2: chunk, V: e})
    eat = row.at - back
    wc.write(wc.cast(edge, dtype), out, mapping={R2: eat // vec, V: eat % vec})


class _OutRow:
    """The output row's pieces: its first flat position ``start`` [M], first whole chunk ``c0``, head
    ``head`` (``c0 * V - start``), and its edge slots' flat positions ``at`` [M, E] (as ``_Row``'s: a slot
    past the row takes the row's first head element, or its last), columns ``col``."""

    def __init__(self, start: Any, k: Any, n: Any, vec: int) -> None:
        self.start = start
        self.c0 = (start + (vec - 1)) // vec
        self.head = self.c0 * vec - start
        slot = wc.index(E)
        end = start + n
        at = wc.where(slot < vec, start + slot, ((self.c0 + k) * vec) + slot - vec)
        ok = wc.where(slot < vec, self.head > slot, end > at)
        self.at = wc.where(ok, at, wc.where(self.head > 0, start, end - 1))
        self.col = self.at - start


def write_shared(row: Any, main: Any, edge: Any, out: Any, back: Any, n: Any, dtype, vec: int, rows: int, block_j: int):
    """``main`` and ``edge`` through a shared row buffer, re-read at the output row's alignment (module
    docstring); the output chunks are the input's count K (``row.k``), lanes past K under ``full``
    rewriting the last one (``row.j`` clamped)."""
    # no two accesses but an edge slot past the row and its owner (one wave, one store) write one element:
    # lanes past K (``full``) store to slot rows past the tail's, never read, not over the row's last chunk
    buf = _buffer((Q, V), (block_j + 3, vec), dtype, rows)
    wc.write(wc.cast(main, dtype), buf, mapping={Q: wc.where(row.inside, row.j + 1, wc.index(J) + 3)})
    slot = row.ecol - row.head + vec
    wc.write(wc.cast(edge, dtype), buf, mapping={Q: slot // vec, V: slot % vec})
    o = _OutRow(row.start - back, row.k, n, vec)
    # output column c sits at slot c - row.head + V, so output chunk j's element e at slot
    # (j + 1) V + shift + e, shift = o.head - row.head in (-V, V)
    q, e = _split(row.j + 1, o.head - row.head + wc.index(V), vec)
    wc.write(wc.read(buf, mapping={Q: q, V: e}), out, mapping={R2: o.c0 + row.j})
    eat = o.col - row.head + vec
    wc.write(wc.read(buf, mapping={Q: eat // vec, V: eat % vec}), out, mapping={R2: o.at // vec, V: o.at % vec})
