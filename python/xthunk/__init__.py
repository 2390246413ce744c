"""xthunk: load serialized thunk programs and run them on CUDA, HIP or the CPU.

    import numpy as np, xthunk
    rt = xthunk.Runtime()                      # backend="auto": a GPU if there is one
    exe = rt.load("examples/mlp.txtpb")        # a path, bytes, or a built Program
    probs = exe(x=x, w1=w1, b1=b1, w2=w2, b2=b2)

See docs/python.md.
"""

from . import errors
from ._xthunk import (
    PROGRAM_ABI_VERSION,
    Arg,
    Device,
    DeviceArray,
    Executable,
    Execution,
    Program,
    ProgramBuilder,
    Runtime,
    Tensor,
    TensorSpec,
    __version__,
    devices,
    load_plugin,
    scalar,
)
from .errors import (
    CancelledError,
    DeadlineExceededError,
    ExecutionError,
    InvalidArgumentError,
    OutOfMemoryError,
    ProgramError,
    UnavailableError,
    UnsupportedError,
    XthunkError,
)

_host = None


def from_dlpack(array, runtime=None, device=0):
    """Copies an array exported through DLPack (``__dlpack__``, host memory) into a
    ``DeviceArray`` on ``runtime``'s device (default: the host backend's device 0)."""
    global _host
    if runtime is None:
        if _host is None:
            _host = Runtime("host")
        runtime = _host
    return runtime.from_dlpack(array, device)


__all__ = [
    "PROGRAM_ABI_VERSION",
    "load_plugin",
    "Arg",
    "CancelledError",
    "DeadlineExceededError",
    "Device",
    "DeviceArray",
    "Executable",
    "Execution",
    "ExecutionError",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "Program",
    "ProgramBuilder",
    "ProgramError",
    "Runtime",
    "Tensor",
    "TensorSpec",
    "UnavailableError",
    "UnsupportedError",
    "XthunkError",
    "__version__",
    "devices",
    "errors",
    "from_dlpack",
    "scalar",
]
