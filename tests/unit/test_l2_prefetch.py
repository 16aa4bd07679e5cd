"""``SchedulingConstraint(l2_prefetch=B)``: its validation and the ``.L2::{B}B`` qualifier that
``codegen/l2_prefetch`` writes on each ``cp.async`` copy (the compiled effect: the binary tier)."""

from __future__ import annotations

import pytest

import wavec as wc
from wavec.codegen.l2_prefetch import with_l2_prefetch
from wavec.errors import CodegenError, ConstraintError

PTX = """\tcp.async.cg.shared.global [%rd35], [%rd265], 16, %r55;
\tcp.async.ca.shared.global [%rd36+1088], [%rd270], 8;
\tcp.async.commit_group;
\tcp.async.wait_group 0;
"""


@pytest.mark.parametrize("size", [64, 128, 256])
def test_qualifier_on_every_copy_only(size: int) -> None:
    out = with_l2_prefetch(PTX, size)
    lines = out.splitlines()
    assert lines[0] == f"\tcp.async.cg.shared.global.L2::{size}B [%rd35], [%rd265], 16, %r55;"
    assert lines[1] == f"\tcp.async.ca.shared.global.L2::{size}B [%rd36+1088], [%rd270], 8;"
    assert lines[2:] == PTX.splitlines()[2:]  # commits and waits untouched


def test_refuses_a_text_with_a_prefetch_size() -> None:
    with pytest.raises(CodegenError, match="already has an L2 prefetch size"):
        with_l2_prefetch(with_l2_prefetch(PTX, 128), 128)


@pytest.mark.parametrize("bad", [0, 32, 512, 128.0, True, "128"])
def test_constraint_takes_none_or_a_size(bad) -> None:
    with pytest.raises(ConstraintError, match=r"l2_prefetch=.*expected None, 64, 128 or 256"):
        wc.SchedulingConstraint(l2_prefetch=bad)


def test_constraint_default_and_repr() -> None:
    assert wc.SchedulingConstraint().l2_prefetch is None
    # the compile cache keys on the constraints' repr: a prefetch size is a different binary
    assert "l2_prefetch=128" in repr(wc.SchedulingConstraint(l2_prefetch=128))
