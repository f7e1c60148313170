"""Compile a PrimFunc to native code (LLVM O3 + MCJIT for the host CPU) and call it on numpy arrays."""
from __future__ import annotations

import ctypes
import functools
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import llvmlite.binding as llvm
import numpy as np

from ..errors import ArgumentError, BuildError
from ..ir.stmt import PrimFunc
from ..runtime.target import HardwareParams, host_hardware
from .analysis import stored_buffers
from .llvm_ir import emit_module
from .prefetch import add_prefetches
from .parallel import default_num_threads, have_openmp, register_runtime_symbols, usable_threads


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    register_runtime_symbols()


_ABOVE = {"avx512": (), "avx2": ("avx512",), "sse": ("avx512", "avx", "fma", "f16c", "vaes", "vpclmulqdq")}
# feature-name prefixes an instruction set does not have (on a host that does)


def _new_target_machine(isa: str | None = None) -> llvm.TargetMachine:
    """A target machine for this host, held to `isa` (None: everything the host has).
    MCJIT takes ownership of the one it is given, so each engine gets its own;
    optimisation and assembly share `_target_machine(isa)`."""
    _init_llvm()
    try:
        feats = llvm.get_host_cpu_features()
        for name in list(feats):
            if isa and name.startswith(_ABOVE[isa]):
                feats[name] = False
        features = feats.flatten()
    except RuntimeError:  # not every platform reports features; the CPU name still implies them
        features = ""
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features, opt=3)


@functools.cache
def _target_machine(isa: str | None = None) -> llvm.TargetMachine:
    return _new_target_machine(isa)


def _optimize(mod: llvm.ModuleRef, isa: str | None = None) -> None:
    tm = _target_machine(isa)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


@dataclass(frozen=True)
class Timing:
    """Per-call wall time in seconds: `times` holds one averaged sample per repeat."""
    median: float
    min: float
    times: tuple[float, ...]


class Kernel:
    """A compiled PrimFunc, callable as kernel(*arrays) with one numpy array per argument."""

    def __init__(self, func: PrimFunc, engine: llvm.ExecutionEngine, llvm_ir: str, isa: str | None = None):
        self.func, self.isa = func, isa
        self.llvm_ir = llvm_ir  # after optimisation
        self.num_threads: int | None = None  # None: default_num_threads() at each call
        self._engine = engine  # owns the machine code behind _cfunc
        argtypes = [ctypes.c_void_p] * len(func.args) + [ctypes.c_int32]
        addr = engine.get_function_address(func.name)
        self._cfunc = ctypes.CFUNCTYPE(None, *argtypes)(addr)
        self._outputs = stored_buffers(func)

    @functools.cached_property
    def assembly(self) -> str:
        """Host assembly of the optimised module (built on first use: it costs a codegen)."""
        mod = llvm.parse_assembly(self.llvm_ir)
        return _target_machine(self.isa).emit_assembly(mod)

    def _bind(self, arrays: tuple) -> Callable[[], None]:
        """Validate `arrays` and return a no-argument native call on them (no copies)."""
        f = self.func
        if len(arrays) != len(f.args):
            names = ", ".join(b.name for b in f.args)
            raise ArgumentError(f"{f.name}: expected {len(f.args)} arrays ({names}), got {len(arrays)}")
        ptrs = []
        for k, (a, buf) in enumerate(zip(arrays, f.args)):
            where = f"{f.name}: argument {k} ({buf.name})"
            if not isinstance(a, np.ndarray):
                raise ArgumentError(f"{where}: expected a numpy.ndarray, got {type(a).__name__}")
            if a.dtype != np.dtype(buf.dtype):
                raise ArgumentError(f"{where}: expected dtype {buf.dtype}, got {a.dtype}")
            if a.shape != buf.shape:
                raise ArgumentError(f"{where}: expected shape {buf.shape}, got {a.shape}")
            if not a.flags.c_contiguous:
                raise ArgumentError(f"{where}: array is not C-contiguous (use np.ascontiguousarray)")
            if id(buf) in self._outputs and not a.flags.writeable:
                raise ArgumentError(f"{where}: the kernel writes this array but it is read-only")
            ptrs.append(a.ctypes.data)
        for k, (a, buf) in enumerate(zip(arrays, f.args)):
            if id(buf) not in self._outputs:
                continue
            for j, (b, other) in enumerate(zip(arrays, f.args)):
                if j != k and np.may_share_memory(a, b):
                    raise ArgumentError(f"{f.name}: argument {k} ({buf.name}) is written and shares memory "
                                        f"with argument {j} ({other.name}); pass separate arrays")
        nt = default_num_threads() if self.num_threads is None else self.num_threads
        if isinstance(nt, bool) or not isinstance(nt, int) or nt < 1:
            raise ArgumentError(f"{f.name}: num_threads must be a positive int, got {nt!r}")
        return functools.partial(self._cfunc, *ptrs, usable_threads(nt))

    def __call__(self, *arrays: np.ndarray) -> None:
        self._bind(arrays)()

    def call_pointers(self, pointers: Sequence[int], threads: int) -> None:
        """Run on raw data pointers, unchecked: for a caller whose buffers are right by
        construction (the front end's plan: its own allocations, views of checked shapes)."""
        self._cfunc(*pointers, usable_threads(threads))

    def benchmark(self, *arrays: np.ndarray, warmup: int = 2, repeat: int = 10,
                  min_time: float = 1e-3) -> Timing:
        """Time the kernel on `arrays`. Each sample runs enough calls to last `min_time`
        seconds, so short kernels are not lost in timer resolution."""
        call = self._bind(arrays)
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


def compile_func(func: PrimFunc, hw: HardwareParams | None = None) -> Kernel:
    """PrimFunc -> optimised native Kernel for `hw` (default: this host; an AVX2 `hw` on an
    AVX-512 host gets 256-bit code). Raises BuildError naming `func`."""
    _init_llvm()
    isa = hw.isa if hw is not None else None
    lanes = hw.vector_lanes if hw is not None else host_hardware().vector_lanes
    text = emit_module(add_prefetches(func), vector_lanes_hint=lanes, openmp=have_openmp())
    tm = _target_machine(isa)
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise BuildError(f"{func.name}: LLVM rejected the generated IR: {e}") from None
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    _optimize(mod, isa)
    llvm_ir = str(mod)
    try:
        engine = llvm.create_mcjit_compiler(mod, _new_target_machine(isa))
        engine.finalize_object()
    except RuntimeError as e:
        raise BuildError(f"{func.name}: native code generation failed: {e}") from None
    return Kernel(func, engine, llvm_ir, isa)
