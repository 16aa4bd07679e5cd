"""IR tier: every library kernel configuration and example emits the golden MLIR (modulo SSA names)."""

import difflib

import pytest

from .cases import CASES, canonical, emit, read_golden


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_mlir(case, tmp_path):
    golden = read_golden(case)
    assert golden is not None, f"no golden file for {case.name}: python -m tests.golden.cases --write {case.name}"
    text = canonical(emit(case))
    if text != golden:
        (tmp_path / f"{case.name}.mlir").write_text(text)
        diff = "".join(list(difflib.unified_diff(golden.splitlines(True), text.splitlines(True), "golden", "now"))[:80])
        pytest.fail(
            f"{case.name}: emitted MLIR differs from the golden file (now: {tmp_path}/{case.name}.mlir)\n{diff}"
        )
