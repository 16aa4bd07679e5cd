"""The FileCheck helper of the IR tier checks what it claims: passing checks pass, wrong ones fail."""

from __future__ import annotations

import pytest
from filecheck import FileCheckError, filecheck

TEXT = """\
func @f() {
  %0 = arith.constant 0 : index
  %1 = gpu.thread_id  x
  %2 = arith.addi %1, %0 : index
  vector.load %a[%2] : vector<8xf16>
  vector.load %a[%1] : vector<8xf16>
  return
}
func @g() {
  %7 = arith.muli %3, %4 : index
  return
}
"""


@pytest.mark.parametrize(
    "checks",
    [
        "CHECK: func @f\nCHECK: gpu.thread_id x\nCHECK: return",
        "CHECK: arith.constant\nCHECK-NEXT: gpu.thread_id\nCHECK-NEXT: arith.addi",
        "CHECK: %2 = arith.addi\nCHECK-SAME: %1, %0",
        "CHECK: %[[T:[0-9]+]] = gpu.thread_id\nCHECK: arith.addi %[[T]], %0",
        "CHECK: vector<{{[0-9]+}}xf16>\nCHECK: vector<8xf16>",
        "CHECK-COUNT-2: vector.load\nCHECK: return",
        "CHECK-LABEL: func @f\nCHECK-NOT: arith.muli\nCHECK: return\nCHECK-LABEL: func @g\nCHECK: arith.muli",
        "// CHECK: func @g\n  # CHECK-NEXT:   %7 = arith.muli",
        "CHECK: gpu.thread_id\nCHECK-NOT: gpu.thread_id\nCHECK: return",
        "CHECK-LABEL: func @g() {\nCHECK-NEXT: %7 = arith.muli",
    ],
)
def test_passing_checks(checks: str) -> None:
    filecheck(TEXT, checks)


@pytest.mark.parametrize(
    "checks,why",
    [
        ("CHECK: gpu.block_id", "not found"),
        ("CHECK: return\nCHECK: gpu.thread_id", "not found"),  # order matters
        ("CHECK: arith.constant\nCHECK-NEXT: arith.addi", "next line"),
        ("CHECK: %2 = arith.addi\nCHECK-SAME: vector", "same line"),
        ("CHECK-COUNT-3: vector.load", "found 2 times"),
        ("CHECK: func @f\nCHECK-NOT: arith.addi\nCHECK: return", "excluded"),
        ("CHECK-LABEL: func @f\nCHECK: arith.muli\nCHECK-LABEL: func @g", "not found"),  # confined to @f
        ("CHECK: %[[T:[0-9]+]] = gpu.thread_id\nCHECK: vector.load %a[%[[T]]]\nCHECK: %2", "not found"),
        ("CHECK: vector<{{[0-9]+}}xf32>", "not found"),
        ("CHECK: func @f {{.*}} return", "not found"),  # no match across lines
        ("CHECK-LABEL: func @h", "label not found"),
        ("CHECK-LABEL: func @f() {\nCHECK-NEXT: gpu.thread_id", "next line"),
        ("CHECK: thread_id\nCHECK-NOT: return\n", "excluded"),  # trailing NOT runs to the block end
    ],
)
def test_failing_checks(checks: str, why: str) -> None:
    with pytest.raises(FileCheckError, match=why):
        filecheck(TEXT, checks)


def test_literal_text_is_not_a_regex() -> None:
    filecheck("a.b (c)", "CHECK: a.b (c)")
    with pytest.raises(FileCheckError):
        filecheck("axb (c)", "CHECK: a.b (c)")


def test_whitespace_runs_are_canonical() -> None:
    filecheck("x  =\t1", "CHECK: x = 1")
    with pytest.raises(FileCheckError):
        filecheck("x=1", "CHECK: x = 1")


def test_bad_check_text() -> None:
    with pytest.raises(FileCheckError, match="no CHECK"):
        filecheck(TEXT, "nothing to check")
    with pytest.raises(FileCheckError, match="undefined variable"):
        filecheck(TEXT, "CHECK: [[NOPE]]")
    with pytest.raises(FileCheckError, match="previous match"):
        filecheck(TEXT, "CHECK-NEXT: func")
