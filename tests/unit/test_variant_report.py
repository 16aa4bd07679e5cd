"""Launches of narrow and strided variants are counted per kernel and reason (``wavec.runtime.
variant_report()``), on every path a launch takes (prepared, the misaligned fallback of a dense prepared
launch, a compiled kernel called directly), and warned about once per kernel and reason under
``WAVEC_WARN_VARIANTS=1`` only.  The null driver runs kernels compiled for sm_90a on CPU tensors."""

from __future__ import annotations

import warnings

import pytest
import torch

import wavec as wc
from wavec.kernels import rows
from wavec.kernels.fastpath import Decisions
from wavec.runtime import null_driver, reset_variant_report, variant_report
from wavec.runtime.variants import reason


@pytest.fixture
def report(monkeypatch):
    """A clean report and the rows kernels on the null driver, dropped after the test."""
    monkeypatch.setattr(rows, "_COMPILED", {})
    monkeypatch.setattr(rows, "_DECIDED", Decisions("rows"))
    undo = null_driver.install()
    reset_variant_report()
    yield lambda: {why: n for by_reason in variant_report().values() for why, n in by_reason.items()}
    undo()
    reset_variant_report()


def _misaligned(r: int, n: int) -> torch.Tensor:
    return torch.randn(r * n + 1).half()[1:].view(r, n)  # 2 bytes past an aligned start


def test_each_variant_launch_is_counted_by_reason(report) -> None:
    x = torch.randn(6, 80).half()
    rows.softmax(x, backend="cuda")
    assert report() == {}  # the dense, aligned kernel: nothing counted
    rows.softmax(torch.randn(6, 82).half(), backend="cuda")  # 82 % 4: the narrow variant
    for _ in range(3):
        rows.softmax(torch.randn(6, 96).half()[:, :80], backend="cuda")  # a slice: row strides
    assert report() == {"narrow (N)": 1, "strided": 3}
    label = rows._kernel("softmax", wc.f16, 80, "cuda").metadata.label
    assert set(variant_report()) == {label} and label.startswith("softmax_rows (defined at ")


def test_misaligned_pointer_on_a_prepared_dense_launch_is_counted(report) -> None:
    """Same tensor key as an aligned call: the prepared launch sends the misaligned address to the
    kernel's full path, which launches the strided variant (counted there, once per launch)."""
    rows.softmax(torch.randn(6, 80).half(), backend="cuda")
    for _ in range(2):
        rows.softmax(_misaligned(6, 80), backend="cuda")
    assert report() == {"strided (x)": 2}


def test_a_kernel_called_directly_counts_its_variants(report) -> None:
    kernel = rows._kernel("softmax", wc.f16, 82, "cuda")
    x = torch.randn(6, 82).half()
    kernel(x, torch.empty_like(x))
    kernel(x, torch.empty_like(x))
    assert report() == {"narrow (N)": 2}


def test_warning_once_per_kernel_and_reason_only_with_the_knob(report, monkeypatch) -> None:
    x = torch.randn(6, 96).half()[:, :80]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # default off: no warning
        rows.softmax(x, backend="cuda")
    reset_variant_report()
    monkeypatch.setenv("WAVEC_WARN_VARIANTS", "1")
    with pytest.warns(UserWarning, match=r"softmax_rows .*launching its (strided|narrow \(N\)) variant") as caught:
        rows.softmax(x, backend="cuda")
        rows.softmax(x, backend="cuda")
        rows.softmax(torch.randn(6, 82).half(), backend="cuda")
    assert [str(w.message).split("launching its ")[1].split(" variant")[0] for w in caught] == ["strided", "narrow (N)"]


def test_reason_names_what_the_variant_changes() -> None:
    assert reason({}, None, {"N": 2, "K": 1}, None) == "narrow (K, N)"
    assert reason({}, None, {}, {}) == "strided"
    assert reason({}, None, {"N": 1}, {"b": 0, "a": 2}) == "narrow (N) + strided (a, b)"
    assert reason({"N": 2}, {}, {"N": 2}, {"x": 0}) == "strided (x)"
