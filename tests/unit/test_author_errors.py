"""Issue #20 item 8: bad kernels and constraint choices a user can write raise a ``wavec`` error (never an
internal ``ValueError`` / ``IndexError`` / ``AssertionError`` / ``KeyError``) whose message speaks the
author's terms: it names the symbol, constraint or argument at fault and, where a kernel line is to
blame, shows that line (the constraint's own line for a constraint choice).

Every case is one bad choice in an otherwise working kernel defined in this file, so the line each error
must show is a line of this file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import sympy

import wavec as wc
from wavec import Memory, Register, bf16, f16, f32
from wavec.errors import WavecError

M, N, K, D, Q = wc.sym.M, wc.sym.N, wc.sym.K, wc.sym.D, wc.sym.Q
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
NV = wc.MMAType.NV_F32_16x8x16_F16
DEFAULT_SUBS = {BM: 64, BN: 64, BK: 32}


def gemm_constraints(
    waves=(2, 2), tpw: int = 32, mma=NV, vector_shapes: dict | None = None, extra: tuple = (), loop: bool = True
) -> list:
    cons = [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, BM / waves[0]),
        wc.WaveConstraint(N, BN / waves[1]),
        wc.HardwareConstraint(threads_per_wave=tpw, mma_type=mma, vector_shapes=vector_shapes or {}),
        *extra,
    ]
    return [*cons, wc.TilingConstraint(K, BK)] if loop else cons


def gemm(cons: list | None = None, a_dtype=f16) -> wc.WaveKernel:
    @wc.wave(cons if cons is not None else gemm_constraints())
    def gemm(a: Memory[M, K, a_dtype], b: Memory[N, K, a_dtype], c: Memory[M, N, f32]):
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body, c)

    return gemm


def rowwise(cons_extra=(), vector_shapes=None, wave_m=1) -> list:
    return [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, wave_m),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes=vector_shapes or {M: 1, N: 256}),
        *cons_extra,
    ]


def elementwise(body: Callable, cons: list | None = None, out_dims=(M, N)) -> wc.WaveKernel:
    out_t = Memory[(*out_dims, f32)]

    @wc.wave(cons if cons is not None else rowwise())
    def elementwise(x: Memory[M, N, f32], out: out_t):
        body(x, out)

    return elementwise


def _write_row_sum(x, out):
    wc.write(wc.sum(wc.read(x), N), out)


def _write_wrong_shape(x, out):
    wc.write(wc.read(x) * 2.0, out)


def _map_unknown_dim(x, out):
    wc.write(wc.read(x, mapping={K: 0}), out)


def _permute_unknown_dim(x, out):
    wc.write(wc.permute(wc.read(x), (N, K)), out)


def _register_of_text(x, out):
    wc.write(wc.read(x) + Register[M, N, f32]("zero"), out)


def _tile_start_of_untiled(x, out):
    wc.write(wc.read(x, mapping={M: wc.tile_start(K)}), out)


def _cast_to_text(x, out):
    wc.write(wc.cast(wc.read(x), "f16"), out)


def undistributed() -> wc.WaveKernel:
    @wc.wave(rowwise(vector_shapes={M: 1, N: 256, Q: 1}))
    def undistributed(x: Memory[M, N, Q, f32], out: Memory[M, N, Q, f32]):
        wc.write(wc.read(x), out)

    return undistributed


ROW_SUBS = {BM: 4, BN: 256}


@dataclass
class Bad:
    id: str
    run: Callable[[], object]
    names: tuple[str, ...]  # what the message must name (symbols, constraints, arguments)
    line: str | None  # a piece of the kernel source line the error must show


def _compile(make: Callable[[], wc.WaveKernel], subs: dict) -> Callable[[], object]:
    """Define (constraints are checked as they are made) and compile, when the case runs."""
    return lambda: wc.compile(make(), subs, backend="emulator", cache=False)


CASES = [
    Bad(
        "BLOCK_M=48: wave tile 24 vs the 16-row mma",
        _compile(lambda: gemm(), {**DEFAULT_SUBS, BM: 48}),
        ("BLOCK_M = 48", "WaveConstraint(M, BLOCK_M/2)", "24", "16 rows", "NV_F32_16x8x16_F16"),
        "return wc.mma(wc.read(a), wc.read(b), acc)",
    ),
    Bad(
        "BLOCK_K=24: rows of 3 copy runs over 128 threads",
        _compile(lambda: gemm(), {**DEFAULT_SUBS, BK: 24}),
        ("BLOCK_K = 24", "TilingConstraint(K, BLOCK_K)", "128 threads"),
        "return wc.mma(wc.read(a), wc.read(b), acc)",
    ),
    Bad(
        "BLOCK_N=48: wave tile 24 vs the 8-column mma",
        _compile(lambda: gemm(), {**DEFAULT_SUBS, BN: 40}),
        ("BLOCK_N = 40", "WaveConstraint(N, BLOCK_N/2)", "20", "8 columns"),
        "return wc.mma(wc.read(a), wc.read(b), acc)",
    ),
    Bad(
        "BLOCK_N=12: a 6-column wave tile, neither a multiple nor a divisor of the mma's 8",
        _compile(lambda: gemm(), {**DEFAULT_SUBS, BN: 12}),
        ("BLOCK_N = 12", "WaveConstraint(N, BLOCK_N/2)", "tile of 6", "8 columns", "nor a divisor"),
        "return wc.mma(wc.read(a), wc.read(b), acc)",
    ),
    Bad(
        "waves=(3, 2): wave tile 64/3",
        _compile(lambda: gemm(gemm_constraints(waves=(3, 2))), DEFAULT_SUBS),
        ("BLOCK_M = 64", "WaveConstraint(M, BLOCK_M/3)", "64/3"),
        "wc.WaveConstraint(M, BM / waves[0])",
    ),
    Bad(
        "wave tile larger than the workgroup tile",
        _compile(lambda: gemm(gemm_constraints(waves=(sympy.Rational(1, 2), 2))), DEFAULT_SUBS),
        ("BLOCK_M = 64", "WaveConstraint(M, 2*BLOCK_M)", "128", "WorkgroupConstraint(M, BLOCK_M, 0)"),
        "wc.WaveConstraint(M, BM / waves[0])",
    ),
    Bad(
        "64 waves: 2048 threads",
        _compile(lambda: gemm(gemm_constraints(waves=(8, 8))), {**DEFAULT_SUBS, BM: 128, BN: 512}),
        ("WaveConstraint(M, BLOCK_M/8)", "WaveConstraint(N, BLOCK_N/8)", "2048", "1024"),
        "wc.WaveConstraint(M, BM / waves[0])",
    ),
    Bad(
        "BLOCK_M unbound",
        _compile(lambda: gemm(), {k: v for k, v in DEFAULT_SUBS.items() if k != BM}),
        ("BLOCK_M", "WorkgroupConstraint(M, BLOCK_M, 0)", "subs"),
        "wc.WorkgroupConstraint(M, BM, 0)",
    ),
    Bad(
        "threads_per_wave=48",
        lambda: wc.HardwareConstraint(threads_per_wave=48),
        ("threads_per_wave", "48"),
        "lambda: wc.HardwareConstraint(threads_per_wave=48)",
    ),
    Bad(
        "threads_per_wave=64 with the 32-lane mma",
        _compile(lambda: gemm(gemm_constraints(tpw=64)), DEFAULT_SUBS),
        ("threads_per_wave=64", "NV_F32_16x8x16_F16"),
        "wc.HardwareConstraint(threads_per_wave=tpw, mma_type=mma",
    ),
    Bad(
        "bf16 operands with the f16 mma",
        _compile(lambda: gemm(a_dtype=bf16), DEFAULT_SUBS),
        ("NV_F32_16x8x16_F16", "f16", "bf16"),
        "return wc.mma(wc.read(a), wc.read(b), acc)",
    ),
    Bad(
        "workgroup_dim=3",
        lambda: wc.WorkgroupConstraint(M, BM, 3),
        ("WorkgroupConstraint(M", "workgroup_dim"),
        "lambda: wc.WorkgroupConstraint(M, BM, 3)",
    ),
    Bad(
        "two WaveConstraints on M",
        _compile(lambda: gemm([*gemm_constraints(), wc.WaveConstraint(M, 16)]), DEFAULT_SUBS),
        ("WaveConstraint", "M"),
        "wc.WaveConstraint(M, 16)",
    ),
    Bad(
        "WaveConstraint on a dim without a workgroup grid axis",
        _compile(lambda: gemm(gemm_constraints(extra=(wc.WaveConstraint(K, 16),))), DEFAULT_SUBS),
        ("WaveConstraint(K, 16)", "WorkgroupConstraint"),
        "extra=(wc.WaveConstraint(K, 16),)",
    ),
    Bad(
        "no TilingConstraint for the loop dim",
        _compile(lambda: gemm(gemm_constraints(loop=False)), {BM: 64, BN: 64}),
        ("K", "TilingConstraint"),
        "@wc.iterate(K, init_args=[acc])",
    ),
    Bad(
        "mma without an mma_type",
        _compile(lambda: gemm(gemm_constraints(mma=None, vector_shapes={M: 1, N: 32, K: 32})), DEFAULT_SUBS),
        ("mma_type",),
        "return wc.mma(wc.read(a), wc.read(b), acc)",
    ),
    Bad(
        "a register tile with a repeated dim",
        lambda: Register[M, M, f32],
        ("Register", "(M, M)"),
        "lambda: Register[M, M, f32]",
    ),
    Bad(
        "a sum over N, which workgroups split",
        _compile(lambda: elementwise(_write_row_sum, out_dims=(M,)), {**ROW_SUBS, N: 1024}),
        ("N", "WorkgroupConstraint"),
        "wc.write(wc.sum(wc.read(x), N), out)",
    ),
    Bad(
        "write of [M, N] to memory [N]",
        _compile(lambda: elementwise(_write_wrong_shape, out_dims=(N,)), ROW_SUBS),
        ("[M, N]", "[N]"),
        "wc.write(wc.read(x) * 2.0, out)",
    ),
    Bad(
        "mapping on a dim the memory does not have",
        _compile(lambda: elementwise(_map_unknown_dim), ROW_SUBS),
        ("mapping", "K"),
        "wc.write(wc.read(x, mapping={K: 0}), out)",
    ),
    Bad(
        "permute to a dim the value does not have",
        _compile(lambda: elementwise(_permute_unknown_dim), ROW_SUBS),
        ("permute", "K"),
        "wc.write(wc.permute(wc.read(x), (N, K)), out)",
    ),
    Bad(
        "a dim no constraint distributes",
        _compile(lambda: undistributed(), ROW_SUBS),
        ("Q",),
        "wc.write(wc.read(x), out)",
    ),
    Bad(
        "vector_shapes[N] not a divisor of the wave tile",
        _compile(
            lambda: elementwise(lambda x, o: wc.write(wc.read(x), o), rowwise(vector_shapes={M: 1, N: 96})), ROW_SUBS
        ),
        ("vector_shapes[N] = 96", "BLOCK_N = 256", "WorkgroupConstraint(N, BLOCK_N, 1)"),
        "lambda x, o: wc.write(wc.read(x), o)",
    ),
    Bad(
        "vector_shapes missing a dim",
        _compile(lambda: elementwise(lambda x, o: wc.write(wc.read(x), o), rowwise(vector_shapes={N: 256})), ROW_SUBS),
        ("vector_shapes", "M"),
        "lambda x, o: wc.write(wc.read(x), o)",
    ),
    Bad(
        "a register filled with a string",
        _compile(lambda: elementwise(_register_of_text), ROW_SUBS),
        ("Register", "'zero'"),
        'wc.write(wc.read(x) + Register[M, N, f32]("zero"), out)',
    ),
    Bad(
        "tile_start of a dim no WorkgroupConstraint tiles",
        _compile(lambda: elementwise(_tile_start_of_untiled, out_dims=(N,)), ROW_SUBS),
        ("wc.tile_start(K)", "WorkgroupConstraint"),
        "wc.write(wc.read(x, mapping={M: wc.tile_start(K)}), out)",
    ),
    Bad(
        "cast to a string dtype",
        _compile(lambda: elementwise(_cast_to_text), ROW_SUBS),
        ("cast", "'f16'"),
        'wc.write(wc.cast(wc.read(x), "f16"), out)',
    ),
    Bad(
        "a vector_shapes key given as a string",
        _compile(
            lambda: elementwise(lambda x, o: wc.write(wc.read(x), o), rowwise(vector_shapes={"M": 1, N: 256})), ROW_SUBS
        ),
        ("vector_shapes", "'M'"),
        "wc.HardwareConstraint(threads_per_wave=32, vector_shapes=vector_shapes",
    ),
    Bad(
        "an unknown symbol in subs",
        _compile(lambda: gemm(), {**DEFAULT_SUBS, wc.sym.BLOCK_Q: 4}),
        ("BLOCK_Q", "subs"),
        None,
    ),
    Bad(
        "num_stages = 0",
        _compile(lambda: gemm(gemm_constraints(extra=(wc.SchedulingConstraint(num_stages=0),))), DEFAULT_SUBS),
        ("num_stages", "0"),
        "extra=(wc.SchedulingConstraint(num_stages=0),)",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_choice_raises_a_wavec_error_in_the_authors_terms(case: Bad) -> None:
    with pytest.raises(Exception) as info:  # noqa: PT011 - the class is what the test checks
        case.run()
    err = info.value
    assert isinstance(err, WavecError), f"{type(err).__name__} leaked: {err}"
    text = str(err)
    missing = [n for n in case.names if n not in text]
    assert not missing, f"message does not name {missing}:\n{text}"
    if case.line is not None:
        assert err.loc is not None and case.line in err.loc.code, f"no source line {case.line!r}:\n{text}"
        assert err.loc.filename == __file__


def test_cases_are_distinct() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


def test_errors_survive_pickling() -> None:
    """wavec errors cross process pools (parallel compiles, the tuner's workers) with their message, source
    location and fields; subclasses whose ``__init__`` takes other arguments too."""
    import pickle

    from wavec.errors import AlignmentMiss, ConstraintError, SourceLoc

    err = ConstraintError(SourceLoc("k.py", 3, "x = 1"), message="BLOCK_M = 48")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ConstraintError and str(back) == str(err) and back.loc == err.loc
    assert back.fields == {"message": "BLOCK_M = 48"}
    miss = pickle.loads(pickle.dumps(AlignmentMiss({"N": 5}, kernel="k", arg="x", message="odd")))
    assert miss.values == {"N": 5} and "argument 'x'" in str(miss)
