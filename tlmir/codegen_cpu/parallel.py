"""Native symbols JIT-compiled kernels call (libgomp, libm, libc) and libgomp's thread pool.

MCJIT resolves external calls through LLVM's symbol table, so every function the generated
code may call is registered there explicitly rather than trusting the process's link map.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

import llvmlite.binding as llvm

_OMP_SYMBOLS = ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")
_LIBM_SYMBOLS = ("tanhf", "tanh", "erff", "erf", "expf", "exp", "logf", "log", "floorf", "floor")
_LIBC_SYMBOLS = ("aligned_alloc", "free", "memset", "memcpy", "memmove")


def _open(name: str, *fallbacks: str) -> ctypes.CDLL | None:
    for path in (ctypes.util.find_library(name), *fallbacks):
        if path:
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def _register(lib: ctypes.CDLL, names: tuple[str, ...]) -> None:
    for n in names:
        llvm.add_symbol(n, ctypes.cast(getattr(lib, n), ctypes.c_void_p).value)


@functools.cache
def _gomp() -> ctypes.CDLL | None:
    """libgomp with its entry points registered, or None (parallel loops then run serially).

    It is loaded with OMP_WAIT_POLICY unset whatever the process's setting (libgomp reads
    it once, when it loads): `tlmir tune | eval | iterate` set PASSIVE for torch's own
    OpenMP runtime (a separate library), and under PASSIVE every parallel kernel call
    waited for sleeping threads to wake: 34 -> 172 us for a softmax, 10 -> 86 us for a
    layernorm at 2 threads on this machine."""
    saved = os.environ.pop("OMP_WAIT_POLICY", None)
    try:
        lib = _open("gomp", "libgomp.so.1")
    finally:
        if saved is not None:
            os.environ["OMP_WAIT_POLICY"] = saved
    if lib is None or not all(hasattr(lib, n) for n in _OMP_SYMBOLS):
        return None
    _register(lib, _OMP_SYMBOLS)
    return lib


def have_openmp() -> bool:
    """Can parallel loops run on several threads (is libgomp loadable)?"""
    return _gomp() is not None


_team_pid: list[int] = []  # the process whose libgomp thread pool kernels have started


def usable_threads(requested: int) -> int:
    """`requested`, or 1 in a process forked after kernels ran multi-threaded: libgomp's
    thread pool does not survive fork() and the child would hang in GOMP_parallel."""
    if requested > 1:
        if not _team_pid:
            _team_pid.append(os.getpid())
        elif _team_pid[0] != os.getpid():
            return 1
    return requested


@functools.cache
def register_runtime_symbols() -> None:
    """Make libm / libc (and libgomp when present) callable from JIT code; idempotent."""
    for lib, names in ((_open("m", "libm.so.6"), _LIBM_SYMBOLS), (_open("c", "libc.so.6"), _LIBC_SYMBOLS)):
        if lib is not None:  # otherwise MCJIT falls back to the process's own symbols
            _register(lib, tuple(n for n in names if hasattr(lib, n)))
    _gomp()

