"""LayerNorm's row statistics, shared by the aligned (``rows``) and odd-length (``rows_odd``) row kernels:
in one reduction pass for f16/bf16 rows, in two for f32 rows.

Requires: ``s1 = sum(c)`` and ``s2 = sum(c * c)`` over a row of ``c = x - shift`` (f32, padding 0), with
``shift`` one element of the row.  Guarantees: ``(mean(c), rsqrt(var(x) + eps))`` with the biased variance
``E[c^2] - E[c]^2``.  Both sums come from one pass over the row (the two cross-wave exchanges back to back,
no dependent mean first), and the shift keeps f32 precision: ``c`` is of the row's spread, not its mean,
so a row 1000 + randn keeps its unit variance where ``E[x^2] - E[x]^2`` cancels it to noise.  The error
is f32 rounding times ``1 + (mean - shift)^2 / var``: a few 1e-6 relative for a first element a few
spreads out, invisible in f16/bf16 outputs but not within f32's tolerance of torch, so f32 rows keep the
two passes (the mean of ``c``, then the squared deviations from it; ``one_pass``).  f32 rows are shifted
too: a mean of 1e4 held in f32 is off by a few ulps (0.001 each) after a row's sum, and ``x - mean``
carries that into every output (2-3e-3 on an H200 at 4097-20000 elements).  Their deviations are
``(x - hi) - lo`` with ``hi + lo`` the exact sum ``shift + mean(c)`` (``two_sum``): one rounding where
``x`` is near ``hi`` (Sterbenz), as unshifted rows had, where ``c - mean(c)`` would round ``c`` first
(one f32 output in 8.4M past torch's 2e-6 on an H200).  The mean itself is corrected (the corrected
two-pass algorithm): the deviations' own mean is what the first sum rounded off, and it is summed over
values of the row's spread, not of its distance from the shift.  Without it a first element a few spreads
from the mean left 1-2e-6 of ``1 + |xhat * w|`` on an H200 (torch: 3e-7; 2-5e-6 for one four spreads out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import wavec as wc


def one_pass(dtype) -> bool:
    """Whether LayerNorm rows of ``dtype`` take the one-pass statistics (f16, bf16)."""
    return dtype.bytes == 2


def shifted_stats(s1, s2, eps, inv_n):
    """(mean of ``c``, rsqrt(var + eps)); the variance clamped at 0 (rounding may take a constant row's
    below it)."""
    m1 = s1 * inv_n
    return m1, wc.rsqrt(wc.maximum(s2 * inv_n - m1 * m1, 0.0) + eps)


def two_sum(a, b):
    """(hi, lo) with ``hi = fl(a + b)`` and ``hi + lo == a + b`` exactly (Knuth's TwoSum: no ordering of
    ``|a|`` and ``|b|`` needed)."""
    hi = a + b
    bb = hi - a
    return hi, (a - (hi - bb)) + (b - bb)


def deviations(v, inside, shift, total: Callable[[Any], Any], eps, inv_n, dtype, again=None):
    """(``x - mean``, rsqrt(var + eps)) of rows ``v`` (f32, 0 where not ``inside``), ``total`` the row sum
    and ``shift`` the row's first element; ``again``: the same values read a second time, after the
    statistics, to take the deviations of (so ``v`` need not live past the sums).  The deviations past
    the row are not 0 in the one pass (their stores are masked)."""
    c = wc.where(inside, v - shift, 0.0)
    if not one_pass(dtype):
        hi, lo = two_sum(shift, total(c) * inv_n)
        d0 = wc.where(inside, (v - hi) - lo, 0.0)
        # the corrected two-pass mean: the deviations' own mean is the first sum's rounding (of the
        # row's spread from the shift), summed over values of the row's spread only
        fix = total(d0) * inv_n
        d1 = d0 if again is None else wc.where(inside, (again - hi) - lo, 0.0)
        d = wc.where(inside, d1 - fix, 0.0)
        return d, wc.rsqrt(wc.maximum(total(d0 * d0) * inv_n - fix * fix, 0.0) + eps)
    m1, r = shifted_stats(total(c), total(c * c), eps, inv_n)
    return (c if again is None else again - shift) - m1, r
