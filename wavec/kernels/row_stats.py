"""LayerNorm's row statistics in one reduction pass, shared by the aligned (``rows``) and odd-length
(``rows_odd``) row kernels.

Requires: ``s1 = sum(c)`` and ``s2 = sum(c * c)`` over a row of ``c = x - shift`` (f32, padding 0), with
``shift`` one element of the row.  Guarantees: ``(mean(c), rsqrt(var(x) + eps))`` with the biased variance
``E[c^2] - E[c]^2``.  Both sums come from one pass over the row (the two cross-wave exchanges back to back,
no dependent mean first), and the shift keeps f32 precision: ``c`` is of the row's spread, not its mean,
so a row 1e4 + randn keeps its unit variance where ``E[x^2] - E[x]^2`` cancels it to noise.  The error
grows with ``(mean - shift)^2 / var``: 1e-4 relative for a first element 30 standard deviations out.
"""

from __future__ import annotations

import wavec as wc


def shifted_stats(s1, s2, eps, inv_n):
    """(mean of ``c``, rsqrt(var + eps)); the variance clamped at 0 (rounding may take a constant row's
    below it)."""
    m1 = s1 * inv_n
    return m1, wc.rsqrt(wc.maximum(s2 * inv_n - m1 * m1, 0.0) + eps)
