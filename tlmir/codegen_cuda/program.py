"""A GPU program compiled for one architecture: CUDA C, PTX, cubin, what each kernel uses,
checked against the target's limits; callable and timed where a GPU exists.

Compiling needs no GPU (NVRTC), so a program is rendered, compiled and resource-checked
on any machine: a kernel over its target's limits (threads and static shared memory per
block before compiling, registers after) is a ResourceError before anything is launched,
which a search records as a failed trial. Running it needs the driver (codegen_cuda.driver); without a GPU that says so.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ..errors import ArgumentError, NoDeviceError, ResourceError
from ..ir.stmt import PrimFunc
from ..runtime.backend import Timing, check_arguments, stored_buffers
from ..runtime.target import HardwareParams
from .driver import Launcher, device_pointer
from .nvrtc import Binary, Resources, compile_cuda
from .render import CudaUnit, KernelSource, render

MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = ((1 << 31) - 1, 65535, 65535)


def check_launch(name: str, kernel: KernelSource, hw: HardwareParams) -> None:
    """ResourceError naming the first launch limit of `hw` that `kernel` is over: threads
    per block, grid size, static shared memory (known before compiling)."""
    where = f"{name}: kernel {kernel.name}"
    if kernel.threads > hw.max_threads or any(b > m for b, m in zip(kernel.block, MAX_BLOCK_DIMS)):
        raise ResourceError(f"{where} has blocks of {'x'.join(map(str, kernel.block))} = {kernel.threads} threads, "
                            f"over the {hw.max_threads} a {hw.isa} block may have")
    if any(g > m for g, m in zip(kernel.grid, MAX_GRID_DIMS)):
        raise ResourceError(f"{where} has a grid of {'x'.join(map(str, kernel.grid))} blocks, over the "
                            f"{'x'.join(map(str, MAX_GRID_DIMS))} a launch may have")
    _check_shared(where, kernel.shared_bytes, hw)


def _check_shared(where: str, used: int, hw: HardwareParams) -> None:
    if used > hw.max_shared_kb * 1024:
        raise ResourceError(f"{where} uses {used} bytes of shared memory per block, over the "
                            f"{hw.max_shared_kb * 1024} a {hw.isa} block may use")


def check_resources(name: str, kernel: KernelSource, res: Resources, hw: HardwareParams) -> None:
    """ResourceError if what ptxas reports `kernel` uses is over `hw`'s per-block limits."""
    where = f"{name}: kernel {kernel.name}"
    _check_shared(where, res.shared_bytes, hw)
    if res.registers > hw.max_thread_regs or res.registers * kernel.threads > hw.max_regs:
        raise ResourceError(f"{where} uses {res.registers} registers per thread x {kernel.threads} threads, over "
                            f"the {hw.max_regs} registers of a {hw.isa} block ({hw.max_thread_regs} per thread)")


class CudaKernel:
    """`func` compiled for GPU `hw` (CompiledKernel of runtime.backend)."""

    def __init__(self, func: PrimFunc, hw: HardwareParams):
        self.func, self.hw = func, hw
        self.num_threads: int | None = None  # the CPU backends' knob; a launch sets its own threads
        self.unit: CudaUnit = render(func)
        for k in self.unit.kernels:
            check_launch(func.name, k, hw)
        self.binary: Binary = compile_cuda(self.unit.source, hw.isa, func.name)
        self.resources: list[Resources] = [self.binary.resources[k.name] for k in self.unit.kernels]
        for k, r in zip(self.unit.kernels, self.resources):
            check_resources(func.name, k, r, hw)
        self._outputs = stored_buffers(func)
        self._launcher = Launcher(self.unit, self.binary.cubin, list(func.args), self._outputs)

    @property
    def source(self) -> str:
        """The CUDA C of every kernel, as NVRTC compiled it."""
        return self.unit.source

    @property
    def ptx(self) -> str:
        return self.binary.ptx

    @property
    def cubin(self) -> bytes:
        return self.binary.cubin

    def describe(self) -> str:
        """One line per kernel: launch shape and what it uses."""
        return "\n".join(f"{k.name}: grid {'x'.join(map(str, k.grid))}, block {'x'.join(map(str, k.block))}, "
                         f"{r.registers} registers, {r.shared_bytes} bytes shared memory"
                         + (f", {r.spill_bytes} bytes spilled" if r.spill_bytes else "")
                         for k, r in zip(self.unit.kernels, self.resources))

    def _check(self, arrays: tuple) -> None:
        """Numpy arrays are checked as every backend checks them; GPU arrays by their
        `__cuda_array_interface__` (dtype, shape, contiguity)."""
        gpu_arrays = [k for k, a in enumerate(arrays) if not isinstance(a, np.ndarray)]
        if not gpu_arrays or len(arrays) != len(self.func.args):
            return check_arguments(self.func, arrays, self._outputs)
        for k in gpu_arrays:
            b = self.func.args[k]
            where = f"{self.func.name}: argument {k} ({b.name})"
            if device_pointer(arrays[k], b.shape, b.dtype, where) is None:
                raise ArgumentError(f"{where}: expected a numpy array or a GPU array (a torch CUDA tensor), "
                                    f"got {type(arrays[k]).__name__}")
        host = [np.empty(b.shape, b.dtype) if k in gpu_arrays else a
                for k, (a, b) in enumerate(zip(arrays, self.func.args))]
        check_arguments(self.func, tuple(host), self._outputs)

    def __call__(self, *arrays) -> None:
        """Run on numpy arrays or GPU arrays (outputs written in place)."""
        self._check(arrays)
        with _needs_gpu(self.func.name):
            self._launcher.run(arrays)

    def benchmark(self, *arrays, warmup: int = 2, repeat: int = 10, min_time: float = 1e-3) -> Timing:
        self._check(arrays)
        with _needs_gpu(self.func.name):
            return self._launcher.time(arrays, warmup, repeat, min_time)


@contextmanager
def _needs_gpu(name: str):
    """NoDeviceError that says what runs a GPU program where there is no GPU."""
    try:
        yield
    except NoDeviceError as e:
        raise NoDeviceError(f"{name}: running a GPU program needs a GPU and {e}; the interpreter runs it "
                            f"without one (tlmir.build(..., backend='interp'))") from None
