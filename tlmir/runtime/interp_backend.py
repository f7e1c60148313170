"""Backend "interp": the reference interpreter behind the backend interface.

It runs any lowered program on any target (slowly: small shapes only), so a schedule can be
checked against an executor that shares nothing with a code generator, and a consumer of
`runtime.backend.compile_func` can run without one (`tlmir.build(..., backend="interp")`)."""
from __future__ import annotations

import numpy as np

from ..ir.stmt import PrimFunc
from .backend import Timing, check_arguments, register_backend, stored_buffers, time_calls
from .interpreter import compile_interpreted
from .target import HardwareParams


class InterpretedKernel:
    """A PrimFunc run by the interpreter, called and timed like a native kernel."""

    def __init__(self, func: PrimFunc):
        self.func = func
        self.num_threads: int | None = None  # accepted for the interface; the interpreter runs serially
        self._run = compile_interpreted(func)
        self._outputs = stored_buffers(func)

    @property
    def source(self) -> str:
        """The loop program it interprets, as `tlmir show` prints it."""
        return str(self.func)

    def __call__(self, *arrays: np.ndarray) -> None:
        check_arguments(self.func, arrays, self._outputs)
        self._run(*arrays)

    def benchmark(self, *arrays: np.ndarray, warmup: int = 2, repeat: int = 10,
                  min_time: float = 1e-3) -> Timing:
        check_arguments(self.func, arrays, self._outputs)
        return time_calls(lambda: self._run(*arrays), warmup, repeat, min_time)


class InterpBackend:
    name = "interp"

    def compile(self, func: PrimFunc, hw: HardwareParams | None) -> InterpretedKernel:
        return InterpretedKernel(func)

    def supports(self, hw: HardwareParams) -> bool:
        return True  # the interpreter runs every program, GPU-style ones included


register_backend(InterpBackend())
