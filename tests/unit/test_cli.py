"""``python -m wavec`` (``wavec/__main__.py``, ``wavec/cli.py``) and the knobs' validation: every command
runs in-process through ``main(argv)``, against a temporary cache directory."""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest

from wavec.__main__ import main
from wavec.errors import KnobError
from wavec.knobs import knobs

KERNEL_FILE = textwrap.dedent(
    """
    from wavec.kernels.elementwise import make_copy

    copy = make_copy()
    not_a_kernel = 3
    """
)


@pytest.fixture
def kernel_file(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("WAVEC_DUMP_DIR", raising=False)
    path = tmp_path / "kernels.py"
    path.write_text(KERNEL_FILE)
    return path


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("wavec 0.")


def test_compile_dumps_trace_mlir_and_ptx_then_cache_lists_and_clears(kernel_file, tmp_path, capsys) -> None:
    spec = f"{kernel_file}:copy"
    args = ["compile", spec, "--subs", "BLOCK_M=4", "BLOCK_N=256", "--target", "sm_90", "--backend", "cuda"]
    assert main([*args, "--dump", "trace,mlir,ptx", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "copy: target sm_90" in out and "block (128, 1, 1)" in out
    assert "read(%src)" in (tmp_path / "out" / "copy.trace").read_text()
    assert "hal.executable" in (tmp_path / "out" / "copy.mlir").read_text()
    assert ".target sm_90" in (tmp_path / "out" / "copy.ptx").read_text()
    assert main(["cache", "list"]) == 0
    listing = capsys.readouterr().out
    assert "copy" in listing and "1 kernels" in listing
    assert main(["cache", "info"]) == 0
    assert "kernels: 1" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 1 compiled kernels" in capsys.readouterr().out
    assert main(["cache", "info"]) == 0
    assert "kernels: 0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "spec, message",
    [
        ("{file}:missing", "defines no 'missing'"),
        ("{file}:not_a_kernel", "is a int, not a @wc.wave kernel"),
        ("{file}", "expected FILE.py:NAME"),
        ("nowhere.py:copy", "no such file"),
    ],
)
def test_compile_bad_spec_is_explained(kernel_file, capsys, spec: str, message: str) -> None:
    assert main(["compile", spec.format(file=kernel_file)]) == 1
    assert message in capsys.readouterr().err


def test_compile_bad_dump_and_subs(kernel_file, capsys) -> None:
    assert main(["compile", f"{kernel_file}:copy", "--dump", "asm"]) == 2
    assert "unknown --dump ['asm']" in capsys.readouterr().err
    assert main(["compile", f"{kernel_file}:copy", "--subs", "BLOCK_M=four"]) == 1
    assert "--subs expects SYMBOL=INT" in capsys.readouterr().err


def test_doctor_names_every_knob_and_flags_a_bad_value(monkeypatch, capsys) -> None:
    monkeypatch.setenv("WAVEC_VERIFY_IR", "banana")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for env in ("WAVEC_CACHE_DIR", "WAVEC_BACKEND", "WAVEC_DUMP_DIR", "WAVEC_TUNE_WORKERS", "WAVEC_VERIFY_IR"):
        assert env in out
    assert "iree-base-compiler" in out and "torch" in out
    assert "missing: a valid WAVEC_VERIFY_IR" in out
    assert "c launcher" in out  # WAVEC_LAUNCH_API=c's: buildable here or why not


def test_doctor_names_the_c_launcher_when_it_is_asked_for_and_cannot_build(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setenv("WAVEC_LAUNCH_API", "c")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "not buildable: no" in out and "missing: the C launcher (WAVEC_LAUNCH_API=c)" in out


@pytest.mark.parametrize(
    "env, value, attr",
    [("WAVEC_VERIFY_IR", "banana", "verify_ir"), ("WAVEC_CACHE_DISABLE", "2", "cache_disable"),
     ("WAVEC_TUNE_WORKERS", "-1", "tune_workers"), ("WAVEC_TUNE_WORKERS", "many", "tune_workers")],
)  # fmt: skip
def test_bad_knob_value_names_the_knob_and_the_accepted_values(monkeypatch, env, value, attr) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(KnobError, match=rf"{env}='{value}' is not accepted; expected"):
        getattr(knobs, attr)


@pytest.mark.parametrize("value, expected", [("0", False), ("off", False), ("No", False), ("1", True), ("ON", True)])
def test_bool_knob_words(monkeypatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("WAVEC_VERIFY_IR", value)
    assert knobs.verify_ir is expected


def test_dump_dir_is_written_on_a_cache_hit_too(kernel_file, tmp_path, monkeypatch) -> None:
    import wavec as wc
    from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, make_copy

    kernel, subs = make_copy(), {BLOCK_M: 4, BLOCK_N: 256}
    wc.compile(kernel, subs, target="sm_90", backend="cuda")  # now in the cache
    monkeypatch.setenv("WAVEC_DUMP_DIR", str(tmp_path / "dump"))
    wc.compile(kernel, subs, target="sm_90", backend="cuda")
    assert {p.suffix for p in (tmp_path / "dump").iterdir()} >= {".mlir", ".ptx"}


def test_perf_prints_demand_roofline_and_bottleneck(capsys) -> None:
    assert main(["perf", "softmax", "--shapes", "100,1024", "--gpu", "h200"]) == 0
    out = capsys.readouterr().out
    assert "softmax_rows on H200 (target sm_90): 25 tasks" in out  # 4 rows of 1024 per workgroup
    # One 1024-wide tile per row: x read once and out written once, 100 x 1024 f16 each.
    assert re.search(r"global_read\s+205k", out) and re.search(r"global_write\s+205k", out)
    assert re.search(r"roofline \d+\.\d+ us, bottleneck \w+\.(gpu|sm)", out)


def test_perf_of_an_odd_row_length_decomposes_the_odd_kernel(capsys) -> None:
    """The library's kernel for 4097-element rows (``rows_odd``), x counted once; no trained family, so the
    analytical report alone."""
    assert main(["perf", "rms_norm", "--shapes", "64,4097", "--gpu", "h200"]) == 0
    out = capsys.readouterr().out
    assert "rms_norm_odd on H200" in out
    assert "no performance-model estimate: rms_norm_odd is in no trained family" in out


def test_perf_bad_arguments(capsys) -> None:
    assert main(["perf", "gemm", "--shapes", "64,x,64"]) == 2
    assert "--shapes expects comma-separated integers" in capsys.readouterr().err
    assert main(["perf", "gemm", "--shapes", "64,64"]) == 1
    assert "gemm takes 3 sizes" in capsys.readouterr().err
    assert main(["perf", "gemm", "--shapes", "64,64,64", "--gpu", "a100", "--mma", "wgmma"]) == 1
    assert "wgmma runs on Hopper" in capsys.readouterr().err


def test_perf_prints_the_models_prediction_and_cycles(capsys) -> None:
    assert main(["perf", "gemm", "--shapes", "512,1024,768", "--gpu", "h100", "--trained-on", "h100"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"theoretical time \(us\)\s+GPU\s+SM\s+GPU cycles\s+SM cycles", out)
    assert re.search(r"\ntensor\s+\d+\.\d+\s+\d+\.\d+\s+\d[\d.]*[kM]?\s+\d[\d.]*[kM]?\n", out)
    roof = float(re.search(r"roofline (\d+\.\d+) us, bottleneck (\S+)", out).group(1))
    m = re.search(
        r"predicted (\d+\.\d+) us \(efficiency (\d+\.\d+) of the roofline\), ceiling (\d+\.\d+) us "
        r"\(P80 efficiency (\d+\.\d+)\), bottleneck (\S+) \[gemm_mma_sync model trained on h100\]",
        out,
    )
    assert m, out
    predicted, eff, ceiling, ceil_eff = (float(m.group(i)) for i in range(1, 5))
    assert predicted == pytest.approx(roof / eff, rel=0.05) and ceiling == pytest.approx(roof / ceil_eff, rel=0.05)
    assert 0 < eff < 1.5 and 0 < ceil_eff < 1.5
    assert m.group(5) == re.search(r"roofline \d+\.\d+ us, bottleneck (\S+)", out).group(1)


def test_perf_of_the_moe_gemms_follows_the_routing(capsys) -> None:
    """``perf moe_down`` under an expert histogram: the tensor FLOPs are 2 x BLOCK_M x H x I per token block
    of an active expert (T = 4, k = 2, 16-row blocks: two experts of 4 slots are 2 blocks, 134M; uniform
    routing's 8 distinct experts 8 blocks, 537M), and the MoE family's estimate is printed."""
    counts = "counts:4/4/" + "/".join(["0"] * 62)
    args = ["perf", "moe_down", "--shapes", "4,2048,1024,64", "--gpu", "h100", "--dtype", "bf16", "--topk", "2"]
    assert main([*args, "--routing", counts]) == 0
    out = capsys.readouterr().out
    assert "moe_down on H100 SXM" in out and "[moe model trained on h100]" in out
    assert re.search(r"tensor:mma\.sync:bf16\s+134M", out)  # 2 * 2 * 16 * 2048 * 1024
    assert main(args) == 0
    assert re.search(r"tensor:mma\.sync:bf16\s+537M", capsys.readouterr().out)


def test_moe_ids_reproduce_a_histogram() -> None:
    from wavec.errors import OptionError
    from wavec.perf.library import moe_ids

    counts = [5, 0, 3, 4, 1, 2]
    ids = moe_ids(5, 6, 3, "counts:" + "/".join(map(str, counts)))
    assert ids.shape == (5, 3) and all(len(set(row)) == 3 for row in ids.tolist())  # distinct per token
    assert np.bincount(ids.ravel(), minlength=6).tolist() == counts
    assert moe_ids(7, 6, 2, "zipf1.2").shape == (7, 2)
    with pytest.raises(OptionError, match="must sum to T \\* k = 15"):
        moe_ids(5, 6, 3, "counts:5/0/3/5/1/2")
    with pytest.raises(OptionError, match="each count must be in 0..5"):
        moe_ids(5, 6, 3, "counts:6/0/3/4/1/1")
    with pytest.raises(OptionError, match="needs 6 counts"):
        moe_ids(5, 6, 3, "counts:5/5/5")
    with pytest.raises(OptionError, match="top-k must be in"):
        moe_ids(5, 6, 7, "uniform")
