"""NVRTC through cuda-python (cuda.bindings.nvrtc): CUDA C to PTX and a cubin for one
architecture, and what each kernel uses.

The library comes from the nvidia-cuda-nvrtc wheel (no toolkit, no GPU needed). Compiling
asks ptxas to be verbose; its report of each kernel (registers, shared memory, spills) is
how the resource checks see a candidate before it is measured. A program NVRTC refuses
is a BuildError carrying the compiler's log.

ptxas is single-threaded and a search round's programs are independent, so a round is
compiled ahead in a pool of processes (`compile_many`); the binaries are handed to the
measuring worker (`remember`), whose `compile_cuda` then finds them instead of compiling.
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import re
from dataclasses import dataclass

from ..errors import BuildError

_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel."""
    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_bytes: int


@dataclass(frozen=True)
class Binary:
    """A compiled translation unit."""
    arch: str
    ptx: str
    cubin: bytes
    log: str
    resources: dict  # kernel name -> Resources
    seconds: float


_COMPILED: dict[tuple[str, str], "Binary"] = {}  # (sha1 of the source, arch) -> its binary
_COMPILED_LIMIT = 512  # binaries kept (a few rounds' worth); then the memo starts over


def _memo_key(source: str, arch: str) -> tuple[str, str]:
    return hashlib.sha1(source.encode()).hexdigest(), arch


def remember(binaries: dict) -> None:
    """Binaries compiled elsewhere (`compile_many`), keyed as `compile_cuda` looks them up."""
    if len(_COMPILED) + len(binaries) > _COMPILED_LIMIT:
        _COMPILED.clear()
    _COMPILED.update(binaries)


def _compile_or_none(source: str, arch: str) -> "Binary | None":
    try:
        return compile_cuda(source, arch)
    except BuildError:
        return None  # the trial compiles it again and reports the log


def compile_many(sources: list[str], arch: str, executor: concurrent.futures.Executor,
                 timeout: float | None = None) -> dict:
    """Compile `sources` for `arch` in `executor`'s processes: {memo key: Binary} of those
    that compiled within `timeout` seconds (the rest, and failures, are left to
    `compile_cuda` in the trial, where they count)."""
    todo = {_memo_key(s, arch): s for s in sources}
    futures = {executor.submit(_compile_or_none, s, arch): k for k, s in todo.items() if k not in _COMPILED}
    done, _ = concurrent.futures.wait(futures, timeout=timeout)
    return {futures[f]: f.result() for f in done if f.exception() is None and f.result() is not None}


@functools.cache
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise BuildError(f"NVRTC is not installed ({e}); pip install cuda-python nvidia-cuda-nvrtc-cu12") from None
    return nvrtc


def version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    nv = _nvrtc()
    try:
        err, major, minor = nv.nvrtcVersion()
    except RuntimeError as e:  # the bindings found no libnvrtc
        raise BuildError(f"NVRTC could not be loaded ({e}); pip install nvidia-cuda-nvrtc-cu12") from None
    return major, minor


def supported_archs() -> list[str]:
    """The architectures this NVRTC compiles for (`sm_50` ... `sm_120`)."""
    nv = _nvrtc()
    version()
    err, archs = nv.nvrtcGetSupportedArchs()
    return [f"sm_{a}" for a in archs]


def _check(result, what: str, prog=None) -> tuple:
    nv = _nvrtc()
    err, *values = result
    if err != nv.nvrtcResult.NVRTC_SUCCESS:
        log = _log(prog) if prog is not None else ""
        _, msg = nv.nvrtcGetErrorString(err)
        raise BuildError(f"{what}: {msg.decode() if isinstance(msg, bytes) else msg}"
                         + (f"\n{log}" if log else ""))
    return tuple(values)


def _log(prog) -> str:
    nv = _nvrtc()
    err, n = nv.nvrtcGetProgramLogSize(prog)
    buf = b" " * n
    nv.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00 ").decode(errors="replace")


def compile_cuda(source: str, arch: str, name: str = "tlmir") -> Binary:
    """Compile CUDA C `source` for `arch` (`sm_90`): PTX, cubin and each kernel's resources
    (compiled ahead by `compile_many` and `remember`ed: that binary)."""
    import time
    ahead = _COMPILED.get(_memo_key(source, arch))
    if ahead is not None:
        return ahead
    nv = _nvrtc()
    version()
    if arch not in supported_archs():
        raise BuildError(f"NVRTC {'.'.join(map(str, version()))} cannot compile for {arch}; "
                         f"it supports {', '.join(supported_archs())}")
    t0 = time.perf_counter()
    (prog,) = _check(nv.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
                     f"{name}: creating the NVRTC program")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"--ptxas-options=--verbose", b"--std=c++17"]
        err, = nv.nvrtcCompileProgram(prog, len(opts), opts)
        log = _log(prog)
        if err != nv.nvrtcResult.NVRTC_SUCCESS:
            raise BuildError(f"{name}: NVRTC could not compile the kernel for {arch}:\n{log}")
        (n,) = _check(nv.nvrtcGetPTXSize(prog), f"{name}: PTX size", prog)
        ptx = b" " * n
        _check(nv.nvrtcGetPTX(prog, ptx), f"{name}: PTX", prog)
        (n,) = _check(nv.nvrtcGetCUBINSize(prog), f"{name}: cubin size", prog)
        cubin = b" " * n
        _check(nv.nvrtcGetCUBIN(prog, cubin), f"{name}: cubin", prog)
    finally:
        nv.nvrtcDestroyProgram(prog)
    return Binary(arch, ptx.rstrip(b"\x00").decode(), bytes(cubin), log, parse_resources(log),
                  time.perf_counter() - t0)


def parse_resources(log: str) -> dict[str, Resources]:
    """Kernel name -> Resources, from ptxas's verbose report."""
    out: dict[str, Resources] = {}
    current, spill = None, (0, 0)
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current, spill = m.group(1), (0, 0)
            continue
        m = _SPILL.search(line)
        if m and current:
            spill = (int(m.group(1)), int(m.group(2)) + int(m.group(3)))
            continue
        m = _USED.search(line)
        if m and current:
            smem = _SMEM.search(line)
            out[current] = Resources(int(m.group(1)), int(smem.group(1)) if smem else 0, *spill)
            current = None
    return out
