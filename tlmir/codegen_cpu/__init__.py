"""CPU backend: loop IR -> LLVM IR -> native code for the host (explicit SIMD, OpenMP).

Importing the package registers it as backend "cpu" (runtime.backend), which is how
`tlmir.build`, measurement and the front end reach it."""
from __future__ import annotations

import concurrent.futures

from ..ir.stmt import PrimFunc
from ..runtime.backend import Timing, register_backend
from ..runtime.target import HardwareParams
from .jit import Kernel, compile_func, compile_object, remember
from .parallel import have_openmp

__all__ = ["compile_func", "Kernel", "Timing", "have_openmp", "CPUBackend"]


class CPUBackend:
    """Native code for CPU targets, held to the target's instruction set."""
    name = "cpu"

    def compile(self, func: PrimFunc, hw: HardwareParams | None) -> Kernel:
        return compile_func(func, hw)

    def supports(self, hw: HardwareParams) -> bool:
        return hw.kind == "cpu"

    def compile_ahead(self, funcs: list[PrimFunc], hw: HardwareParams | None,
                      executor: concurrent.futures.Executor, timeout: float | None = None) -> dict:
        """A search round's programs optimised and compiled to machine code in `executor`'s
        processes (LLVM takes 0.2-0.8 s a program, most of a small kernel's trial): the
        objects, for `remember` in the process that runs them. Those not done within
        `timeout` seconds, and failures, are compiled in their trials, where they count."""
        futures = [executor.submit(compile_object, f, hw) for f in funcs]
        done, _ = concurrent.futures.wait(futures, timeout=timeout)
        objects = {}
        for fut in done:
            if fut.exception() is None and fut.result() is not None:
                key, obj, llvm_ir = fut.result()
                objects[key] = (obj, llvm_ir)
        return objects

    def remember(self, objects: dict) -> None:
        """Objects `compile_ahead` made: compiling their programs here now loads them."""
        remember(objects)


register_backend(CPUBackend())
