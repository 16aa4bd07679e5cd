"""Every bad input of ``scripts/bad_inputs_table.py`` raises a WavecError naming the argument, and
``docs/bad_inputs.md`` is what the script generates (emulator backend, CPU tensors)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

import wavec as wc
from wavec.errors import WavecError

ROOT = Path(__file__).resolve().parents[2]


def _load_script():
    spec = importlib.util.spec_from_file_location("bad_inputs_table", ROOT / "scripts" / "bad_inputs_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


table = _load_script()
CASES = table.cases()
LABELS = [c.input for c in CASES]


def test_labels_are_unique() -> None:
    assert len(set(LABELS)) == len(LABELS)


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict:
    """Each case run once (kernels compiled once, never cached on disk)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WAVEC_CACHE_DIR", str(tmp_path_factory.mktemp("wavec-cache")))
        return {row.case.input: row for row in table.run_cases()}


def _params():
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=f"BUG: {case.bug}")] if case.bug else []
        yield pytest.param(case.input, marks=marks, id=f"{case.group.split()[0]}: {case.input}")


@pytest.mark.parametrize("label", list(_params()))
def test_bad_input_raises_wavec_error_naming_the_argument(label, rows) -> None:
    row = rows[label]
    assert row.error is not None, f"{label}: nothing was raised"
    assert isinstance(row.error, WavecError), f"{label}: {row.error_class}: {row.error}"
    if row.case.arg is not None:
        assert row.error.fields.get("arg") == row.case.arg
        assert f"argument '{row.case.arg}'" in str(row.error)
    assert row.message, f"{label}: empty message"


def test_launch_cases_all_name_an_argument() -> None:
    """Every launch case (a kernel called with bad tensors) says which argument it expects to be blamed."""
    launch = [c for c in CASES if c.group.startswith(("GEMM", "scale_shift"))]
    assert launch and all(c.arg for c in launch)


def _strip_lines(text: str) -> str:
    return re.sub(r"(\.py):\d+", r"\1:N", text)


def test_doc_is_up_to_date(rows) -> None:
    doc = ROOT / "docs" / "bad_inputs.md"
    assert doc.exists(), "run scripts/bad_inputs_table.py"
    fresh = table.render([rows[label] for label in LABELS])
    assert _strip_lines(doc.read_text()) == _strip_lines(fresh), (
        "docs/bad_inputs.md is stale: run .venv/bin/python scripts/bad_inputs_table.py"
    )


# ---------------------------------------------------------------- valid inputs near the bad ones


@pytest.fixture(scope="module")
def gemm(tmp_path_factory):
    from wavec.kernels.gemm import make_gemm
    from wavec.tuning.plan import DEFAULT_SUBS

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WAVEC_CACHE_DIR", str(tmp_path_factory.mktemp("wavec-cache")))
        return wc.compile(make_gemm(), DEFAULT_SUBS, backend="emulator")


def test_empty_m_is_a_no_op(gemm) -> None:
    c = torch.empty(0, 32)
    gemm(torch.empty(0, 64, dtype=torch.float16), torch.randn(32, 64).half(), c)


def test_empty_k_gives_zeros(gemm) -> None:
    """K = 0 is a valid GEMM (c = 0, like torch); the emulator crashed on it before c5a252f."""
    c = torch.full((64, 32), float("nan"))
    gemm(torch.empty(64, 0, dtype=torch.float16), torch.empty(32, 0, dtype=torch.float16), c)
    assert torch.equal(c, torch.zeros(64, 32))


def test_aligned_row_slice_is_accepted(gemm) -> None:
    """A row slice of a contiguous tensor is contiguous; 8 f16 per row keeps it 16-byte aligned."""
    big = torch.randn(65, 64).half()
    a, b = big[1:], torch.randn(32, 64).half()
    c = torch.full((64, 32), float("nan"))
    gemm(a, b, c)
    torch.testing.assert_close(c, (a.double() @ b.double().T).float(), rtol=1e-4, atol=1e-4)


def test_inputs_requiring_grad_are_accepted(gemm) -> None:
    a = torch.randn(64, 64, dtype=torch.float16, requires_grad=True)
    b = torch.randn(32, 64, dtype=torch.float16)
    c = torch.full((64, 32), float("nan"))
    gemm(a, b, c)
    torch.testing.assert_close(c, (a.detach().double() @ b.double().T).float(), rtol=1e-4, atol=1e-4)
