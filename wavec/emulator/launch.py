"""``EmulatorKernel``: run a compiled artifact's MLIR on the CPU emulator with PyTorch tensors.

The tensors are validated exactly as for the GPU launcher (``BindingPlan`` with CPU tensors), viewed as
flat numpy arrays (bf16 as its uint16 bits; a strided view: the elements it spans) and run in place; the
emulator writes straight into the tensors' memory, so outputs need no copy back.  A kernel with TMA
tensor maps gets one more binding: the maps in wavec's emulated encoding, describing each tensor at its
emulated global address (checked as on the GPU: :func:`~wavec.runtime.tensor_map.describe`).  A kernel
compiled with ``WAVEC_CHECK_BOUNDS=1`` gets its bounds record last and raises its failure as the CUDA
launcher does (``runtime/bounds.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..abi import BOUNDS_RECORD_WORDS, SMS_NAME
from ..runtime import trace
from ..runtime.artifact import Artifact
from ..runtime.backends import register_backend
from ..runtime.binding import BindingPlan
from ..runtime.bounds import bounds_error
from ..runtime.tensor_map import describe, encode_emulated

EMULATED_SMS = 1  # the SM count a persistent grid sees in the emulator (several tiles per workgroup)


def _flat_view(t: Any) -> np.ndarray:
    import torch

    t = t.detach()  # same memory; .numpy() refuses tensors that require grad
    if not t.is_contiguous():  # a strided view: the elements it spans, from its first one (no copy)
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
        t = t.as_strided((span,), (1,))
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().reshape(-1).view(np.uint16)
    if t.dtype.is_floating_point and t.dtype.itemsize == 1:  # fp8: numpy has no such type; its bits
        return t.view(torch.uint8).numpy().reshape(-1)
    return t.numpy().reshape(-1)


class EmulatorKernel:
    """Callable with CPU torch tensors in argument order (outputs written in place)."""

    def __init__(self, artifact: Artifact, check_races: bool = True) -> None:
        from .interp import EmulatedKernel

        meta = artifact.metadata
        self.meta, self.artifact = meta, artifact
        self.check_races = check_races
        self._plan = BindingPlan(meta, "cpu")
        self._kernel = EmulatedKernel(artifact.mlir, meta.entry)

    def __call__(self, *tensors: Any) -> None:
        values, _ptrs, _device = self._plan.bind(tensors)
        if self._plan.needs_sms:  # persistent grid: a few "SMs", so each workgroup runs several tiles
            values = {**values, SMS_NAME: EMULATED_SMS}
        grid = self._plan.grid(values)
        if not all(grid):
            return
        if trace.ACTIVE is not None:
            given = tensors[: len(self.meta.args)]
            trace.note(self.artifact, [t.shape for t in given], tensors[len(self.meta.args) :], given)
        tensors = tensors[: len(self.meta.args)]  # scalar arguments travel as constants
        bindings = [_flat_view(t) for t in tensors]
        if self.meta.tensor_maps:
            bindings.append(self._tensor_maps(tensors))
        record = np.zeros(BOUNDS_RECORD_WORDS, np.int64)
        if self.meta.bounds_checks:
            bindings.append(record)
        constants, block = [values[c] for c in self.meta.constants], self.meta.block
        self._kernel(bindings=bindings, constants=constants, grid=grid, block=block, check_races=self.check_races)
        err = bounds_error(self.meta.bounds_checks, record.tolist())
        if err is not None:
            raise err

    def _tensor_maps(self, tensors: tuple) -> np.ndarray:
        from .ops_tma import global_address

        meta, maps = self.meta, []
        for s in meta.tensor_maps:
            t, name = tensors[s.arg], meta.args[s.arg].name
            desc = describe(s, global_address(s.arg), tuple(t.shape), tuple(t.stride()), meta.label, name)
            maps.append(encode_emulated(desc))
        return np.frombuffer(b"".join(maps), np.uint8).copy()


register_backend("emulator", EmulatorKernel)
