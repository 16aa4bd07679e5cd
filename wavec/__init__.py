"""wavec: a Python compiler for wave-level GPU kernels.

Authors write the computation on symbolic tensors under ``@wc.wave(constraints)``; ``wc.compile``
derives every thread's indices, lowers through MLIR to PTX/cubin or HSACO and returns a callable
kernel that runs on PyTorch tensors (or on the CPU emulator).
"""

from importlib import import_module as _import_module
from importlib.util import find_spec as _find_spec

if _find_spec("torch") is None:  # everything below traces to torch.fx
    raise ImportError(
        "wavec needs PyTorch: pip install torch (a CPU build: pip install torch --index-url "
        "https://download.pytorch.org/whl/cpu; or scripts/setup in a checkout)"
    )

from .errors import WavecError  # noqa: E402 - after the torch check
from .frontend.constraints import (
    HardwareConstraint,
    SchedulingConstraint,
    TilingConstraint,
    WaveConstraint,
    WorkgroupConstraint,
)
from .frontend.dtypes import bf16, f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz, f16, f32, i1, i8, i16, i32, i64, u8
from .frontend.kernel import WaveKernel, wave
from .frontend.ops import (
    arange,
    binary,
    broadcast,
    cast,
    clip,
    index,
    iterate,
    maximum,
    minimum,
    mma,
    permute,
    read,
    tile_start,
    unary,
    where,
    write,
)
from .frontend.ops_atomic import arrive, atomic_add, atomic_max, atomic_min, scatter_add
from .frontend.ops_control import allocate, barrier, conditional, exit_if
from .frontend.ops_debug import debug_log
from .frontend.ops_math import (
    abs,  # noqa: A004 - wc.abs, elementwise
    ceil,
    cos,
    erf,
    exp,
    exp2,
    floor,
    gelu,
    log,
    log1p,
    log2,
    pow,  # noqa: A004 - wc.pow, elementwise
    reciprocal,
    round,  # noqa: A004 - wc.round, elementwise
    rsqrt,
    sigmoid,
    silu,
    sin,
    sqrt,
    tanh,
)
from .frontend.ops_reduce import (
    argmax,
    argmin,
    cumsum,
    max,  # noqa: A004 - wc.max, the DSL reduction
    min,  # noqa: A004 - wc.min, the DSL reduction
    scan,
    sum,  # noqa: A004 - wc.sum, the DSL reduction
    topk,
)
from .frontend.symbols import sym
from .frontend.types import Memory, Register, Scalar
from .indexing.mma import MMAType

__version__ = "0.1.0"

__all__ = [
    "WavecError", "HardwareConstraint", "SchedulingConstraint", "TilingConstraint", "WaveConstraint",
    "WorkgroupConstraint", "bf16", "f16", "f32", "i1", "i32", "WaveKernel", "wave", "binary", "broadcast", "cast",
    "exp", "exp2", "iterate", "log", "log2", "reciprocal", "rsqrt", "sqrt", "abs", "tanh", "sin", "cos", "erf",
    "max", "maximum", "minimum", "mma", "permute", "sum", "read", "unary", "where", "write", "sym", "Memory",
    "Register", "Scalar", "arange", "tile_start", "i64", "clip", "index", "arrive", "atomic_add", "atomic_max",
    "atomic_min", "scatter_add", "allocate", "barrier", "conditional", "exit_if", "cumsum", "log1p", "floor", "ceil",
    "round", "pow", "sigmoid", "silu", "gelu", "i8", "u8", "i16", "f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz",
    "min", "argmax", "argmin", "scan", "topk", "debug_log",
    "MMAType", "compile", "register_torch_op", "autotune",
    "__version__",
]  # fmt: skip


_LAZY = {"compile": "wavec.compiler", "register_torch_op": "wavec.runtime.torch_op", "autotune": "wavec.tuning"}


def __getattr__(name: str):
    if name in _LAZY:  # imported on first use: ``import wavec`` stays light
        return getattr(_import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'wavec' has no attribute {name!r}")
