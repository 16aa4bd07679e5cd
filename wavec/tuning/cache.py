"""Persistent tuning results: one readable JSON file per kernel under ``knobs.cache_dir / "tuning"``.

Entries are keyed by shape bucket, dtypes, GPU name and versions of wavec, IREE and ptxas (``"M=4096,
N=4096,K=4096 | f16,f16,f32 | NVIDIA H200 | wavec 0.1.0, iree 3.x, ptxas 12.x"``).  Shapes bucket to the
next power of two per dimension, except a first dimension below 16 (decode shapes differ a lot).  Writes
are atomic (temporary file + ``os.replace``) and merge with what is on disk.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from ..knobs import knobs

FORMAT = 1


def bucket(shape) -> tuple[int, ...]:
    out = []
    for i, v in enumerate(shape):
        v = int(v)
        out.append(v if (i == 0 and v < 16) or v <= 1 else 1 << (v - 1).bit_length())
    return tuple(out)


def versions() -> str:
    from .. import __version__
    from ..compiler import _iree_version

    text = f"wavec {__version__}, iree {_iree_version()}"
    try:
        from ..codegen.ptxas import find_ptxas, ptxas_version

        path = find_ptxas()
        if path:
            text += f", ptxas {ptxas_version(path)}"
    except Exception:  # noqa: BLE001 - the key only loses precision
        pass
    return text


def gpu_name() -> str:
    from .devices import visible_name

    return visible_name() or "no-gpu"


def entry_key(shape, dtypes, gpu: str, vers: str, dims: tuple[str, ...] | None = None) -> str:
    b = bucket(shape)
    names = dims or tuple(f"d{i}" for i in range(len(b)))
    return f"{','.join(f'{n}={v}' for n, v in zip(names, b))} | {','.join(dtypes)} | {gpu} | {vers}"


def model_key(dtypes, gpu: str, vers: str) -> str:
    return f"{','.join(dtypes)} | {gpu} | {vers}"


def _file_name(kernel_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", kernel_id).strip("_")[:180] + ".json"


class TuningCache:
    """The tuning results of one kernel id (factory path plus the fixed factory arguments)."""

    def __init__(self, kernel_id: str, directory: Path | None = None) -> None:
        self.kernel_id = kernel_id
        self.directory = Path(directory) if directory else Path(knobs.cache_dir) / "tuning"
        self.path = self.directory / _file_name(kernel_id)

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        if data.get("format") != FORMAT or data.get("kernel") != self.kernel_id:
            return {}
        return data

    def get(self, key: str) -> dict | None:
        return self._read().get("entries", {}).get(key)

    def put_many(self, entries: dict, models: dict | None = None) -> None:
        """Merge ``entries`` (key -> entry) and ``models`` (``model_key`` -> fitted cost model) into the file."""
        if knobs.cache_disable:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        data = self._read()
        merged = {**data.get("entries", {}), **entries}
        out = {"format": FORMAT, "kernel": self.kernel_id, "entries": merged}
        all_models = {**data.get("models", {}), **(models or {})}
        if all_models:
            out["models"] = all_models
        self._write(out)

    def get_model(self, key: str) -> dict | None:
        """A cost model stored under ``model_key(dtypes, gpu, versions)``, which dispatches shapes that have
        no entry (``{"configs": CostModel.to_json(), "candidates": {name: Candidate.to_json()}}``)."""
        return self._read().get("models", {}).get(key)

    def _write(self, data: dict) -> None:
        text = json.dumps(data, indent=1, sort_keys=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text + "\n")
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
