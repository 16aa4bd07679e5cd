"""Kernels of ``wc.allocate`` / ``wc.barrier`` / ``wc.conditional`` / ``wc.cumsum`` and shared-memory
atomics, shared by the emulator, IR, binary and GPU tiers."""

from __future__ import annotations

import sympy

import wavec as wc
from wavec import Memory, Register

N, E, X = wc.sym.N, wc.sym.E, wc.sym.X


def histogram_constraints(experts: int = 64, tile: int = 256, waves: int = 4, tpw: int = 32) -> list:
    return [
        wc.WorkgroupConstraint(N, tile, 0),
        wc.WaveConstraint(N, tile // waves),
        wc.WorkgroupConstraint(E, experts, None),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={N: tpw, E: experts}),
    ]


def make_histogram(dtype=wc.i32, kind: str = "add", tpw: int = 32) -> wc.WaveKernel:
    """Per workgroup: a shared histogram of ``ids`` (shared atomics whose old values are ranks), written
    to ``counts`` [workgroups, E] and ``ranks`` [N]."""
    fn = {"add": wc.atomic_add, "min": wc.atomic_min, "max": wc.atomic_max}[kind]
    init = {"add": 0, "min": 1 << 20, "max": -(1 << 20)}[kind]
    G = wc.sym.G

    @wc.wave(histogram_constraints(tpw=tpw))
    def histogram(ids: Memory[N, wc.i32], vals: Memory[N, dtype], counts: Memory[G, E, dtype], old: Memory[N, dtype]):
        hist = wc.allocate((E,), dtype)
        wc.write(Register[E, dtype](init), hist)
        prev = fn(wc.read(vals), hist, mapping={E: wc.read(ids)})
        wc.write(prev, old)
        wc.write(wc.read(hist), counts, mapping={G: wc.tile_start(N) // 256})

    return histogram


def make_scan(waves: int = 4, tile: int = 256, dtype=wc.i32) -> wc.WaveKernel:
    """``y = cumsum(x)`` per workgroup tile of X; ``excl`` through a shared buffer read back reversed."""

    @wc.wave(
        [
            wc.WorkgroupConstraint(X, tile, 0),
            wc.WaveConstraint(X, tile // waves),
            wc.HardwareConstraint(threads_per_wave=32, vector_shapes={X: tile // waves}),
        ]
    )
    def scan(x: Memory[X, dtype], y: Memory[X, dtype], rev: Memory[X, dtype]):
        v = wc.read(x)
        s = wc.cumsum(v, X)
        wc.write(s, y)
        buf = wc.allocate((X,), dtype)
        wc.write(s - v, buf)
        first = wc.tile_start(X)
        wc.write(wc.read(buf, mapping={X: (tile - 1) - (wc.index(X) - first) + first}), rev)

    return scan


def make_masked_store(with_when: bool = False) -> wc.WaveKernel:
    """``out = 2 * x`` only where ``x > 0`` (one element per lane: a real branch), the rest untouched;
    ``with_when``: the whole region only in the first workgroup."""

    @wc.wave(
        [
            wc.WorkgroupConstraint(X, 64, 0),
            wc.WaveConstraint(X, 32),
            wc.HardwareConstraint(threads_per_wave=32, vector_shapes={X: 32}),
        ]
    )
    def masked_store(x: Memory[X, wc.f32], out: Memory[X, wc.f32]):
        v = wc.read(x)

        def body() -> None:
            @wc.conditional(v > 0.0)
            def _() -> None:
                wc.write(v * 2.0, out)

        if with_when:
            wc.conditional(sympy.Lt(wc.tile_start(X), 1))(body)
        else:
            body()

    return masked_store


def make_exchange(explicit_barrier: bool = False) -> wc.WaveKernel:
    """Each wave writes its tile to a shared buffer and reads its neighbour's (reversed within the
    workgroup): write -> read across waves needs a barrier; then overwrite (read -> write)."""

    @wc.wave(
        [
            wc.WorkgroupConstraint(X, 128, 0),
            wc.WaveConstraint(X, 32),
            wc.HardwareConstraint(threads_per_wave=32, vector_shapes={X: 32}),
        ]
    )
    def exchange(x: Memory[X, wc.f32], out: Memory[X, wc.f32]):
        buf = wc.allocate((X,), wc.f32)
        wc.write(wc.read(x), buf)
        if explicit_barrier:
            wc.barrier()
        first = wc.tile_start(X)
        mirrored = wc.read(buf, mapping={X: 127 - (wc.index(X) - first) + first})
        wc.write(mirrored + 1.0, buf)
        wc.write(wc.read(buf), out)

    return exchange


def make_loop_accumulate() -> wc.WaveKernel:
    """A shared buffer updated in a loop (read, then write in each iteration: the loop-carried hazard)."""
    K = wc.sym.K

    @wc.wave(
        [
            wc.WorkgroupConstraint(X, 64, 0),
            wc.WaveConstraint(X, 32),
            wc.TilingConstraint(K, 1),
            wc.HardwareConstraint(threads_per_wave=32, vector_shapes={X: 32, K: 1}),
        ]
    )
    def loop_accumulate(x: Memory[K, X, wc.f32], out: Memory[X, wc.f32]):
        buf = wc.allocate((X,), wc.f32)
        wc.write(Register[X, wc.f32](0.0), buf)
        first = wc.tile_start(X)
        acc = Register[X, wc.f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[X, wc.f32]) -> Register[X, wc.f32]:
            mirrored = wc.read(buf, mapping={X: 63 - (wc.index(X) - first) + first})
            wc.write(mirrored + wc.cast(wc.sum(wc.read(x), K), wc.f32), buf)
            return acc

        wc.write(wc.read(buf) + body, out)

    return loop_accumulate


def make_shared_index_add(
    dtype=wc.f16, kind: str = "add", vec: int = 8, used: bool = False, tpw: int = 32
) -> wc.WaveKernel:
    """Per workgroup of four source rows: ``buf[index[m], :] <op>= src[m, :]`` into a shared [R, N] buffer
    (runs of ``vec`` halves along N: packed pairs where the target has them), then the buffer to
    ``out[workgroup]``; ``used`` also writes the old values to ``old``."""
    M, R, G = wc.sym.M, wc.sym.R, wc.sym.G
    fn = {"add": wc.atomic_add, "min": wc.atomic_min, "max": wc.atomic_max}[kind]
    init = SHARED_INIT[kind]

    @wc.wave(
        [
            wc.WorkgroupConstraint(M, 4, 0),
            wc.WaveConstraint(M, 1),
            wc.WorkgroupConstraint(X, X, None),
            wc.WorkgroupConstraint(R, R, None),
            wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, X: tpw * vec, R: 1}),
        ]
    )
    def shared_index_add(
        src: Memory[M, X, dtype], index: Memory[M, wc.i32], out: Memory[G, R, X, dtype], old: Memory[M, X, dtype]
    ):  # fmt: skip
        buf = wc.allocate((R, X), dtype)
        wc.write(Register[R, X, dtype](init), buf)
        prev = fn(wc.read(src), buf, mapping={R: wc.read(index)})
        if used:
            wc.write(prev, old)
        wc.write(wc.read(buf), out, mapping={G: wc.tile_start(M) // 4})

    return shared_index_add


SHARED_INIT = {"add": 0.0, "min": 1000.0, "max": -1000.0}  # exact in every float dtype


def check_shared_index_add(src, index, out, old, kind: str, used: bool) -> None:
    """``out``/``old`` of ``make_shared_index_add`` against torch, exactly: integer-valued ``src`` makes
    every order of the updates round the same.  Old values: add chains ``{init} + {old + v} == {old} +
    {total}`` per column; min/max see the total's side of every old value and the init once."""
    import torch

    init = SHARED_INIT[kind]
    red = {"add": "sum", "min": "amin", "max": "amax"}[kind]
    rows, width = out.shape[1], out.shape[2]
    for g in range(out.shape[0]):
        s, i = src[4 * g : 4 * g + 4].float(), index[4 * g : 4 * g + 4].long()
        want = torch.full((rows, width), init, device=s.device).scatter_reduce(
            0, i[:, None].expand(-1, width), s, red, include_self=True
        )
        assert torch.equal(out[g].float(), want), (kind, g, (out[g].float() - want).abs().max())
        if not used:
            continue
        o = old[4 * g : 4 * g + 4].float()
        for r in i.unique().tolist():
            mine = i == r
            if kind == "add":
                lhs = torch.cat([torch.full((1, width), init, device=s.device), o[mine] + s[mine]]).sort(0).values
                rhs = torch.cat([o[mine], want[r][None]]).sort(0).values
                assert torch.equal(lhs, rhs), (g, r)
            else:
                beyond = o[mine] >= want[r] if kind == "min" else o[mine] <= want[r]
                assert bool(beyond.all()) and bool((o[mine] == init).any(0).all()), (g, r)
