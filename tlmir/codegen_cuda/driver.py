"""Launching and timing a compiled GPU program through the CUDA driver API
(cuda.bindings.driver, runtime.gpu's context).

Arguments are numpy arrays (copied to device buffers and the written ones back) or
arrays already on the GPU that expose `__cuda_array_interface__` (torch CUDA tensors,
CuPy, Numba), used in place. Timing is CUDA events around back-to-back launches of the
kernels, after the inputs are on the device. A launch the driver refuses, or a kernel
that faults, is a DeviceError; a fault poisons the context, so it is rebuilt (the next
call loads the module again) and the caller loses that one call. Where there is no GPU
every entry point raises NoDeviceError.
"""
from __future__ import annotations

import math
import statistics

import numpy as np

from ..errors import ArgumentError, DeviceError
from ..runtime import gpu
from ..runtime.backend import Timing
from .render import CudaUnit


class _Loaded:
    """The unit's cubin loaded into the current context: one function per kernel."""

    def __init__(self, cubin: bytes, names: list[str]):
        cu = gpu.driver()
        self.context = gpu.context()
        self.image = np.frombuffer(cubin, dtype=np.uint8).copy()
        self.module = gpu.check(cu.cuModuleLoadData(self.image.ctypes.data), "loading the kernels (cubin)")
        self.functions = [gpu.check(cu.cuModuleGetFunction(self.module, n.encode()), f"kernel {n}") for n in names]


def device_pointer(a, shape: tuple, dtype: str, where: str) -> int | None:
    """The device address of a GPU array (`__cuda_array_interface__`), None for anything
    else; ArgumentError if its dtype, shape or layout do not fit."""
    iface = getattr(a, "__cuda_array_interface__", None)
    if iface is None:
        return None
    if np.dtype(iface["typestr"]) != np.dtype(dtype):
        raise ArgumentError(f"{where}: expected dtype {dtype}, got {np.dtype(iface['typestr'])}")
    if tuple(iface["shape"]) != tuple(shape):
        raise ArgumentError(f"{where}: expected shape {tuple(shape)}, got {tuple(iface['shape'])}")
    strides = iface.get("strides")
    itemsize = np.dtype(dtype).itemsize
    dense = [itemsize * math.prod(shape[d + 1:]) for d in range(len(shape))]
    if strides is not None and [s for s, n in zip(strides, shape) if n > 1] != \
            [s for s, n in zip(dense, shape) if n > 1]:
        raise ArgumentError(f"{where}: the GPU array is not contiguous (call .contiguous())")
    return int(iface["data"][0])


class Launcher:
    """Runs the kernels of a compiled unit, in order, on the GPU."""

    def __init__(self, unit: CudaUnit, cubin: bytes, args: list, written: set):
        self.unit, self.cubin, self.args, self.written = unit, cubin, args, written
        self._loaded: _Loaded | None = None

    def _functions(self) -> list:
        if self._loaded is None or self._loaded.context is not gpu.context():
            self._loaded = _Loaded(self.cubin, [k.name for k in self.unit.kernels])
        return self._loaded.functions

    def _launch_all(self, functions: list, ptrs: dict[int, int]) -> None:
        cu = gpu.driver()
        for k, fn in zip(self.unit.kernels, functions):
            vals = np.array([ptrs[id(b)] for b in k.params], dtype=np.uint64)
            params = np.array([vals.ctypes.data + 8 * i for i in range(len(vals))], dtype=np.uint64)
            gpu.check(cu.cuLaunchKernel(fn, *k.grid, *k.block, 0, 0, params.ctypes.data, 0),
                      f"launching {k.name} (grid {k.grid}, block {k.block})")

    def _sync(self, what: str) -> None:
        cu = gpu.driver()
        try:
            gpu.check(cu.cuCtxSynchronize(), what)
        except DeviceError:
            gpu.reset_context()  # a fault poisons the context; the next call builds a fresh one
            self._loaded = None
            raise

    def _device_buffers(self, arrays: tuple) -> tuple[dict[int, int], list, list]:
        """(buffer id -> device address, (host array, buffer, device address) to copy back,
        device allocations to free)."""
        cu = gpu.driver()
        ptrs, back, owned = {}, [], []
        for a, b in zip(arrays, self.args):
            p = device_pointer(a, b.shape, b.dtype, f"{self.unit.name}: argument {b.name}")
            if p is None:
                host = np.ascontiguousarray(a)
                p = gpu.check(cu.cuMemAlloc(max(host.nbytes, 1)), f"allocating {b.name} on the GPU")
                owned.append(p)
                gpu.check(cu.cuMemcpyHtoD(p, host.ctypes.data, host.nbytes), f"copying {b.name} to the GPU")
                if id(b) in self.written:
                    back.append((a, p))
            ptrs[id(b)] = int(p)
        for b in self.unit.workspace:
            p = gpu.check(cu.cuMemAlloc(max(b.size * np.dtype(b.dtype).itemsize, 1)), f"allocating {b.name}")
            owned.append(p)
            ptrs[id(b)] = int(p)
        return ptrs, back, owned

    def _finish(self, back: list, owned: list) -> None:
        cu = gpu.driver()
        for a, p in back:
            gpu.check(cu.cuMemcpyDtoH(a.ctypes.data, p, a.nbytes), "copying a result from the GPU")
        for p in owned:
            cu.cuMemFree(p)

    def run(self, arrays: tuple) -> None:
        functions = self._functions()
        ptrs, back, owned = self._device_buffers(arrays)
        try:
            self._launch_all(functions, ptrs)
            self._sync(f"running {self.unit.name}")
        finally:
            if self._loaded is not None:
                self._finish(back, owned)

    def time(self, arrays: tuple, warmup: int, repeat: int, min_time: float) -> Timing:
        """Per-call seconds (CUDA events), one sample per repeat of enough calls to last
        `min_time`; the data stays on the device between calls."""
        cu = gpu.driver()
        functions = self._functions()
        ptrs, back, owned = self._device_buffers(arrays)
        start = gpu.check(cu.cuEventCreate(0), "creating an event")
        end = gpu.check(cu.cuEventCreate(0), "creating an event")
        try:
            def sample(number: int) -> float:
                gpu.check(cu.cuEventRecord(start, 0), "recording an event")
                for _ in range(number):
                    self._launch_all(functions, ptrs)
                gpu.check(cu.cuEventRecord(end, 0), "recording an event")
                self._sync(f"timing {self.unit.name}")
                return gpu.check(cu.cuEventElapsedTime(start, end), "reading the events") / 1e3 / number
            for _ in range(max(warmup, 1)):
                once = sample(1)
            number = max(1, math.ceil(min_time / max(once, 1e-9)))
            times = [sample(number) for _ in range(max(1, repeat))]
        finally:
            if self._loaded is not None:
                cu.cuEventDestroy(start)
                cu.cuEventDestroy(end)
                self._finish(back, owned)
        return Timing(median=statistics.median(times), min=min(times), times=tuple(times))
