"""``SchedulingConstraint(min_workgroups_per_sm=N)``: its validation and the ``.minnctapersm`` line that
``codegen/launch_bounds`` writes after the entry's ``.maxntid`` (the compiled effect: the binary tier)."""

from __future__ import annotations

import pytest

import wavec as wc
from wavec.codegen.launch_bounds import with_min_workgroups
from wavec.errors import CodegenError, ConstraintError

PTX = """.visible .entry k(
\t.param .u64 k_param_0
)
.maxntid 512, 1, 1
{
\tret;
}
"""


def test_directive_follows_maxntid() -> None:
    out = with_min_workgroups(PTX, 3)
    lines = out.splitlines()
    at = lines.index(".maxntid 512, 1, 1")
    assert lines[at + 1] == ".minnctapersm 3"
    assert out.replace(".minnctapersm 3\n", "") == PTX  # nothing else changed


@pytest.mark.parametrize(
    "ptx, why",
    [(PTX.replace(".maxntid 512, 1, 1\n", ""), "no .maxntid"), (PTX + PTX, "two entries"),
     (PTX.replace("{", ".minnctapersm 2\n{"), "already bounded")],
)  # fmt: skip
def test_directive_refuses_other_texts(ptx: str, why: str) -> None:
    with pytest.raises(CodegenError, match="min_workgroups_per_sm"):
        with_min_workgroups(ptx, 2)


@pytest.mark.parametrize("bad", [0, 33, -1, 2.0, True, "2"])
def test_constraint_takes_none_or_a_small_int(bad) -> None:
    with pytest.raises(ConstraintError, match=r"min_workgroups_per_sm=.*expected None or an int in 1\.\.32"):
        wc.SchedulingConstraint(min_workgroups_per_sm=bad)


def test_constraint_default_and_repr() -> None:
    assert wc.SchedulingConstraint().min_workgroups_per_sm is None
    # the compile cache keys on the constraints' repr: a bound is a different binary
    assert "min_workgroups_per_sm=2" in repr(wc.SchedulingConstraint(min_workgroups_per_sm=2))
