"""CPU backend: loop IR -> LLVM IR -> native code for the host (explicit SIMD, OpenMP)."""
from .jit import Kernel, Timing, compile_func
from .parallel import have_openmp

__all__ = ["compile_func", "Kernel", "Timing", "have_openmp"]
