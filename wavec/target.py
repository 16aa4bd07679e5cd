"""GPU targets wavec can compile for: capabilities, and the IREE target attribute of each.

Requires: nothing (pure data; no MLIR or IREE import: passes, codegen and tuning all read it).
Guarantees: ``get_target(name)`` returns a frozen :class:`Target` for ``sm_80``, ``sm_90``, ``sm_90a`` and
``gfx942`` and raises :class:`~wavec.errors.UnsupportedTargetError` otherwise.  Passes and lowerings ask a
target what it has (``has_cp_async``, ``has_wgmma``, ...), never what it is called.  ``Target.attr_text()`` is
the complete ``#hal.executable.target<...>`` attribute to put on a ``hal.executable.variant``:

- NVIDIA: written by hand, because IREE 3.13 has no Hopper entry in its known-target table. The sm_80
  text is byte-for-byte what ``--iree-cuda-target=sm_80`` produces; sm_90/sm_90a use the sm_89 MMA list
  (which adds the fp8 ``mma.sync`` shapes) and Hopper's 227 KiB of shared memory per block.
- AMD gfx942: byte-for-byte what IREE 3.13 itself produces for ``--iree-rocm-target=gfx942``
  (``tests/unit/test_targets.py`` re-derives it from ``iree-compile`` and compares).
"""

from __future__ import annotations

from dataclasses import dataclass

from wavec.errors import UnsupportedTargetError

__all__ = ["Target", "get_target", "TARGET_NAMES"]

_NV_MMA_SM80 = (
    "NV_MMA_SYNC_F32_16x8x16_F16",
    "NV_MMA_SYNC_F16_16x8x16_F16",
    "NV_MMA_SYNC_F32_16x8x16_BF16",
    "NV_WMMA_F32_16x16x16_F16",
    "NV_WMMA_F16_16x16x16_F16",
)
_NV_MMA_SM90 = (
    "NV_MMA_SYNC_F32_16x8x16_F16",
    "NV_MMA_SYNC_F16_16x8x16_F16",
    "NV_MMA_SYNC_F32_16x8x16_BF16",
    "NV_MMA_SYNC_F32_16x8x32_F8E4M3FN",
    "NV_MMA_SYNC_F32_16x8x32_F8E5M2",
    "NV_WMMA_F32_16x16x16_F16",
    "NV_WMMA_F16_16x16x16_F16",
)
# The order IREE 3.13 prints for gfx942 (kept verbatim so attr_text() matches IREE's own text).
_AMD_MMA_GFX942 = tuple(
    """
    MFMA_F32_16x16x16_BF16 MFMA_F32_32x32x8_BF16 MFMA_F32_16x16x32_F8E5M2FNUZ
    MFMA_F32_16x16x32_F8E5M2FNUZ_F8E4M3FNUZ MFMA_F32_16x16x32_F8E4M3FNUZ MFMA_F32_16x16x32_F8E4M3FNUZ_F8E5M2FNUZ
    MFMA_F32_32x32x16_F8E5M2FNUZ MFMA_F32_32x32x16_F8E5M2FNUZ_F8E4M3FNUZ MFMA_F32_32x32x16_F8E4M3FNUZ
    MFMA_F32_32x32x16_F8E4M3FNUZ_F8E5M2FNUZ MFMA_I32_16x16x32_I8 MFMA_I32_32x32x16_I8 MFMA_F64_16x16x4_F64
    MFMA_F32_16x16x4_F32 MFMA_F32_16x16x16_F16 MFMA_F32_32x32x8_F16 MFMA_F32_4x4x4x16B_F16 MFMA_F32_16x16x4x4B_F16
    MFMA_F32_32x32x4x2B_F16 MFMA_F32_4x4x4x16B_BF16 MFMA_F32_16x16x4x4B_BF16 MFMA_F32_32x32x4x2B_BF16
    MFMA_F32_4x4x1x16B_F32 MFMA_F32_16x16x1x4B_F32 MFMA_F32_32x32x1x2B_F32 MFMA_F64_4x4x4x4B_F64
    MFMA_I32_4x4x4x16B_I8 MFMA_I32_16x16x4x4B_I8 MFMA_I32_32x32x4x2B_I8
    """.split()
)

_WGP_COMMON = (
    "compute = fp64|fp32|fp16|int64|int32|int16|int8, storage = b64|b32|b16|b8, "
    "subgroup = shuffle|arithmetic, dot = dp4xi8toi32"
)


@dataclass(frozen=True, slots=True)
class Target:
    """One GPU target.  ``features`` is the LLVM feature string (``+ptxNN`` selects the PTX ISA)."""

    name: str
    backend: str  # "cuda" | "rocm"
    arch: str
    features: str
    threads_per_wave: int
    mma_intrinsics: tuple[str, ...]
    max_shared_bytes: int
    sms: int  # SMs / CUs of the arch's reference device (A100 108, H100 132, MI300X 304)
    has_cp_async: bool = False  # cp.async global->shared copies with commit/wait groups (NVIDIA sm_80+)
    has_mma_sync: bool = False  # mma.sync, its m16n8 fragments and ldmatrix (NVIDIA sm_80+)
    has_nvvm_math: bool = False  # NVVM's ex2.approx.ftz.f32 and cvt.rn.bf16 intrinsics
    has_tma: bool = False  # cp.async.bulk.tensor with PTX 8.3's tensormap proxy fence (sm_90a's +ptx83)
    has_wgmma: bool = False  # warpgroup MMA (sm_90a only: sm_90 without the 'a' has none)
    # relaxed GPU-scope red/atom as inline PTX (red.relaxed.gpu.global.add.f32, .s32 min/max, f16x2: sm_70+)
    has_red: bool = False
    has_red_bf16x2: bool = False  # red/atom .add.noftz.bf16x2 (sm_90+)
    has_red_vector: bool = False  # red.global.add .v2/.v4 of f32 and of f16x2/bf16x2 words (sm_90, PTX 8.1)

    @property
    def variant_name(self) -> str:
        """Name of the ``hal.executable.variant`` (also the dump file suffix)."""
        return "cuda" if self.backend == "cuda" else "rocm"

    @property
    def binary_format(self) -> str:
        """Format of the GPU image IREE produces: ``"ptx"`` or ``"hsaco"``."""
        return "ptx" if self.backend == "cuda" else "hsaco"

    @property
    def is_nvidia(self) -> bool:
        return self.backend == "cuda"

    def _mma_text(self) -> str:
        return ", ".join(f"<{m}>" for m in self.mma_intrinsics)

    def attr_text(self) -> str:
        """The full ``#hal.executable.target<...>`` attribute for this target."""
        if self.backend == "cuda":
            return (
                '#hal.executable.target<"cuda", "cuda-nvptx-fb", {iree_codegen.target_info = '
                f'#iree_gpu.target<arch = "{self.arch}", features = "{self.features}", wgp = <'
                f"{_WGP_COMMON}, mma = [{self._mma_text()}], subgroup_size_choices = "
                f"[{self.threads_per_wave}], max_workgroup_sizes = [1024, 1024, 1024], "
                f"max_thread_count_per_workgroup = 1024, max_workgroup_memory_bytes = "
                f"{self.max_shared_bytes}, max_workgroup_counts = [2147483647, 65535, 65535]>>}}>"
            )
        return (
            '#hal.executable.target<"rocm", "rocm-hsaco-fb", {abi = "hip", '
            "iree.encoding.resolver = #iree_gpu.gpu_encoding_resolver<>, "
            "iree_codegen.default_tuning_spec = "
            f'#rocm.builtin.tuning_module<"iree_default_tuning_spec_{self.arch}.mlir">, '
            f'iree_codegen.target_info = #iree_gpu.target<arch = "{self.arch}", '
            f'features = "{self.features}", wgp = <{_WGP_COMMON}, mma = [{self._mma_text()}], '
            f"subgroup_size_choices = [{self.threads_per_wave}], "
            "max_workgroup_sizes = [1024, 1024, 1024], max_thread_count_per_workgroup = 1024, "
            f"max_workgroup_memory_bytes = {self.max_shared_bytes}, "
            "max_workgroup_counts = [2147483647, 2147483647, 2147483647], "
            "max_load_instruction_bits = 128, simds_per_wgp = 4, vgpr_space_bits = 16384, "
            'dma_sizes = [32], workgroup_memory_bank_count = 32>>, ukernels = "none"}>'
        )


_NV = {"has_cp_async": True, "has_mma_sync": True, "has_nvvm_math": True, "has_red": True}
# sm_90's +ptx80 (kept: the golden modules name it) is below the vector red's PTX 8.1; sm_90a's +ptx83 is not
_HOPPER = {"has_tma": True, "has_wgmma": True, "has_red_vector": True}
_TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("sm_80", "cuda", "sm_80", "+ptx76", 32, _NV_MMA_SM80, 166912, 108, **_NV),
        Target("sm_90", "cuda", "sm_90", "+ptx80", 32, _NV_MMA_SM90, 232448, 132, **_NV, has_red_bf16x2=True),
        # PTX 8.3: fence.proxy.tensormap::generic (TMA maps written by the host, read through global memory)
        Target(
            "sm_90a", "cuda", "sm_90a", "+ptx83", 32, _NV_MMA_SM90, 232448, 132, **_NV, **_HOPPER, has_red_bf16x2=True
        ),
        Target("gfx942", "rocm", "gfx942", "", 64, _AMD_MMA_GFX942, 65536, 304),
    )
}

TARGET_NAMES: tuple[str, ...] = tuple(_TARGETS)


def get_target(name: str) -> Target:
    """Return the :class:`Target` called ``name`` or raise ``UnsupportedTargetError``."""
    try:
        return _TARGETS[name]
    except (KeyError, TypeError):
        raise UnsupportedTargetError(target=name, expected=", ".join(TARGET_NAMES)) from None
