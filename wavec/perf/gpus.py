"""GPU constants the performance model needs (DESIGN.md §13, issue #22): one :class:`GPUSpec` per model.

Requires: only the standard library (torch is imported by :func:`from_torch` alone).

Guarantees: every figure is a published one, cited next to it (``SOURCES``), or marked an estimate; rates
are per SM (per CU on AMD) per clock, so a time is ``ops / (rate * sms * clock_hz)``; :func:`gpu` finds a
spec by name (``"h100"``, ``"NVIDIA H200"``) or raises :class:`~wavec.errors.OptionError` naming the known
ones; :func:`from_torch` takes what the driver reports (SM count, shared memory per SM, name) over the
table's figures.

Sources (the numbers in brackets below):

[cuda]   CUDA C++ Programming Guide 12.x, "Arithmetic Instructions" (results per clock per SM by compute
         capability: FP32 FMA 64 on 8.0, 128 on 8.6/8.9/9.0/10.0; FP16 256 on 8.0/9.0, 128 on 8.9; 32-bit
         integer add/compare 64; rcp/rsqrt/log2/exp2/sin/cos 16) and "Technical Specifications per Compute
         Capability" (max threads, warps and blocks per SM, shared memory per SM, 64K 32-bit registers).
[h100]   NVIDIA H100 Tensor Core GPU datasheet and architecture whitepaper (SXM5: 132 SMs, 989.4 TFLOPS dense
         FP16/BF16 = 132 SMs x 4096 FLOP/clk x 1.83 GHz, FP8 2x, TF32 1/2x, 3.35 TB/s HBM3, 50 MB L2).
[h200]   NVIDIA H200 datasheet (the H100 SXM's GH100 with 141 GB HBM3e at 4.8 TB/s; same compute figures).
[a100]   NVIDIA A100 datasheet and whitepaper (SXM4 80GB: 108 SMs, 1.41 GHz, 312 TFLOPS dense FP16 =
         108 x 2048 x 1.41 GHz, TF32 156, INT8 624, 2.039 TB/s HBM2e, 40 MB L2, 164 KB shared per SM).
[l40s]   NVIDIA L40S datasheet and Ada (AD102) whitepaper (142 SMs, 2.52 GHz boost, 362 TFLOPS dense FP16
         with FP32 accumulate = 142 x 1024 x 2.52 GHz, FP8 733, 91.6 TFLOPS FP32, 864 GB/s GDDR6, 96 MB L2).
[b200]   NVIDIA HGX B200 / DGX B200 datasheet (2.25 PFLOPS dense FP16/BF16 and 4.5 dense FP8 per GPU, 8 TB/s
         HBM3e) with 148 SMs as the CUDA device query reports them; 8192 FLOP/clk/SM at ~1.86 GHz is the
         figure those imply (an estimate until NVIDIA's architecture document states it).
[mi300x] AMD Instinct MI300X data sheet and CDNA3 white paper (304 CUs, 2.1 GHz peak, 1307.4 TFLOPS dense
         FP16/BF16 = 304 x 2048 x 2.1 GHz, FP8 2614.9, 163.4 TFLOPS FP32 vector, 5.3 TB/s HBM3, 64 KB LDS
         and 512 KB VGPRs per CU, 256 MB Infinity Cache).
[hopper] Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture" (arXiv:2402.13499):
         on H100 the legacy mma.sync path reaches well under wgmma's peak; wavec's own H100 measurements
         (attention d128: mma.sync 0.65x of wgmma) agree.  The 0.625 factor used below is an estimate to be
         replaced by ``measure_rates`` (issue #22 item 3).
[l2]     L2 bandwidths are not published by NVIDIA or AMD; the figures are commonly measured ones (the same
         as ``wavec/tuning/devices.py``), estimates for L40S and B200.
[l2gh]   GH100 (H100 and H200: the same die, L2 and clocks): wavec's collected rows
         (benchmarks/data/perf/collected/features_{h100,h200}.csv) draw up to 14.0 TB/s of requested L2
         bytes on the H200 and 12.4 on the H100, from TMA-fed wgmma GEMMs whose loads bypass L1 and are not
         multicast (every byte counted is an L2 read); 14.5 TB/s is that rounded up, so the roofline stays
         a lower bound (the 10 TB/s of ``tuning/devices.py`` is beaten by 29%; issue #22).
[launch] The fixed cost of one launch replayed back to back in a CUDA graph (how ``perf_dataset.py``
         times): on the H100 and H200 the least time of any *training* row of the collection (1.150 and
         1.053 us, a few-KB copy) less 5 %, so that no row's launch-free time is zero: 1.09 and 1.00 us (a
         stand-in for an empty-kernel microbenchmark, which ``measure_rates`` does not run yet).  1 us, an
         estimate, for the GPUs not measured.  It enters the features nowhere (the feature cache's digest
         leaves it out): only the families whose models add it to the time (``estimator``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import OptionError

__all__ = ["GPUSpec", "GPUS", "gpu", "from_torch", "calibrated", "measure_rates", "TENSOR_KINDS"]

TENSOR_KINDS = ("mma.sync", "wgmma", "tcgen05", "mfma")
NV_SHARED_BYTES_PER_CLK = 128  # 32 banks x 4 bytes [cuda]


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model.  ``tensor[(kind, dtype)]``: dense tensor-core FLOP per clock per SM for that
    instruction kind and input dtype (f16, bf16, tf32, f8, i8); ``fma``: FP element results per clock per
    SM by dtype (f32, f16); ``alu``: 32-bit integer, compare, conversion and shuffle results; ``xu``:
    transcendental (SFU) results.  Bandwidths in bytes per second (whole GPU) or bytes per clock per SM."""

    name: str
    arch: str
    sms: int
    clock_hz: float
    tensor: dict[tuple[str, str], float]
    fma: dict[str, float]
    alu: float
    xu: float
    hbm_bytes_s: float
    l2_bytes_s: float
    shared_bytes_per_clk: float
    shared_per_sm: int  # bytes of shared memory (LDS) one SM (CU) has for blocks
    shared_per_block: int  # the most one block may use
    shared_reserved: int  # bytes the system reserves per resident block
    registers_per_sm: int  # 32-bit registers
    max_threads_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    threads_per_warp: int = 32
    register_granule: int = 256  # registers are allocated per warp in units of this many
    launch_s: float = 1.0e-6  # a kernel's fixed cost back to back in a CUDA graph [launch]; estimate by default
    keys: tuple[str, ...] = field(default=())

    def tensor_rate(self, kind: str, dtype: str) -> float:
        """FLOP/clk/SM of ``kind`` on ``dtype``; bf16 is f16's rate, and an absent pair is an error."""
        dtype = "f16" if dtype == "bf16" else dtype
        rate = self.tensor.get((kind, dtype))
        if rate is None:
            have = ", ".join(f"{k}/{d}" for k, d in sorted(self.tensor))
            raise OptionError(option="gpu", message=f"{self.name} has no {kind} rate for {dtype} (has {have})")
        return rate

    def vector(self) -> dict[str, float]:
        """The GPU's constants as named numbers (the model's GPU feature vector)."""
        out: dict[str, float] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f.name] = float(value)
        best = {k: max((r for (kind, d), r in self.tensor.items() if d == k), default=0.0) for k in ("f16", "f8")}
        out.update({f"tensor_{k}": v for k, v in best.items()})
        out.update({f"fma_{k}": v for k, v in self.fma.items()})
        return out


def _tensor(kind: str, f16: float, fp8: bool = True, tf32: bool = True) -> dict[tuple[str, str], float]:
    # Dense rates relative to f16: TF32 half, FP8/INT8 double, on every listed part that has them [h100].
    out = {(kind, "f16"): f16}
    if tf32:
        out[(kind, "tf32")] = f16 / 2
    if fp8:
        out[(kind, "f8")] = out[(kind, "i8")] = f16 * 2
    return out


_HOPPER_LIMITS: dict[str, Any] = dict(
    shared_per_sm=228 << 10,
    shared_per_block=227 << 10,
    shared_reserved=1 << 10,
    registers_per_sm=65536,
    max_threads_per_sm=2048,
    max_warps_per_sm=64,
    max_blocks_per_sm=32,
)
_H100 = GPUSpec(
    name="H100 SXM",
    arch="sm_90",
    sms=132,
    clock_hz=1.83e9,  # the boost clock of the datasheet's tensor figures [h100]
    tensor={**_tensor("wgmma", 4096), **_tensor("mma.sync", 4096 * 0.625, fp8=False)},  # [h100] [hopper]
    fma={"f32": 128, "f16": 256},  # [cuda]
    alu=64,
    xu=16,
    hbm_bytes_s=3.35e12,
    l2_bytes_s=14.5e12,  # [l2gh]
    shared_bytes_per_clk=NV_SHARED_BYTES_PER_CLK,
    launch_s=1.09e-6,  # [launch]
    keys=("H100",),
    **_HOPPER_LIMITS,
)

GPUS: dict[str, GPUSpec] = {
    "h100": _H100,
    "h200": replace(_H100, name="H200", hbm_bytes_s=4.8e12, launch_s=1.0e-6, keys=("H200",)),  # [h200] [launch]
    "a100": GPUSpec(
        name="A100 SXM 80GB",
        arch="sm_80",
        sms=108,
        clock_hz=1.41e9,
        tensor={**_tensor("mma.sync", 2048, fp8=False), ("mma.sync", "i8"): 4096},  # [a100]
        fma={"f32": 64, "f16": 256},  # [cuda]
        alu=64,
        xu=16,
        hbm_bytes_s=2.039e12,
        l2_bytes_s=5e12,  # [l2]
        shared_bytes_per_clk=NV_SHARED_BYTES_PER_CLK,
        shared_per_sm=164 << 10,
        shared_per_block=163 << 10,
        shared_reserved=1 << 10,
        registers_per_sm=65536,
        max_threads_per_sm=2048,
        max_warps_per_sm=64,
        max_blocks_per_sm=32,
        keys=("A100",),
    ),
    "l40s": GPUSpec(
        name="L40S",
        arch="sm_89",
        sms=142,
        clock_hz=2.52e9,
        tensor=_tensor("mma.sync", 1024),  # [l40s]
        fma={"f32": 128, "f16": 128},  # [cuda]
        alu=64,
        xu=16,
        hbm_bytes_s=864e9,
        l2_bytes_s=5e12,  # [l2] estimate
        shared_bytes_per_clk=NV_SHARED_BYTES_PER_CLK,
        shared_per_sm=100 << 10,
        shared_per_block=99 << 10,
        shared_reserved=1 << 10,
        registers_per_sm=65536,
        max_threads_per_sm=1536,
        max_warps_per_sm=48,
        max_blocks_per_sm=24,
        keys=("L40S",),
    ),
    "b200": replace(
        _H100,
        name="B200",
        arch="sm_100",
        sms=148,
        clock_hz=1.86e9,
        tensor={**_tensor("tcgen05", 8192), **_tensor("mma.sync", 4096 * 0.625, fp8=False)},  # [b200] estimate
        hbm_bytes_s=8e12,
        l2_bytes_s=16e12,  # [l2] estimate
        launch_s=1.0e-6,  # [launch] estimate
        keys=("B200",),
    ),
    "mi300x": GPUSpec(
        name="MI300X",
        arch="gfx942",
        sms=304,
        clock_hz=2.1e9,
        tensor=_tensor("mfma", 2048, tf32=False),  # [mi300x]
        fma={"f32": 128, "f16": 256},  # 163.4 TFLOPS FP32 vector (dual issue) [mi300x]
        alu=64,
        xu=16,  # transcendentals at a quarter of the 64-lane rate
        hbm_bytes_s=5.3e12,
        l2_bytes_s=15e12,  # [l2]
        shared_bytes_per_clk=128,
        shared_per_sm=64 << 10,
        shared_per_block=64 << 10,
        shared_reserved=0,
        registers_per_sm=131072,  # 512 KB of VGPRs per CU [mi300x]
        max_threads_per_sm=2048,
        max_warps_per_sm=32,
        max_blocks_per_sm=32,
        threads_per_warp=64,
        register_granule=512,
        keys=("MI300",),
    ),
}


def gpu(name: str | GPUSpec) -> GPUSpec:
    """The spec whose key (``h100``) or driver-name substring (``"NVIDIA H100 80GB HBM3"``) ``name`` matches."""
    if isinstance(name, GPUSpec):
        return name
    low = name.strip().lower()
    if low in GPUS:
        return GPUS[low]
    upper = name.upper()
    for spec in GPUS.values():
        if any(k in upper for k in spec.keys):
            return spec
    raise OptionError(option="gpu", message=f"unknown GPU {name!r}; known: {', '.join(GPUS)}")


def from_torch(device: Any = None, base: str | GPUSpec | None = None) -> GPUSpec:
    """The table's spec for the visible GPU (or ``base``) with what the driver reports put over it: the SM
    count and shared memory per SM.  Needs torch and a GPU."""
    import torch

    props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    spec = gpu(base if base is not None else props.name)
    changes: dict[str, Any] = {"sms": int(props.multi_processor_count)}
    per_sm = getattr(props, "shared_memory_per_multiprocessor", None)
    if per_sm:
        changes["shared_per_sm"] = int(per_sm)
    regs = getattr(props, "regs_per_multiprocessor", None)
    if regs:
        changes["registers_per_sm"] = int(regs)
    threads = getattr(props, "max_threads_per_multi_processor", None)
    if threads:
        changes["max_threads_per_sm"] = int(threads)
    return replace(spec, **changes)


def calibrated(spec: GPUSpec, measured: Mapping[str, float]) -> GPUSpec:
    """``spec`` with measured whole-GPU rates put over the published ones: ``hbm_bytes_s``, ``l2_bytes_s``
    (bytes/s), ``clock_hz``, or ``tensor:<kind>:<dtype>`` (FLOP/s, stored per SM per clock)."""
    changes: dict[str, Any] = {}
    tensor = dict(spec.tensor)
    for key, value in measured.items():
        if key in ("hbm_bytes_s", "l2_bytes_s", "clock_hz"):
            changes[key] = float(value)
        elif key.startswith("tensor:") and key.count(":") == 2:
            _, kind, dtype = key.split(":")
            tensor[(kind, dtype)] = float(value) / (spec.sms * measured.get("clock_hz", spec.clock_hz))
        else:
            raise OptionError(
                option="measured",
                message=f"unknown rate {key!r} (hbm_bytes_s, l2_bytes_s, clock_hz or tensor:<kind>:<dtype>)",
            )
    return replace(spec, tensor=tensor, **changes)


def measure_rates(spec: GPUSpec | None = None) -> GPUSpec:
    """The visible GPU's spec (``from_torch``) calibrated by a large f16 matmul (the best tensor kind's f16
    rate: cuBLAS uses it) and a large copy (HBM).  Needs a GPU."""
    from ..tuning.ceiling import measure_rates as measure

    spec = spec or from_torch()
    rates = measure()
    kind = max((k for k in spec.tensor if k[1] == "f16"), key=spec.tensor.__getitem__)[0]
    return calibrated(spec, {f"tensor:{kind}:f16": rates["matrix_flops"], "hbm_bytes_s": rates["hbm_bytes"]})
