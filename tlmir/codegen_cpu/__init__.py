"""CPU backend: loop IR -> LLVM IR -> native code for the host (explicit SIMD, OpenMP).

Importing the package registers it as backend "cpu" (runtime.backend), which is how
`tlmir.build`, measurement and the front end reach it."""
from __future__ import annotations

from ..ir.stmt import PrimFunc
from ..runtime.backend import Timing, register_backend
from ..runtime.target import HardwareParams
from .jit import Kernel, compile_func
from .parallel import have_openmp

__all__ = ["compile_func", "Kernel", "Timing", "have_openmp", "CPUBackend"]


class CPUBackend:
    """Native code for CPU targets, held to the target's instruction set."""
    name = "cpu"

    def compile(self, func: PrimFunc, hw: HardwareParams | None) -> Kernel:
        return compile_func(func, hw)

    def supports(self, hw: HardwareParams) -> bool:
        return hw.kind == "cpu"


register_backend(CPUBackend())
