"""``wavec.perf.standing``: a measured call against the performance model's P80 ceiling, on the emulator
(the launches of a library call traced and predicted from their artifacts)."""

from __future__ import annotations

import pytest
import torch

from wavec.kernels import rms_norm, softmax
from wavec.perf.standing import GAP, standing


def test_a_modelled_call_stands_against_its_ceiling() -> None:
    x = torch.randn(64, 1024)
    first = standing(lambda: softmax(x), 1e-3, "h100")
    assert first.launches == 1 and first.unmodelled == ()
    assert 0 < first.roofline_s and 0 < first.time_s and 0 < first.ceiling_s
    at = standing(lambda: softmax(x), first.ceiling_s, "h100")  # measured exactly at the ceiling
    assert at.of_ceiling == pytest.approx(1.0) and at.gap == pytest.approx(0.0) and not at.underperforming
    slow = standing(lambda: softmax(x), 4 * first.ceiling_s, "h100")
    assert slow.of_ceiling == pytest.approx(0.25)
    want_gap = first.roofline_s / first.ceiling_s * 0.75  # roofline/ceiling - roofline/(4 ceiling)
    assert slow.gap == pytest.approx(want_gap)
    assert slow.underperforming == (want_gap > GAP)
    assert slow.cell().startswith("0.25") and ("(under)" in slow.cell()) == slow.underperforming


def test_an_unmodelled_kernel_gives_no_ratio() -> None:
    """An odd-length row kernel belongs to no trained family: named, and no partial ratio."""
    x, w = torch.randn(8, 1025), torch.randn(1025)
    st = standing(lambda: rms_norm(x, w), 1e-5, "h100")
    assert st.launches == 1 and st.unmodelled == ("rms_norm_odd",)
    assert st.of_ceiling is None and st.gap is None and not st.underperforming
    assert st.cell() == "n/a (rms_norm_odd)"


def test_no_launch_and_bad_times() -> None:
    st = standing(lambda: None, 1e-6, "h200")
    assert st.launches == 0 and st.of_ceiling is None and st.cell() == "n/a (no launch)"
    for bad in (0.0, -1e-6, float("nan")):
        with pytest.raises(ValueError, match="measured_s"):
            standing(lambda: None, bad, "h100")
