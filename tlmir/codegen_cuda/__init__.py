"""CUDA backend: loop IR -> CUDA C -> NVRTC (PTX, cubin) -> driver API launch.

Importing the package registers it as backend "cuda" (runtime.backend) for hardware of
kind "cuda", which is how `tlmir.build(..., target="cuda:sm_90")`, measurement and the
command line reach it. Rendering and compiling need no GPU; running does."""
from __future__ import annotations

import concurrent.futures

from ..errors import TlmirError
from ..ir.stmt import PrimFunc
from ..runtime.backend import register_backend
from ..runtime.target import HardwareParams, host_gpu
from .nvrtc import compile_many, remember
from .program import CudaKernel
from .render import render

__all__ = ["CudaBackend", "CudaKernel"]


class CudaBackend:
    """CUDA C compiled by NVRTC for the target's architecture."""
    name = "cuda"

    def compile(self, func: PrimFunc, hw: HardwareParams | None) -> CudaKernel:
        """`hw` None: this host's GPU (NoDeviceError without one)."""
        return CudaKernel(func, hw if hw is not None else host_gpu())

    def supports(self, hw: HardwareParams) -> bool:
        return hw.kind == "cuda"

    def compile_ahead(self, funcs: list[PrimFunc], hw: HardwareParams, executor: concurrent.futures.Executor,
                      timeout: float | None = None) -> dict:
        """A search round's programs compiled in `executor`'s processes (ptxas is
        single-threaded): the binaries, for `remember` in the process that runs them."""
        sources = []
        for f in funcs:
            try:
                sources.append(render(f).source)
            except TlmirError:
                pass  # its trial renders it again and fails there
        return compile_many(sources, hw.isa, executor, timeout=timeout)

    def remember(self, binaries: dict) -> None:
        """Binaries `compile_ahead` made: compiling their sources here now returns them."""
        remember(binaries)


register_backend(CudaBackend())
