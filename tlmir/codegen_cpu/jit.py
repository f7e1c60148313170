"""Compile a PrimFunc to native code (LLVM O3 + MCJIT for the host CPU) and call it on numpy arrays."""
from __future__ import annotations

import ctypes
import functools
import hashlib
from typing import Callable, Sequence

import llvmlite.binding as llvm
import numpy as np

from ..errors import ArgumentError, BuildError
from ..ir.stmt import PrimFunc
from ..runtime.backend import Timing, check_arguments, default_num_threads, stored_buffers, time_calls
from ..runtime.target import HardwareParams, host_hardware
from .llvm_ir import emit_module
from .prefetch import add_prefetches
from .parallel import have_openmp, register_runtime_symbols, usable_threads


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    register_runtime_symbols()


_ABOVE = {"avx512": (), "avx2": ("avx512",), "sse": ("avx512", "avx", "fma", "f16c", "vaes", "vpclmulqdq")}
# feature-name prefixes an instruction set does not have (on a host that does)


def _new_target_machine(isa: str | None = None, jit: bool = False) -> llvm.TargetMachine:
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
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features, opt=3, jit=jit)


@functools.cache
def _target_machine(isa: str | None = None) -> llvm.TargetMachine:
    return _new_target_machine(isa)


def _optimize(mod: llvm.ModuleRef, isa: str | None = None) -> None:
    tm = _target_machine(isa)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


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

    @property
    def source(self) -> str:
        """The optimised LLVM IR (the backend interface's readable program)."""
        return self.llvm_ir

    def _bind(self, arrays: tuple) -> Callable[[], None]:
        """Validate `arrays` and return a no-argument native call on them (no copies)."""
        f = self.func
        check_arguments(f, arrays, self._outputs)
        ptrs = [a.ctypes.data for a in arrays]
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
        """Time the kernel on `arrays` (see runtime.backend.time_calls)."""
        return time_calls(self._bind(arrays), warmup, repeat, min_time)


_AHEAD: dict[str, tuple[bytes, str]] = {}  # memo key -> (object code, optimised IR) compiled elsewhere
_AHEAD_LIMIT = 256  # objects kept (a few rounds' worth); then the memo starts over


def _emit(func: PrimFunc, hw: HardwareParams | None) -> tuple[str, str | None]:
    """(LLVM IR text, instruction set) of `func` for `hw`."""
    _init_llvm()
    isa = hw.isa if hw is not None else None
    lanes = hw.vector_lanes if hw is not None else host_hardware().vector_lanes
    return emit_module(add_prefetches(func), vector_lanes_hint=lanes, openmp=have_openmp()), isa


def _memo_key(text: str, isa: str | None) -> str:
    return hashlib.sha1(f"{isa}\n{text}".encode()).hexdigest()


def _on_target(mod: llvm.ModuleRef, isa: str | None) -> llvm.ModuleRef:
    """`mod` with the target machine's triple and data layout."""
    tm = _target_machine(isa)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    return mod


def _optimized_module(func: PrimFunc, text: str, isa: str | None) -> llvm.ModuleRef:
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise BuildError(f"{func.name}: LLVM rejected the generated IR: {e}") from None
    _optimize(_on_target(mod, isa), isa)
    return mod


def compile_object(func: PrimFunc, hw: HardwareParams | None = None) -> tuple[str, bytes, str] | None:
    """`func` optimised and compiled to relocatable machine code, for another process of
    this host to load (`remember`): (memo key, object code, optimised IR), or None if it
    does not build (its trial compiles it again and reports why)."""
    try:
        text, isa = _emit(func, hw)
        mod = _optimized_module(func, text, isa)
        return _memo_key(text, isa), _object_machine(isa).emit_object(mod), str(mod)
    except (BuildError, RuntimeError):
        return None


@functools.cache
def _object_machine(isa: str | None) -> llvm.TargetMachine:
    """The target machine that emits objects for MCJIT to load: JIT code model and settings."""
    return _new_target_machine(isa, jit=True)


def remember(objects: dict) -> None:
    """Objects `compile_object` made elsewhere, keyed as `compile_func` looks them up."""
    if len(_AHEAD) + len(objects) > _AHEAD_LIMIT:
        _AHEAD.clear()
    _AHEAD.update(objects)


def compile_func(func: PrimFunc, hw: HardwareParams | None = None) -> Kernel:
    """PrimFunc -> optimised native Kernel for `hw` (default: this host; an AVX2 `hw` on an
    AVX-512 host gets 256-bit code). Raises BuildError naming `func`. A program compiled
    ahead in another process (`compile_object`, `remember`) is loaded, not compiled again."""
    text, isa = _emit(func, hw)
    ahead = _AHEAD.get(_memo_key(text, isa))
    try:
        if ahead is not None:
            obj, llvm_ir = ahead
            engine = llvm.create_mcjit_compiler(_on_target(llvm.parse_assembly(""), isa), _new_target_machine(isa))
            engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        else:
            mod = _optimized_module(func, text, isa)
            llvm_ir = str(mod)
            engine = llvm.create_mcjit_compiler(mod, _new_target_machine(isa))
        engine.finalize_object()
    except RuntimeError as e:
        raise BuildError(f"{func.name}: native code generation failed: {e}") from None
    return Kernel(func, engine, llvm_ir, isa)

