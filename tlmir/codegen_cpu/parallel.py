"""Native symbols JIT-compiled kernels call (libgomp, libm, libc) and libgomp's thread pool.

MCJIT resolves external calls through LLVM's symbol table, so every function the generated
code may call is registered there explicitly rather than trusting the process's link map.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import tempfile

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


def _loaded_gomp() -> str | None:
    """The file of a libgomp already mapped into this process (torch's, say), or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                path = fields[5].strip() if len(fields) == 6 else ""
                if os.path.basename(path).startswith("libgomp"):
                    return path
    except OSError:
        pass
    return None


def _private_gomp(path: str) -> ctypes.CDLL | None:
    """A second libgomp, loaded from a copy of `path`: the loader maps a file it has not
    seen as a library of its own, with its own thread pool and its own reading of the
    environment. The copy is deleted once mapped."""
    directory = tempfile.mkdtemp(prefix="tlmir-gomp-")
    try:
        copy = os.path.join(directory, "libgomp-tlmir.so.1")
        shutil.copyfile(path, copy)
        return ctypes.CDLL(copy)
    except OSError:
        return None
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@functools.cache
def _gomp() -> ctypes.CDLL | None:
    """libgomp with its entry points registered, or None (parallel loops then run serially).

    Kernels run under libgomp's default wait policy, as the measuring worker timed them:
    `tlmir tune | eval | iterate` and the demo set OMP_WAIT_POLICY=PASSIVE for torch's
    OpenMP, and under PASSIVE every parallel kernel call waited for sleeping threads to
    wake (34 -> 172 us for a softmax, 10 -> 86 us for a layernorm, 20 -> 106 us for
    ResNet's 1024x14x14 add+ReLU, at 2 threads). libgomp reads the policy once, when it
    loads, so it is loaded with OMP_WAIT_POLICY unset; and where the process set a policy
    and a libgomp is loaded already (torch's wheel ships one, which the loader would hand
    back by its name), kernels get a private copy. With no policy set they share the
    loaded one, as a model compiled beside torch should: one thread pool, not two."""
    saved = os.environ.pop("OMP_WAIT_POLICY", None)
    try:
        loaded = _loaded_gomp() if saved is not None else None
        lib = (_private_gomp(loaded) if loaded else None) or _open("gomp", "libgomp.so.1")
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

