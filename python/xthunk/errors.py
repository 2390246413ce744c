"""xthunk's exceptions. Each carries xthunk's message (``str(e)``), ``causes`` (the messages
of the cause chain, outermost first) and the same chain as ``__cause__``."""


class XthunkError(Exception):
    """Base class of every error xthunk raises."""

    causes: list

    def __init__(self, message):
        super().__init__(message)
        self.causes = []


class InvalidArgumentError(XthunkError, ValueError):
    """An input does not fit the program: wrong dtype, shape, name, count or size."""


class ProgramError(XthunkError, ValueError):
    """A program does not read, decode or validate (a corrupt or invalid file)."""


class UnavailableError(XthunkError):
    """A backend's library or device is not there."""


class UnsupportedError(XthunkError):
    """The device does not support what the program (or the call) needs."""


class OutOfMemoryError(XthunkError, MemoryError):
    """An allocation failed, or the program needs more memory than the device has."""


class ExecutionError(XthunkError, RuntimeError):
    """Running failed: a kernel, a vendor call, a deadline, a collective."""


class CancelledError(ExecutionError):
    """A run was cancelled (``Execution.cancel()``, or ``KeyboardInterrupt`` during a blocking
    run, which raises ``KeyboardInterrupt`` itself): it stopped between thunks."""


class DeadlineExceededError(ExecutionError, TimeoutError):
    """A run did not finish before its ``deadline``."""
