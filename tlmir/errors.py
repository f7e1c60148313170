"""Errors a user can cause. Every one names the stage / axis / tensor / file involved."""


class TlmirError(Exception):
    """Base of every error tlmir raises on bad input."""


class ShapeError(TlmirError):
    """A tensor is indexed or defined with the wrong rank or extent."""


class DefinitionError(TlmirError):
    """An operator definition (te.compute body, reduction) is malformed."""


class ScheduleError(TlmirError):
    """A schedule primitive was applied to something it cannot act on."""


class LowerError(TlmirError):
    """A schedule cannot be lowered to a loop program (e.g. a bad attach point)."""


class BuildError(TlmirError):
    """Code generation or compilation failed."""


class ResourceError(BuildError):
    """A GPU kernel needs more than its target allows a block (threads, shared memory,
    registers): refused before it is ever launched."""


class ArgumentError(TlmirError):
    """A compiled kernel was called with arrays of the wrong dtype, shape or layout."""


class MeasureError(TlmirError):
    """A candidate crashed, hung or produced a wrong result during measurement."""


class DeviceError(TlmirError):
    """The GPU or its driver refused an operation (a module that does not load, a launch
    over its limits, a faulting kernel)."""


class NoDeviceError(DeviceError):
    """A GPU was needed and this machine has none (no CUDA driver, or no device)."""


class RecordError(TlmirError):
    """A records database or record file is unreadable or inconsistent."""


class BusyError(TlmirError):
    """A run (an evaluation's search of one strategy, an iterate run) is in use by another
    process."""


class ModelError(TlmirError):
    """A model checkpoint or training input is invalid."""


class FrontendError(TlmirError):
    """A PyTorch model cannot be imported or run (unknown model, unsupported input,
    dynamic shapes, a failed export)."""


class LanguageError(TlmirError):
    """A tensor sentence is malformed, of another version, or has unknown words."""


class LoweringWarning(UserWarning):
    """A schedule annotation lowering had to drop (e.g. a vectorize it runs serially)."""
