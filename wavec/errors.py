"""The catalog of wavec errors: every error a user can see is a :class:`WavecError` with a message
template; one about a kernel prints its source location (``file:line``) first, so a shape mistake points
at the line of the kernel body that caused it (as Helion's ``exc.py`` does).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """A location in the user's kernel source."""

    filename: str
    line: int
    code: str = ""

    def __str__(self) -> str:
        text = f"{self.filename}:{self.line}"
        return f"{text}: {self.code.strip()}" if self.code else text


class WavecError(Exception):
    """Base class of all wavec errors.  ``template`` is formatted with the keyword arguments."""

    template = "{message}"

    def __init__(self, loc: SourceLoc | None = None, **fields: object) -> None:
        self.loc = loc
        self.fields = fields
        text = self.template.format(**fields)
        super().__init__(f"{loc}\n  {text}" if loc else text)

    def __reduce__(self):  # by message and attributes: errors cross process pools (parallel compiles, the tuner)
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[WavecError], args: tuple, state: dict) -> WavecError:
    """An unpickled error: its message and attributes as raised, no template formatted again (subclasses'
    ``__init__`` take other arguments)."""
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


class OutsideKernelError(WavecError):
    template = "wc.{op}() can only be called inside a @wc.wave kernel body (it traces; it does not compute)"


class ShapeError(WavecError):
    template = "{op}: {message}"


class DTypeError(WavecError):
    template = "{op}: {message}"


class AnnotationError(WavecError, TypeError):
    """A ``Memory[...]``, ``Register[...]`` or ``Scalar[...]`` type written wrongly (at the line writing it)."""

    template = "{kind}[...]: {message}"


class ConstraintError(WavecError):
    template = "constraint error: {message}"


class IndexConflictError(WavecError):
    template = (
        "conflicting thread layouts of equal priority for {what}:\n    {first_loc}: {first}\n    {second_loc}: {second}"
    )


class ExpansionError(WavecError):
    template = "expansion: {message}"


class OptionError(WavecError, ValueError):
    """A compile option has a value wavec does not accept."""

    template = "{option}: {message}"


class KnobError(WavecError, ValueError):
    """An environment knob (``wavec/knobs.py``) holds a value it does not accept."""

    template = "{env}={value!r} is not accepted; expected {accepted}"


class KernelDefinitionError(WavecError, TypeError):
    """Something that is not a compiled wavec kernel was used as one."""


class UnsupportedBackendError(WavecError):
    template = "unsupported backend {backend!r}; expected one of {expected}"


class CodegenError(WavecError):
    template = "codegen: {message}"


class CompileError(WavecError):
    template = "compiling {kernel} for {target} failed:\n{message}"


class ToolchainError(WavecError):
    """The toolchain (IREE, ptxas) is missing, failed, or produced something unusable."""


class UnsupportedTargetError(WavecError):
    template = "unsupported target {target!r}; expected one of {expected}"


class ArgumentError(WavecError):
    """A launch argument is unusable; names the argument and what was expected."""

    template = "kernel {kernel}: argument {arg!r}: {message}"


class AlignmentMiss(ArgumentError):
    """A size is not a multiple of the vector width the kernel accesses rows in: ``values`` (every symbol's
    value) lets :class:`~wavec.runtime.kernel.CompiledKernel` pick the narrow variant for them."""

    def __init__(self, values: dict[str, int], **fields: object) -> None:
        self.values = values
        super().__init__(None, **fields)


class StrideMiss(AlignmentMiss):
    """A tensor's strides or base pointer do not suit the kernel variant launched: ``strided`` maps each
    argument concerned to the longest run along its innermost dim that suits it (0: its innermost stride is
    not 1, read it element by element); :class:`~wavec.runtime.kernel.CompiledKernel` launches the strided
    variant of those caps."""

    def __init__(self, strided: dict[str, int], **fields: object) -> None:
        self.strided = strided
        super().__init__({}, **fields)


class LaunchError(WavecError):
    template = "kernel {kernel}: launch failed: {message}"


class TorchOpError(WavecError):
    """A wavec kernel cannot be registered (or re-registered) as a PyTorch operator."""

    template = "torch op {name}: {message}"


class CacheError(WavecError):
    template = "cache: {message}"


class EmulatorError(WavecError):
    template = "emulator: {message}"


class SharedMemoryRaceError(EmulatorError):
    template = (
        "emulator: shared-memory race at byte {address} of {buffer}: {first} and {second} with no barrier between"
    )


class GlobalMemoryRaceError(EmulatorError):
    template = (
        "emulator: global-memory race at element {index} of {buffer}: {first} and {second} store different "
        "values to it without an atomic"
    )


class OutOfBoundsError(WavecError):
    """An index outside its dimension: the emulator's, and the GPU's with ``WAVEC_CHECK_BOUNDS=1``; the
    location is the kernel line of the access."""

    template = "{access}: out-of-bounds access to {memory}: index {index} in dim {dim} (size {bound}) by {who}"


class TuningError(WavecError):
    template = "autotune: {message}"


class PerfError(WavecError):
    """The performance model cannot decompose a kernel launch (``wavec/perf``)."""

    template = "perf: {message}"
