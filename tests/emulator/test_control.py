"""wc.allocate, wc.barrier, wc.conditional, wc.cumsum and shared-memory atomics on the emulator against
torch, fresh random inputs, sentinel-filled outputs (every element written, masked-off ones untouched);
the emulator's race checker proves the inserted barriers are needed; and the routing kernel."""

from __future__ import annotations

import functools

import pytest
import torch

import wavec as wc
from tests import control_kernels as ck
from wavec.errors import SharedMemoryRaceError
from wavec.kernels import moe_align as ma
from wavec.passes import insert_barriers


@functools.cache
def _compiled(name: str, *args):
    return wc.compile(getattr(ck, f"make_{name}")(*args), {ck.E: 64}, backend="emulator", cache=False)


@pytest.mark.parametrize("kind", ["add", "min", "max"])
@pytest.mark.parametrize("dtype", [wc.i32, wc.f32])
def test_shared_atomics_and_old_values(kind: str, dtype) -> None:
    n = 300  # two workgroups, the second partial
    ids = torch.randint(0, 64, (n,), dtype=torch.int32)
    vals = torch.randint(-9, 10, (n,)).to(dtype.torch())
    counts = torch.full((2, 64), -77, dtype=dtype.torch())
    old = torch.full((n,), -77, dtype=dtype.torch())
    _compiled("histogram", dtype, kind)(ids, vals, counts, old)
    init = {"add": 0, "min": 1 << 20, "max": -(1 << 20)}[kind]
    for g in range(2):
        sl = slice(256 * g, min(n, 256 * (g + 1)))
        want = torch.full((64,), init, dtype=dtype.torch())
        red = {"add": "sum", "min": "amin", "max": "amax"}[kind]
        want = want.scatter_reduce(0, ids[sl].long(), vals[sl], red, include_self=True)
        assert torch.equal(counts[g], want), (kind, g)
        if kind == "add":  # old values chain in some order: {0} + {old + val} == {old} + {total}, per expert
            for e in ids[sl].unique().tolist():
                mine = ids[sl] == e
                o, v = old[sl][mine].tolist(), vals[sl][mine].tolist()
                assert sorted([0] + [a + b for a, b in zip(o, v)]) == sorted(o + [want[e].item()]), e


@pytest.mark.parametrize("waves", [1, 2, 4])
@pytest.mark.parametrize("dtype", [wc.i32, wc.f32])
def test_cumsum_within_and_across_waves(waves: int, dtype) -> None:
    x = torch.randint(-50, 50, (600,)).to(dtype.torch())  # three tiles, the last partial
    y = torch.full_like(x, -7)
    rev = torch.full_like(x, -7)
    wc.compile(ck.make_scan(waves, 256, dtype), {}, backend="emulator", cache=False)(x, y, rev)
    tiles = list(x.split(256))
    want = torch.cat([t.cumsum(0).to(x.dtype) for t in tiles])
    assert torch.equal(y, want)
    for i, t in enumerate(tiles[:2]):  # full tiles: the exclusive sums read back reversed
        excl = t.cumsum(0).to(x.dtype) - t
        assert torch.equal(rev[256 * i : 256 * (i + 1)], excl.flip(0))


@pytest.mark.parametrize("with_when", [False, True])
def test_conditional_masked_store_writes_nothing(with_when: bool) -> None:
    x = torch.randn(200)
    out = torch.full((200,), 12345.0)
    wc.compile(ck.make_masked_store(with_when), {}, backend="emulator", cache=False)(x, out)
    want = torch.where(x > 0, 2 * x, torch.full_like(x, 12345.0))
    if with_when:  # only the first workgroup's region runs
        want[64:] = 12345.0
    assert torch.equal(out, want)


def test_conditional_condition_must_be_one_element_per_thread() -> None:
    @wc.wave(ck.histogram_constraints())
    def bad(ids: wc.Memory[ck.N, wc.i32], out: wc.Memory[ck.E, wc.i32]):
        c = wc.read(out)

        @wc.conditional(c > 0)
        def _() -> None:
            wc.write(c, out)

    with pytest.raises(wc.WavecError, match="holds 2 elements per thread"):
        wc.compile(bad, {ck.E: 64}, backend="emulator", cache=False)


@pytest.mark.parametrize("explicit", [False, True])
def test_exchange_through_shared_buffer(explicit: bool) -> None:
    x = torch.randn(256)
    out = torch.full_like(x, float("nan"))
    wc.compile(ck.make_exchange(explicit), {}, backend="emulator", cache=False)(x, out)
    assert torch.equal(out, torch.cat([t.flip(0) + 1 for t in x.split(128)]))


def test_missing_barriers_are_races(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the hazard pass's barriers the emulator reports the race it would have been."""
    monkeypatch.setattr(insert_barriers._Hazards, "walk", lambda self, g, state, mutate, region=False: {})
    x = torch.randn(256)
    with pytest.raises(SharedMemoryRaceError):
        wc.compile(ck.make_exchange(), {}, backend="emulator", cache=False)(x, torch.empty_like(x))
    ids = torch.randint(0, 64, (256,), dtype=torch.int32)
    with pytest.raises(SharedMemoryRaceError):
        k = wc.compile(ck.make_histogram(), {ck.E: 64}, backend="emulator", cache=False)
        k(ids, torch.ones(256, dtype=torch.int32), torch.empty(1, 64, dtype=torch.int32), torch.empty_like(ids))


def test_loop_carried_shared_hazard() -> None:
    x = torch.randn(5, 128)
    out = torch.full((128,), float("nan"))
    wc.compile(ck.make_loop_accumulate(), {}, backend="emulator", cache=False)(x, out)
    want = []
    for t in x.split(64, dim=1):
        buf = torch.zeros(64)
        for k in range(5):
            buf = buf.flip(0) + t[k]
        want.append(buf)
    torch.testing.assert_close(out, torch.cat(want))


def test_shared_budget_is_a_clear_error() -> None:
    @wc.wave(ck.histogram_constraints())
    def big(ids: wc.Memory[ck.N, wc.i32], out: wc.Memory[ck.E, wc.i32]):
        buf = wc.allocate((ck.E,), wc.f32, distributed_shape=(1 << 20,))
        wc.write(wc.cast(wc.read(out), wc.f32), buf)

    with pytest.raises(wc.WavecError, match="shared memory: .* bytes exceed"):
        wc.compile(big, {ck.E: 64}, backend="emulator", cache=False)


CASES = [(1, 1, 8, 2), (7, 3, 8, 4), (64, 8, 64, 16), (256, 8, 512, 16), (100, 6, 33, 7), (256, 8, 256, 64)]


@pytest.mark.parametrize("t, k, e, b", CASES)
def test_moe_align_single_launch(t: int, k: int, e: int, b: int) -> None:
    ids = torch.randint(0, e, (t, k), dtype=torch.int32)
    got = ma.moe_align_block_size(ids, e, b, backend="emulator")
    ma.check_alignment(got, ma.reference(ids, e, b), b)


@pytest.mark.parametrize("t, k, e, b", [(300, 8, 64, 16), (2600, 2, 33, 5), (0, 8, 8, 4), (300, 8, 256, 16)])
def test_moe_align_three_launches(monkeypatch: pytest.MonkeyPatch, t: int, k: int, e: int, b: int) -> None:
    monkeypatch.setattr(ma, "SMALL_TOKENS", 0)
    ids = torch.randint(0, e, (t, k), dtype=torch.int64)  # int64 ids are converted
    got = ma.moe_align_block_size(ids, e, b, backend="emulator")
    ma.check_alignment(got, ma.reference(ids, e, b), b)


def test_moe_align_every_block_used_under_bounds_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """WAVEC_CHECK_BOUNDS=1, every expert used so the last segment ends at the last block: the block-end
    histogram's extra slot (``distributed_shape=(blocks + 1,)``) is in bounds, not an error (the check
    bounds a shared buffer by its tile, from its base); and the knob is in the kernel cache's key."""
    ids = (torch.randperm(16) % 8).reshape(8, 2).int()
    plain = ma.moe_align_block_size(ids, 8, 16, backend="emulator")
    monkeypatch.setenv("WAVEC_CHECK_BOUNDS", "1")
    ma._CALLS.clear()
    got = ma.moe_align_block_size(ids, 8, 16, backend="emulator")
    ma.check_alignment(got, ma.reference(ids, 8, 16), 16)
    assert all(torch.equal(a, b) for a, b in zip(got, plain))
    checked = [k for k in ma._COMPILED.values() if k.artifact.metadata.bounds_checks]
    assert checked and any("atomic" in c[2] for k in checked for c in k.artifact.metadata.bounds_checks)


def test_moe_align_skewed_routing() -> None:
    ids = torch.zeros(128, 8, dtype=torch.int32)  # every id in expert 0: one long segment, the rest empty
    ids[::7] = 5
    got = ma.moe_align_block_size(ids, 64, 16, backend="emulator")
    ma.check_alignment(got, ma.reference(ids, 64, 16), 16)


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.zeros(4, 2), 8, 16), "int32 or int64"),
        ((torch.zeros(4, 2, dtype=torch.int32), 513, 16), "num_experts must be in 1..512"),
        ((torch.zeros(4, 2, dtype=torch.int32), 8, 1), "block_size must be an int >= 2"),
    ],
)
def test_moe_align_bad_arguments(args, match: str) -> None:
    with pytest.raises(wc.WavecError, match=match):
        ma.moe_align_block_size(*args, backend="emulator")


def test_moe_align_expert_out_of_range_is_named() -> None:
    ids = torch.full((4, 2), 9, dtype=torch.int32)
    with pytest.raises(wc.WavecError, match=r"topk_ids holds 9, outside \[0, 8\)"):
        ma.moe_align_block_size(ids, 8, 4, backend="emulator")


def test_moe_align_torch_op_on_cpu() -> None:
    op = ma.register_moe_align_op()
    ids = torch.randint(0, 16, (20, 2), dtype=torch.int32)
    ma.check_alignment(op(ids, 16, 8), ma.reference(ids, 16, 8), 8)
    fake = torch.library.opcheck(op, (ids, 16, 8), test_utils=("test_schema", "test_faketensor"))
    assert all(v == "SUCCESS" for v in fake.values())


@pytest.mark.parametrize("used", [False, True])
@pytest.mark.parametrize("kind", ["add", "min", "max"])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16])
def test_shared_half_atomics(dtype, kind: str, used: bool) -> None:
    """f16/bf16 atomics on a shared buffer: unused adds are packed f16x2 pair reductions (bf16 pairs where
    the target has them), the rest compare-and-swap loops; every element of ``out`` is written."""
    vec, width = 8, 256
    k = wc.compile(
        ck.make_shared_index_add(dtype, kind, vec, used), {wc.sym.R: 3, ck.X: width}, backend="emulator", cache=False
    )
    if kind == "add" and not used and dtype == wc.f16:
        assert "add.noftz.f16x2" in k.mlir
    src = torch.randint(-9, 10, (11, width)).to(dtype.torch())  # three workgroups, the last partial
    index = torch.randint(0, 3, (11,), dtype=torch.int32)
    out = torch.full((3, 3, width), float("nan"), dtype=dtype.torch())
    old = torch.full_like(src, float("nan"))
    k(src, index, out, old)
    ck.check_shared_index_add(src, index, out, old, kind, used)
