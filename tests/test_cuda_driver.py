"""The launch path of the CUDA backend against a stand-in for the driver API (there is no
GPU here): arguments reach each kernel in its parameter order, results come back, GPU
arrays (`__cuda_array_interface__`) are used in place, timing reads CUDA events, and a
faulting kernel costs that call only: the context is rebuilt and the module loaded again."""
import ctypes
import types

import numpy as np
import pytest

import tlmir
from tlmir.errors import ArgumentError, DeviceError
from tlmir.runtime import gpu
from tlmir.runtime.target import host_gpu, parse_target

from gpuutil import gpu_matmul

ILLEGAL_ADDRESS = 700


class FakeDriver:
    """The subset of cuda.bindings.driver the backend calls, on host memory."""

    def __init__(self):
        self.CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)
        names = ["COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR", "MULTIPROCESSOR_COUNT", "L2_CACHE_SIZE",
                 "MAX_THREADS_PER_BLOCK", "MAX_SHARED_MEMORY_PER_BLOCK", "MAX_REGISTERS_PER_BLOCK", "WARP_SIZE"]
        self.CUdevice_attribute = types.SimpleNamespace(**{f"CU_DEVICE_ATTRIBUTE_{n}": n for n in names})
        self.attributes = dict(zip(names, [8, 9, 128, 72 << 20, 1024, 48 << 10, 65536, 32]))
        self.memory, self.launches, self.loads, self.contexts, self.fault = {}, [], 0, 0, False

    def cuGetErrorString(self, err):
        return 0, b"an illegal memory access was encountered"

    def cuDeviceGet(self, n):
        return 0, n

    def cuDeviceGetAttribute(self, attr, dev):
        return 0, self.attributes[attr]

    def cuDevicePrimaryCtxRetain(self, dev):
        self.contexts += 1
        return 0, object()

    def cuCtxSetCurrent(self, ctx):
        return (0,)

    def cuDevicePrimaryCtxRelease(self, dev):
        return (0,)

    def cuDevicePrimaryCtxReset(self, dev):
        return (0,)

    def cuModuleLoadData(self, image):
        self.loads += 1
        return 0, "module"

    def cuModuleGetFunction(self, module, name):
        return 0, name.decode()

    def cuMemAlloc(self, n):
        buf = np.zeros(n, np.uint8)
        self.memory[buf.ctypes.data] = buf
        return 0, buf.ctypes.data

    def cuMemFree(self, p):
        self.memory.pop(int(p), None)
        return (0,)

    def cuMemcpyHtoD(self, dst, src, n):
        ctypes.memmove(int(dst), int(src), n)
        return (0,)

    def cuMemcpyDtoH(self, dst, src, n):
        ctypes.memmove(int(dst), int(src), n)
        return (0,)

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        n = self.params[fn]
        addrs = np.frombuffer((ctypes.c_uint64 * n).from_address(params), np.uint64)
        ptrs = [ctypes.c_uint64.from_address(int(a)).value for a in addrs]
        self.launches.append((fn, (gx, gy, gz), (bx, by, bz), ptrs))
        out = ptrs[-1]  # the kernels here write their last parameter: fill it with 7s
        sevens = np.full(self.out_elems, 7.0, np.float32)
        ctypes.memmove(out, sevens.ctypes.data, sevens.nbytes)
        return (0,)

    def cuCtxSynchronize(self):
        return (ILLEGAL_ADDRESS if self.fault else 0,)

    def cuEventCreate(self, flags):
        return 0, object()

    def cuEventRecord(self, ev, stream):
        return (0,)

    def cuEventElapsedTime(self, a, b):
        return 0, 2.0

    def cuEventDestroy(self, ev):
        return (0,)


@pytest.fixture
def fake(monkeypatch):
    drv = FakeDriver()
    monkeypatch.setattr(gpu, "driver", lambda: drv)
    monkeypatch.setattr(gpu, "_CONTEXT", [])
    host_gpu.cache_clear()
    yield drv
    host_gpu.cache_clear()


def _kernel(fake):
    s, args = gpu_matmul()
    f = tlmir.build(s, args, target="cuda:sm_90")
    fake.params = {k.name: len(k.params) for k in f.unit.kernels}
    fake.out_elems = 16 * 16
    return f


def test_arguments_reach_the_kernel_and_results_come_back(fake):
    f = _kernel(fake)
    a, b, c = np.ones((16, 8), "float32"), np.ones((8, 16), "float32"), np.zeros((16, 16), "float32")
    f(a, b, c)
    ((name, grid, block, ptrs),) = fake.launches
    assert (name, grid, block) == ("main_kernel0", (4, 1, 1), (16, 1, 1)) and len(set(ptrs)) == 3
    assert (c == 7.0).all() and fake.memory == {}  # copied back, device buffers freed
    t = f.benchmark(a, b, c, warmup=1, repeat=3, min_time=0.0)
    assert t.median == pytest.approx(2e-3) and len(t.times) == 3


def test_gpu_arrays_are_used_in_place_and_checked(fake):
    f = _kernel(fake)

    class DeviceArray:
        def __init__(self, shape, typestr="<f4"):
            self.buf = fake.cuMemAlloc(4 * int(np.prod(shape)))[1]
            self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (self.buf, False),
                                             "strides": None, "version": 3}

    a, b, c = DeviceArray((16, 8)), DeviceArray((8, 16)), DeviceArray((16, 16))
    f(a, b, c)
    assert fake.launches[-1][3] == [a.buf, b.buf, c.buf]
    assert (np.frombuffer(fake.memory[c.buf], np.float32) == 7.0).all()
    with pytest.raises(ArgumentError, match=r"argument 2 \(C\): expected shape \(16, 16\), got \(16, 8\)"):
        f(a, b, DeviceArray((16, 8)))
    with pytest.raises(ArgumentError, match="expected dtype float32, got float64"):
        f(a, b, DeviceArray((16, 16), "<f8"))


def test_a_faulting_kernel_costs_one_call_and_the_context_is_rebuilt(fake):
    f = _kernel(fake)
    a, b, c = np.ones((16, 8), "float32"), np.ones((8, 16), "float32"), np.zeros((16, 16), "float32")
    fake.fault = True
    with pytest.raises(DeviceError, match="running main: 700: an illegal memory access"):
        f(a, b, c)
    assert (fake.contexts, fake.loads) == (1, 1)
    fake.fault = False
    f(a, b, c)
    assert (fake.contexts, fake.loads) == (2, 2) and (c == 7.0).all()


def test_the_host_gpu_target_reads_the_device(fake):
    hw = parse_target("cuda")
    assert (hw.isa, hw.cores, hw.l2_kb, hw.max_threads, hw.max_shared_kb) == ("sm_89", 128, 72 * 1024, 1024, 48)
    assert hw.max_vthread == 8 and hw.key.startswith("cuda-sm_89-c128-")
