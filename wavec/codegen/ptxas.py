"""Find ``ptxas`` and assemble PTX to a cubin, reporting registers, spills and shared memory.

Requires: a ``ptxas``: ``WAVEC_PTXAS``, ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``, ``$PATH`` or the
``nvidia-cuda-nvcc-cu12`` wheel.  Guarantees: :func:`assemble` returns the cubin and a :class:`PtxasInfo`
from ``ptxas -v`` (max registers/shared/stack over entries, summed spills), or raises
:class:`~wavec.errors.ToolchainError` with ptxas's message.  The wheel's ptxas (CUDA 12.9, PTX ISA <= 8.8)
accepts what IREE 3.13 emits (``.version`` 7.6 for sm_80, 8.0 for sm_90/sm_90a).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from wavec.errors import ToolchainError
from wavec.knobs import knobs

__all__ = ["PtxasInfo", "find_ptxas", "assemble", "parse_ptxas_verbose", "ptxas_version"]


@dataclass(frozen=True, slots=True)
class PtxasInfo:
    """Resource usage that ``ptxas -v`` reports (maximum over entries; spills summed)."""

    registers: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int
    stack_bytes: int


def _executable(path: str | Path | None) -> str | None:
    if not path:
        return None
    p = Path(path)
    return str(p) if p.is_file() and os.access(p, os.X_OK) else None


def _wheel_ptxas() -> str | None:
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvcc")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        found = _executable(Path(folder) / "bin" / "ptxas")
        if found:
            return found
    return None


def find_ptxas() -> str | None:
    """Path of the ``ptxas`` to use, or ``None`` when there is none.

    ``WAVEC_PTXAS`` wins when set (a wrong path there is an error rather than a silent fallback).
    """
    override = knobs.ptxas
    if override:
        found = _executable(override) or shutil.which(override)
        if not found:
            raise ToolchainError(message=f"WAVEC_PTXAS={override!r} is not an executable file")
        return found
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    return (
        _executable(Path(cuda_home) / "bin" / "ptxas" if cuda_home else None)
        or _executable("/usr/local/cuda/bin/ptxas")
        or shutil.which("ptxas")
        or _wheel_ptxas()
    )


def ptxas_version(ptxas: str | None = None) -> str:
    """The release string of ``ptxas`` (e.g. ``"12.9"``)."""
    exe = ptxas or _require()
    out = _run([exe, "--version"]).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else out.strip()


def _require() -> str:
    exe = find_ptxas()
    if exe is None:
        raise ToolchainError(message="no ptxas found (set WAVEC_PTXAS, CUDA_HOME, or install nvidia-cuda-nvcc-cu12)")
    return exe


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolchainError(message=f"running {cmd[0]} failed: {e}") from e


_RE_REGS = re.compile(r"Used (\d+) registers")
_RE_SMEM = re.compile(r"(\d+) bytes smem")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas_verbose(text: str) -> PtxasInfo:
    """Parse the ``-v`` report of ptxas (one block per entry) into one :class:`PtxasInfo`."""
    regs = [int(x) for x in _RE_REGS.findall(text)]
    if not regs:
        raise ToolchainError(message=f"ptxas -v printed no register usage:\n{text.strip()}")
    frames = [tuple(int(v) for v in m) for m in _RE_FRAME.findall(text)]
    smem = [int(x) for x in _RE_SMEM.findall(text)]
    return PtxasInfo(
        registers=max(regs),
        spill_stores=sum(f[1] for f in frames),
        spill_loads=sum(f[2] for f in frames),
        shared_bytes=max(smem, default=0),
        stack_bytes=max((f[0] for f in frames), default=0),
    )


def assemble(ptx: str, arch: str) -> tuple[bytes, PtxasInfo]:
    """Assemble ``ptx`` for ``arch`` (``sm_80``, ``sm_90``, ``sm_90a``, ...) with ``ptxas -v``."""
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise ToolchainError(message=f"ptxas: {arch!r} is not an sm_XX architecture")
    exe = _require()
    with tempfile.TemporaryDirectory(prefix="wavec-ptxas-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        out = Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        proc = _run([exe, f"-arch={arch}", "-v", str(src), "-o", str(out)])
        report = proc.stdout + proc.stderr
        if proc.returncode != 0 or not out.is_file():
            raise ToolchainError(message=f"ptxas -arch={arch} failed (exit {proc.returncode}):\n{report.strip()}")
        return out.read_bytes(), parse_ptxas_verbose(report)
