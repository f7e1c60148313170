"""CUDA backend: loop IR -> CUDA C -> NVRTC (PTX, cubin) -> driver API launch.

Importing the package registers it as backend "cuda" (runtime.backend) for hardware of
kind "cuda", which is how `tlmir.build(..., target="cuda:sm_90")`, measurement and the
command line reach it. Rendering and compiling need no GPU; running does."""
from __future__ import annotations

from ..ir.stmt import PrimFunc
from ..runtime.backend import register_backend
from ..runtime.target import HardwareParams, host_gpu
from .program import CudaKernel

__all__ = ["CudaBackend", "CudaKernel"]


class CudaBackend:
    """CUDA C compiled by NVRTC for the target's architecture."""
    name = "cuda"

    def compile(self, func: PrimFunc, hw: HardwareParams | None) -> CudaKernel:
        """`hw` None: this host's GPU (NoDeviceError without one)."""
        return CudaKernel(func, hw if hw is not None else host_gpu())

    def supports(self, hw: HardwareParams) -> bool:
        return hw.kind == "cuda"


register_backend(CudaBackend())
