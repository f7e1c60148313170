"""The CUDA driver as a library (cuda.bindings.driver): loading it, its status codes as
tlmir errors, the attributes of device 0 and its primary context.

Here, below the backends, because a target string (`cuda`: this host's GPU) reads the
device's attributes; the CUDA backend (codegen_cuda.driver) launches through the same
context. Where there is no driver or no device every entry point raises NoDeviceError,
which says so (its callers add what to do instead), not a traceback from the bindings.
"""
from __future__ import annotations

import functools
from typing import Any

from ..errors import DeviceError, NoDeviceError

@functools.cache
def driver():
    """`cuda.bindings.driver`, initialised; NoDeviceError without a driver or a device."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:
        raise NoDeviceError(f"the CUDA driver bindings are not installed ({e}); "
                            f"pip install cuda-python") from None
    try:
        (err,) = cu.cuInit(0)
    except RuntimeError as e:  # the bindings could not dlopen libcuda.so.1
        raise NoDeviceError(f"there is none here (no CUDA driver: {e})") from None
    if err != cu.CUresult.CUDA_SUCCESS:
        raise NoDeviceError(f"there is none here (the CUDA driver says {_name(cu, err)})")
    return cu


def _name(cu, err) -> str:
    e, text = cu.cuGetErrorString(err)
    return f"{getattr(err, 'name', err)}: {text.decode() if isinstance(text, bytes) else text}"


def check(result: tuple, what: str) -> Any:
    """The values of a driver call's (status, *values) result; DeviceError naming `what`
    and the driver's message when the status is not success."""
    cu = driver()
    err, *values = result
    if err != cu.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"{what}: {_name(cu, err)}")
    return values[0] if len(values) == 1 else tuple(values) if values else None


def device_attributes() -> dict[str, int]:
    """Compute capability, SMs, L2 and per-block launch limits of device 0."""
    cu = driver()
    dev = check(cu.cuDeviceGet(0), "cuDeviceGet(0)")
    A = cu.CUdevice_attribute
    names = {"major": A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
             "minor": A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
             "sms": A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
             "l2_bytes": A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
             "max_threads": A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
             "max_shared_bytes": A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
             "max_regs": A.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
             "warp_size": A.CU_DEVICE_ATTRIBUTE_WARP_SIZE}
    return {k: int(check(cu.cuDeviceGetAttribute(a, dev), f"device attribute {k}")) for k, a in names.items()}


_CONTEXT: list = []  # the retained primary context of device 0, while held


def context():
    """The primary context of device 0, current on this thread."""
    cu = driver()
    if not _CONTEXT:
        dev = check(cu.cuDeviceGet(0), "cuDeviceGet(0)")
        _CONTEXT.append((dev, check(cu.cuDevicePrimaryCtxRetain(dev), "retaining the primary context")))
    check(cu.cuCtxSetCurrent(_CONTEXT[0][1]), "making the context current")
    return _CONTEXT[0][1]


def reset_context() -> None:
    """Drop the context (after a kernel fault, which poisons it); the next `context()`
    builds a fresh one."""
    if _CONTEXT:
        cu = driver()
        dev, _ = _CONTEXT.pop()
        cu.cuDevicePrimaryCtxRelease(dev)
        cu.cuDevicePrimaryCtxReset(dev)
