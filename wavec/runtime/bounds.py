"""The bounds record of a kernel compiled with ``WAVEC_CHECK_BOUNDS=1`` (DESIGN §12).

Requires: only the standard library, :mod:`wavec.abi` and :mod:`wavec.errors` (the CUDA launcher and the
emulator backend both read it).  Guarantees: the record is ``abi.BOUNDS_RECORD_WORDS`` i64 words, one
binding after the tensors (and after the tensor maps), zeroed by the launcher before each launch.  The kernel
(``codegen.memory_access``) tests every data-dependent index of an active, in-bounds lane against its
dimension; the first failing lane to swap ``FLAG`` from 0 to 1 writes the rest of the record, and the
access itself is skipped (a load reads zeros).  :func:`bounds_error` turns a record into the
:class:`~wavec.errors.OutOfBoundsError` the emulator raises for the same access: the kernel line, the
memory argument, the dimension, the index, the bound, the lane and the workgroup.
"""

from __future__ import annotations

from collections.abc import Sequence

from wavec.abi import (
    BOUNDS_BOUND,
    BOUNDS_CHECK,
    BOUNDS_FLAG,
    BOUNDS_INDEX,
    BOUNDS_LANE,
    BOUNDS_WG_X,
    BOUNDS_WG_Y,
    BOUNDS_WG_Z,
)
from wavec.errors import OutOfBoundsError, SourceLoc


def bounds_error(checks: Sequence[tuple[str, ...]], record: Sequence[int]) -> OutOfBoundsError | None:
    """The error a read-back ``record`` reports (None when no check failed); ``checks`` is the kernel's
    ``KernelMetadata.bounds_checks``: ``(file:line, source code, op, memory argument, dim)`` per check id."""
    if not record[BOUNDS_FLAG]:
        return None
    where, code, op, memory, dim = checks[record[BOUNDS_CHECK]]
    filename, _, line = where.rpartition(":")
    return OutOfBoundsError(
        SourceLoc(filename, int(line), code),
        access=f"wc.{op}",
        index=record[BOUNDS_INDEX],
        dim=dim,
        memory=memory,
        bound=record[BOUNDS_BOUND],
        who=f"lane {record[BOUNDS_LANE]} of workgroup "
        f"({record[BOUNDS_WG_X]}, {record[BOUNDS_WG_Y]}, {record[BOUNDS_WG_Z]})",
    )
