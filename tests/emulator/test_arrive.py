"""``wc.arrive`` on the emulator (race and bounds checks on): G groups of S workgroups store their shares,
arrive at their group's counter, and the last of each group sums every share.  The emulator runs the
workgroups one after another, so the last to arrive is the last launched: the sum sees every share (the
ordering the fences give on a GPU), a workgroup that is not last exits before writing the output (a
second writer of a different partial sum would be a ``GlobalMemoryRaceError``), the counter is back at 0
after each launch, and launches in a row reuse it.  A counter that does not start at 0 moves which
workgroup is last.  Misuse is a trace-time error."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import arrive_kernels as ak
from wavec import Memory, f32
from wavec.errors import DTypeError, ShapeError

TARGETS = ["sm_80", "sm_90a", "gfx942"]


def _kernel(target: str, waves: int = 1):
    tpw = 64 if target == "gfx942" else 32
    return wc.compile(ak.make_last_sums(tpw, waves), {ak.T: ak.MAX_SPLITS}, target=target, backend="emulator")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("groups, splits, waves", [(3, 5, 1), (2, 8, 2), (4, 1, 1)])
def test_the_last_workgroup_sums_every_share_and_resets_the_counter(target, groups, splits, waves) -> None:
    kernel = _kernel(target, waves)
    counter = torch.zeros(groups, dtype=torch.int32)
    parts = torch.zeros(groups, ak.MAX_SPLITS)
    for _ in range(3):  # launches in a row reuse the counters the previous one left at 0
        x = torch.randn(groups, splits)
        out = torch.full((groups,), float("nan"))
        kernel(x, parts, counter, out)
        torch.testing.assert_close(out, (2 * x).sum(1), rtol=1e-6, atol=1e-5)
        torch.testing.assert_close(parts[:, :splits], 2 * x)
        assert (counter == 0).all(), counter


@pytest.mark.parametrize("target", ["sm_80", "gfx942"])
def test_a_counter_that_starts_short_of_a_round_moves_the_last(target) -> None:
    """Counters preset to S - 1 arrivals: the first workgroup of each group completes the round (it sums
    only its own share: the later shares are not stored yet), the other S - 1 start the next round, which
    none of them completes; the counter ends at S - 1."""
    splits = 4
    kernel = _kernel(target)
    x = torch.randn(2, splits)
    counter = torch.full((2,), splits - 1, dtype=torch.int32)
    parts = torch.zeros(2, ak.MAX_SPLITS)
    out = torch.full((2,), float("nan"))
    kernel(x, parts, counter, out)
    torch.testing.assert_close(out, 2 * x[:, 0])
    assert (counter == splits - 1).all(), counter


G, S = ak.G, ak.S


def test_misuse_is_named_at_trace_time() -> None:
    hw = wc.HardwareConstraint(threads_per_wave=32, vector_shapes={G: 1, S: 1})
    cons = [wc.WorkgroupConstraint(G, 1, 0), wc.WorkgroupConstraint(S, 1, 1), hw]

    def build(body, counter_dtype=wc.i32):
        @wc.wave(cons)
        def k(x: Memory[G, S, f32], counter: Memory[G, counter_dtype]):
            body(x, counter)

        return wc.compile(k, {}, target="sm_80", backend="emulator", cache=False)

    def in_region(x, counter):
        @wc.conditional(wc.read(x) > 0.0)
        def _() -> None:
            wc.arrive(counter, expected=S)

    with pytest.raises(ShapeError, match="arrive at the top level"):
        build(in_region)
    with pytest.raises(ShapeError, match="expected must be at least 1"):
        build(lambda x, c: wc.arrive(c, expected=0))
    with pytest.raises(ShapeError, match="expected must be an int or an index expression"):
        build(lambda x, c: wc.arrive(c, expected=2.5))
    with pytest.raises(DTypeError, match="counter must be a global Memory of i32"):
        build(lambda x, c: wc.arrive(c, expected=S), wc.f32)
