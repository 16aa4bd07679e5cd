"""The compile-cache key covers every input of a compilation, observed through ``wc.compile`` (emulator).

What the key must cover (``wavec/compiler.py``): the printed trace (kernel body, argument shapes and dtypes,
closure values as traced), the constraint list, ``subs``, the target and the versions of wavec and IREE.

Not in the key, on purpose: the **backend**.  An :class:`Artifact` is the same for every backend that can
run its target — the CUDA launcher loads ``artifact.binary``, the emulator interprets ``artifact.mlir`` of
the very same compilation — so an artifact built while emulating is the one a GPU process would build, and
sharing it is correct (``test_backend_shares_the_artifact``).  ``torch_op=`` (registration only) and
``print_ir_after=`` (it bypasses the read, not the result) are not in the key either.

How a change is observed: ``cache_key`` is wrapped to record each key ``wc.compile`` computes, and
``compiled.stats.cached`` says whether the artifact came from the cache.  A changed input must give a new
key *and* a fresh build whose result reflects the change (so a stale hit is impossible); the same inputs
must hit, from memory and from disk, byte-identically.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wavec as wc
import wavec.compiler as compiler
from wavec import Memory
from wavec.errors import OptionError
from wavec.kernels.elementwise import rowwise_constraints
from wavec.kernels.gemm import BLOCK_K, BLOCK_M, BLOCK_N, GROUP_M, NUM_STAGES, make_gemm
from wavec.runtime.cache import ENTRY_SUFFIX, default_cache
from wavec.tuning.plan import DEFAULT_SUBS

M, N = wc.sym.M, wc.sym.N
BM, BN = wc.sym.BLOCK_M, wc.sym.BLOCK_N
SUBS = {BM: 4, BN: 256}
TORCH = {"f32": torch.float32, "f16": torch.float16}


def make_affine(scale=2.0, dtype=wc.f32, op: str = "add", constraints=None, name: str = "affine"):
    """``out = a * scale (+|-|max) bias[None, :]``; ``scale``, ``dtype`` and ``op`` are closure values."""

    def affine(a: Memory[M, N, dtype], bias: Memory[N, dtype], out: Memory[M, N, dtype]):
        x = wc.read(a) * scale
        y = wc.read(bias)[None, :]
        wc.write(x + y if op == "add" else x - y if op == "sub" else wc.maximum(x, y), out)

    affine.__name__ = affine.__qualname__ = name
    return wc.wave(constraints or rowwise_constraints(32, 16 // dtype.bytes))(affine)


def affine_ref(a, bias, scale, op):
    x = a * scale
    y = bias[None, :]
    return x + y if op == "add" else x - y if op == "sub" else torch.maximum(x, y)


def check_affine(kernel, scale=2.0, dtype="f32", op="add", m=5, n=264) -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, n, generator=g).to(TORCH[dtype])
    bias = torch.randn(n, generator=g).to(TORCH[dtype])
    out = torch.full((m, n), float("nan"), dtype=TORCH[dtype])
    kernel(a, bias, out)
    tol = 2e-3 if dtype == "f16" else 1e-6
    torch.testing.assert_close(out, affine_ref(a, bias, scale, op), rtol=tol, atol=tol)


@pytest.fixture
def keys(monkeypatch):
    """Every cache key ``wc.compile`` computes, in order."""
    seen: list[str] = []
    real = compiler.cache_key

    def spy(**kw):
        seen.append(real(**kw))
        return seen[-1]

    monkeypatch.setattr(compiler, "cache_key", spy)
    return seen


def compile_(kernel, subs=SUBS, **kw):
    return wc.compile(kernel, subs, backend=kw.pop("backend", "emulator"), **kw)


# ------------------------------------------------------------------------------ same inputs: hit


def test_identical_inputs_hit_memory_then_disk_byte_identical(keys) -> None:
    first = compile_(make_affine())
    assert not first.stats.cached
    again = compile_(make_affine())  # a new WaveKernel object from the same factory: same trace
    assert again.stats.cached and again.artifact is first.artifact
    default_cache().clear_memory()
    from_disk = compile_(make_affine())
    assert from_disk.stats.cached and from_disk.artifact is not first.artifact
    assert from_disk.artifact.to_bytes() == first.artifact.to_bytes()
    assert len(set(keys)) == 1
    entries = list(Path(os.environ["WAVEC_CACHE_DIR"]).rglob(f"*{ENTRY_SUFFIX}"))
    assert [p.stem for p in entries] == [keys[0]]
    check_affine(from_disk)


def test_rebuild_is_reproducible() -> None:
    """Two builds of the same inputs give byte-identical artifacts (so a hit equals what a miss builds)."""
    a = compile_(make_affine(), cache=False)
    b = compile_(make_affine(), cache=False)
    assert not a.stats.cached and not b.stats.cached
    assert a.artifact.to_bytes() == b.artifact.to_bytes()


def test_hit_in_a_fresh_process(keys) -> None:
    first = compile_(make_affine())
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_cache_key_property import make_affine, compile_
        k = compile_(make_affine())
        print(k.stats.cached, k.artifact.to_bytes().hex())
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy(), timeout=120
    )
    assert out.returncode == 0, out.stderr
    cached, blob = out.stdout.split()
    assert cached == "True" and bytes.fromhex(blob) == first.artifact.to_bytes()


def test_backend_shares_the_artifact(keys) -> None:
    """The backend is not in the key: the artifact for a target is the same whichever backend runs it."""
    emu = compile_(make_affine(), target="sm_90")
    cuda = compile_(make_affine(), target="sm_90", backend="cuda")  # no GPU needed until the first call
    assert cuda.stats.cached and cuda.artifact is emu.artifact and cuda.backend == "cuda"
    assert keys[0] == keys[1]


def test_torch_op_and_print_ir_after_do_not_change_the_key(keys, capsys) -> None:
    compile_(make_affine())
    shown = compile_(make_affine(), print_ir_after=["mlir"])
    assert not shown.stats.cached  # printing bypasses the read so that the IR is printed
    assert "emitted MLIR" in capsys.readouterr().out
    assert keys[0] == keys[1]


# --------------------------------------------------------------------------- changed inputs: miss

# (name, compile arguments of the changed compilation, check of its result).  The base is
# make_affine() with SUBS on sm_90.
CHANGES = {
    "subs BLOCK_M": (
        lambda: (make_affine(), {BM: 2, BN: 256}, {}),
        lambda k: dict(k.artifact.metadata.static_symbols)["BLOCK_M"] == 2,
    ),
    "subs BLOCK_N": (
        lambda: (make_affine(), {BM: 4, BN: 512}, {}),
        lambda k: dict(k.artifact.metadata.static_symbols)["BLOCK_N"] == 512,
    ),
    "target sm_80": (lambda: (make_affine(), SUBS, {"target": "sm_80"}), lambda k: k.artifact.target == "sm_80"),
    "target sm_90a": (lambda: (make_affine(), SUBS, {"target": "sm_90a"}), lambda k: k.artifact.target == "sm_90a"),
    "body op": (lambda: (make_affine(op="sub"), SUBS, {}), lambda k: check_affine(k, op="sub") is None),
    "body op max": (lambda: (make_affine(op="max"), SUBS, {}), lambda k: check_affine(k, op="max") is None),
    "closure scale": (lambda: (make_affine(scale=3.0), SUBS, {}), lambda k: check_affine(k, scale=3.0) is None),
    "closure scale int": (lambda: (make_affine(scale=2), SUBS, {}), lambda k: check_affine(k, scale=2) is None),
    "closure scale ulp": (
        lambda: (make_affine(scale=1.0 + 2**-20), SUBS, {}),
        lambda k: check_affine(k, scale=1.0 + 2**-20) is None,
    ),
    "closure dtype": (lambda: (make_affine(dtype=wc.f16), SUBS, {}), lambda k: check_affine(k, dtype="f16") is None),
    "kernel name": (lambda: (make_affine(name="affine2"), SUBS, {}), lambda k: k.artifact.metadata.kernel == "affine2"),
    "constraints elems/thread": (
        lambda: (make_affine(constraints=rowwise_constraints(32, 2)), SUBS, {}),
        lambda k: check_affine(k) is None,
    ),
    "constraints scheduling": (
        lambda: (
            make_affine(constraints=[*rowwise_constraints(32, 4), wc.SchedulingConstraint(num_stages=1)]),
            SUBS,
            {},
        ),
        lambda k: check_affine(k) is None,
    ),
}


# Changes that the key sees although they compile to the same program: an extra miss, harmless.  The trace
# prints ``2`` and ``2.0`` differently (the scale becomes an f32 constant either way); a kernel without
# loops has nothing to pipeline, so num_stages does not change it.
SEMANTICALLY_EQUAL = {"closure scale int", "constraints scheduling"}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_change_gives_new_key_and_fresh_build(change, keys) -> None:
    base = compile_(make_affine(), target="sm_90")
    make, check = CHANGES[change]
    kernel, subs, kw = make()
    changed = compile_(kernel, subs, **kw)
    assert keys[0] != keys[1], f"{change}: same cache key"
    assert not changed.stats.cached, f"{change}: stale cache hit"
    if change in SEMANTICALLY_EQUAL:  # a different key for the same program: an extra miss, never stale
        assert changed.artifact.to_bytes() == base.artifact.to_bytes()
    else:
        assert changed.artifact.to_bytes() != base.artifact.to_bytes()
    if check is not None:
        assert check(changed) is not False, f"{change}: the artifact does not reflect the change"
    again = compile_(*make()[:2], **kw)
    assert again.stats.cached and keys[2] == keys[1]
    assert compile_(make_affine(), target="sm_90").artifact is base.artifact  # base still hits


@pytest.mark.parametrize(
    "sym,value", [(BLOCK_M, 128), (BLOCK_N, 128), (BLOCK_K, 64), (NUM_STAGES, 3), (GROUP_M, 1)], ids=lambda x: str(x)
)
def test_every_gemm_subs_value_is_in_the_key(sym, value, keys) -> None:
    base = compile_(make_gemm(), DEFAULT_SUBS)
    changed = compile_(make_gemm(), {**DEFAULT_SUBS, sym: value})
    assert keys[0] != keys[1] and not changed.stats.cached
    assert dict(changed.artifact.metadata.static_symbols)[str(sym)] == value
    assert changed.artifact.mlir != base.artifact.mlir


def test_gemm_constraint_list_is_in_the_key(keys) -> None:
    compile_(make_gemm(), DEFAULT_SUBS)
    changed = compile_(make_gemm(waves=(2, 1)), DEFAULT_SUBS)
    assert keys[0] != keys[1] and not changed.stats.cached
    assert changed.artifact.metadata.block == (64, 1, 1)


@pytest.mark.parametrize("what", ["wavec", "iree"])
def test_compiler_versions_are_in_the_key(what, keys) -> None:
    base = compile_(make_affine())
    with pytest.MonkeyPatch.context() as mp:  # not the shared monkeypatch: undoing it would drop the cache dir
        if what == "wavec":
            mp.setattr(compiler, "__version__", compiler.__version__ + ".post1")
        else:
            mp.setattr(compiler, "_iree_version", lambda: "999.0.0")
        bumped = compile_(make_affine())
    assert keys[0] != keys[1] and not bumped.stats.cached
    assert bumped.artifact.to_bytes() == base.artifact.to_bytes()  # same toolchain really, so same bytes
    assert compile_(make_affine()).stats.cached


def test_assembler_is_in_the_key(tmp_path, monkeypatch, keys) -> None:
    from wavec.codegen.ptxas import find_ptxas

    real = find_ptxas()
    if real is None:
        pytest.skip("no ptxas here")
    base = compile_(make_affine())
    assert base.artifact.format == "cubin"
    other = tmp_path / "ptxas-11.8"  # another release of ptxas, which also builds different code (-O0)
    other.write_text(
        f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 11.8"; '
        f'exit 0; fi\nexec {real} -O0 "$@"\n'
    )
    other.chmod(0o755)
    monkeypatch.setenv("WAVEC_PTXAS", str(other))
    rebuilt = compile_(make_affine())
    assert not rebuilt.stats.cached, "cubin of the other ptxas served from the cache"


# ------------------------------------------------------------------- property: key <=> options

_BASE_ARTIFACT: dict = {}


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_key_changes_exactly_when_an_input_changes(data, keys, monkeypatch) -> None:
    """Two random option tuples: their keys are equal iff the options are (builds are stubbed: keys only)."""
    if "a" not in _BASE_ARTIFACT:
        _BASE_ARTIFACT["a"] = compile_(make_affine(), cache=False).artifact
        # that build's key was never stored (cache=False): left in ``keys``, an example drawing the same
        # options would expect a hit the cache cannot have (the flake seen once in CI; a replay, with the
        # artifact already built, never reproduced it)
        keys.clear()
    monkeypatch.setattr(compiler, "_build", lambda *a, **k: _BASE_ARTIFACT["a"])
    options = st.tuples(
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=False, width=32),
            st.integers(-3, 3),
            st.sampled_from([0.5, 1.0, 1.0 + 2**-23, 2.0]),
        ),  # closure scale
        st.sampled_from(["f32", "f16"]),  # closure dtype
        st.sampled_from(["add", "sub", "max"]),  # body
        st.sampled_from([1, 2, 4]),
        st.sampled_from([256, 512]),  # subs
        st.sampled_from([2, 4]),  # constraint list
        st.sampled_from(["sm_80", "sm_90", "sm_90a"]),  # target
        st.sampled_from(["0.1.0", "0.1.1"]),  # wavec version
    )
    drawn = [data.draw(options), data.draw(options)]
    if data.draw(st.booleans()):
        drawn[1] = drawn[0]
    got = []
    for scale, dtype, op, bm, bn, ept, target, version in drawn:
        monkeypatch.setattr(compiler, "__version__", version)
        dt = {"f32": wc.f32, "f16": wc.f16}[dtype]
        kernel = make_affine(scale, dt, op, rowwise_constraints(32, ept))
        got.append(compile_(kernel, {BM: bm, BN: bn}, target=target))
    same = repr(drawn[0]) == repr(drawn[1])
    assert (keys[-2] == keys[-1]) == same, drawn
    assert got[1].stats.cached == (same or keys[-1] in keys[:-2])  # earlier examples share the cache


# ------------------------------------------------------------------ corrupt entries, concurrency


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_corrupt_disk_entry_recompiles_with_warning(damage, keys) -> None:
    first = compile_(make_affine())
    path = default_cache().path_for(keys[0])
    blob = path.read_bytes()
    path.write_bytes(
        {"truncate": blob[: len(blob) // 3], "empty": b"", "flip": blob[:100] + bytes([blob[100] ^ 0x10]) + blob[101:]}[
            damage
        ]
    )
    default_cache().clear_memory()
    with pytest.warns(UserWarning, match="corrupt"):
        again = compile_(make_affine())
    assert not again.stats.cached and keys[1] == keys[0]
    assert again.artifact.to_bytes() == first.artifact.to_bytes() == path.read_bytes()
    check_affine(again)
    default_cache().clear_memory()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compile_(make_affine()).stats.cached


_WORKER = textwrap.dedent("""
    import os, sys, time, warnings
    sys.path.insert(0, {here!r})
    warnings.simplefilter("error")               # a corrupt or partial entry read would warn: fail
    from test_cache_key_property import make_affine, compile_, check_affine
    from wavec.kernels.gemm import make_gemm
    from wavec.tuning.plan import DEFAULT_SUBS
    import torch
    while not os.path.exists({go!r}):
        time.sleep(0.005)
    k = compile_(make_affine())
    g = compile_(make_gemm(), DEFAULT_SUBS)
    check_affine(k)
    a, b = torch.randn(37, 40).half(), torch.randn(18, 40).half()
    c = torch.full((37, 18), float("nan"))
    g(a, b, c)
    torch.testing.assert_close(c, (a.double() @ b.double().T).float(), rtol=1e-4, atol=1e-4)
    print(k.stats.cached, g.stats.cached)
""")


def test_concurrent_processes_compile_the_same_kernel(tmp_path) -> None:
    go = tmp_path / "go"
    code = _WORKER.format(here=str(Path(__file__).parent), go=str(go))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        for _ in range(3)
    ]
    time.sleep(0.5)
    go.touch()  # all start compiling at once (the imports are done or nearly so)
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, results):
        assert p.returncode == 0, err
    root = Path(os.environ["WAVEC_CACHE_DIR"])
    assert len(list(root.rglob(f"*{ENTRY_SUFFIX}"))) == 2
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]
    # Afterwards this process hits what they wrote, intact.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compile_(make_affine()).stats.cached


def test_a_subs_key_the_kernel_does_not_use_is_an_error() -> None:
    with pytest.raises(OptionError, match="EXTRA is not a symbol"):
        compile_(make_affine(), {BM: 4, BN: 256, wc.sym.EXTRA: 1})
