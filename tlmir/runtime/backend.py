"""Backends: the one seam between a loop program and code that runs it.

A backend turns a lowered `PrimFunc` into a kernel (render + compile + a callable program)
for a `HardwareParams` target. Consumers (`tlmir.build`, `measure`, `evaluate`, the CLI,
the front end) call `compile_func` here and never name a code generator, so a second
backend is one registered object, not an edit to every caller.

Backends register themselves (`register_backend`) when their module is imported. This
module never imports one: `get_backend` loads a known backend's module by its name
(`importlib`), so the lower layer (runtime) does not depend on the code generators above it
and a backend module may import this one without a cycle (tests/test_imports.py).
"""
from __future__ import annotations

import importlib
import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from ..errors import ArgumentError, BuildError
from ..ir.stmt import PrimFunc, Store, walk_stmt
from .target import HardwareParams, host_hardware

# name -> the module whose import registers that backend (loaded on first use)
KNOWN_BACKENDS = {"cpu": "tlmir.codegen_cpu", "cuda": "tlmir.codegen_cuda", "interp": "tlmir.runtime.interp_backend"}
DEFAULT_FOR_KIND = {"cpu": "cpu", "cuda": "cuda"}  # HardwareParams.kind -> the backend that compiles for it
NUM_THREADS_ENV = "TLMIR_NUM_THREADS"


@dataclass(frozen=True)
class Timing:
    """Per-call wall time in seconds: `times` holds one averaged sample per repeat."""
    median: float
    min: float
    times: tuple[float, ...]


class CompiledKernel(Protocol):
    """What every backend's `compile` returns: a program callable on numpy arrays (one per
    argument of the PrimFunc, outputs written in place)."""
    num_threads: int | None  # None: the backend's default at each call

    @property
    def source(self) -> str:
        """Readable text of the program as the backend runs it."""

    def __call__(self, *arrays: np.ndarray) -> None: ...

    def benchmark(self, *arrays: np.ndarray, warmup: int = 2, repeat: int = 10,
                  min_time: float = 1e-3) -> Timing: ...


class Backend(Protocol):
    name: str

    def compile(self, func: PrimFunc, hw: HardwareParams | None) -> CompiledKernel:
        """`func` as a kernel for `hw` (None: this host). Raises BuildError naming `func`."""

    def supports(self, hw: HardwareParams) -> bool:
        """Whether this backend can produce code for `hw`."""


_REGISTRY: dict[str, Backend] = {}


def register_backend(backend: Backend) -> None:
    """Add (or replace) a backend under `backend.name`."""
    _REGISTRY[backend.name] = backend


def available_backends() -> list[str]:
    return sorted(set(KNOWN_BACKENDS) | set(_REGISTRY))


def get_backend(name: str) -> Backend:
    """The backend called `name`, importing its module the first time."""
    if name not in _REGISTRY and name in KNOWN_BACKENDS:
        importlib.import_module(KNOWN_BACKENDS[name])
    if name not in _REGISTRY:
        raise BuildError(f"unknown backend {name!r}; available: {', '.join(available_backends())}")
    return _REGISTRY[name]


def backend_for(hw: HardwareParams | None) -> Backend:
    """The default backend of a hardware target (None: this host)."""
    kind = (hw or host_hardware()).kind
    if kind not in DEFAULT_FOR_KIND:
        raise BuildError(f"no backend compiles for hardware of kind {kind!r}; "
                         f"known kinds: {', '.join(DEFAULT_FOR_KIND)}")
    return get_backend(DEFAULT_FOR_KIND[kind])


def compile_func(func: PrimFunc, hw: HardwareParams | None = None, backend: str | None = None) -> CompiledKernel:
    """Compile `func` for `hw` (None: this host) with `backend` (None: the target's default)."""
    b = get_backend(backend) if backend is not None else backend_for(hw)
    if hw is not None and not b.supports(hw):
        raise BuildError(f"{func.name}: backend {b.name!r} cannot compile for {hw.key}")
    return b.compile(func, hw)


def default_num_threads() -> int:
    """Threads for a kernel whose `num_threads` is None: $TLMIR_NUM_THREADS (read now, at each
    call) or all CPUs. Here, not in a code generator, so the front end reads the same
    setting without naming one."""
    raw = os.environ.get(NUM_THREADS_ENV, "").strip()
    if not raw:
        return os.cpu_count() or 1
    try:
        n = int(raw)
    except ValueError:
        raise ArgumentError(f"{NUM_THREADS_ENV}={raw!r} is not an integer thread count") from None
    if n < 1:
        raise ArgumentError(f"{NUM_THREADS_ENV}={raw!r}: the thread count must be at least 1")
    return n


def stored_buffers(func: PrimFunc) -> set[int]:
    """ids of the buffers `func` writes: its outputs, which must be writeable arrays
    (`check_arguments`'s `written`; a kernel computes it once)."""
    return {id(s.buffer) for s in walk_stmt(func.body) if isinstance(s, Store)}


def check_arguments(func: PrimFunc, arrays: tuple, written: set[int],
                    inplace: dict[int, int] | None = None) -> None:
    """Raise ArgumentError unless `arrays` fit `func.args` one to one: numpy arrays of the
    buffer's dtype and shape, C-contiguous, writeable where `func` writes them (`written`:
    ids of those buffers), and no written array sharing memory with another argument but
    the input `inplace` names for it. Every backend checks the same, so a call valid on one
    is valid on all."""
    if len(arrays) != len(func.args):
        names = ", ".join(b.name for b in func.args)
        raise ArgumentError(f"{func.name}: expected {len(func.args)} arrays ({names}), got {len(arrays)}")
    for k, (a, buf) in enumerate(zip(arrays, func.args)):
        where = f"{func.name}: argument {k} ({buf.name})"
        if not isinstance(a, np.ndarray):
            raise ArgumentError(f"{where}: expected a numpy.ndarray, got {type(a).__name__}")
        if a.dtype != np.dtype(buf.dtype):
            raise ArgumentError(f"{where}: expected dtype {buf.dtype}, got {a.dtype}")
        if a.shape != buf.shape:
            raise ArgumentError(f"{where}: expected shape {buf.shape}, got {a.shape}")
        if not a.flags.c_contiguous:
            raise ArgumentError(f"{where}: array is not C-contiguous (use np.ascontiguousarray)")
        if id(buf) in written and not a.flags.writeable:
            raise ArgumentError(f"{where}: the kernel writes this array but it is read-only")
    for k, (a, buf) in enumerate(zip(arrays, func.args)):
        if id(buf) not in written:
            continue
        for j, (b, other) in enumerate(zip(arrays, func.args)):
            if j != k and (inplace or {}).get(k) != j and np.may_share_memory(a, b):
                also = f", or build with inplace={{{k}: {j}}}" if id(other) not in written else ""
                raise ArgumentError(f"{func.name}: argument {k} ({buf.name}) is written and shares memory "
                                    f"with argument {j} ({other.name}); pass separate arrays{also}")


def time_calls(call: Callable[[], None], warmup: int = 2, repeat: int = 10, min_time: float = 1e-3) -> Timing:
    """Time `call`. Each sample runs enough calls to last `min_time` seconds, so short
    kernels are not lost in timer resolution."""
    for _ in range(warmup):
        call()
    t0 = time.perf_counter()
    call()
    once = time.perf_counter() - t0
    number = max(1, math.ceil(min_time / max(once, 1e-9)))
    times = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        times.append((time.perf_counter() - t0) / number)
    return Timing(median=statistics.median(times), min=min(times), times=tuple(times))
