"""Measure candidates of a task in an isolated worker, with the task's arrays sent once.

The parent lowers (pure Python, cannot crash); the worker compiles, runs, verifies
against the reference and times. A crash or hang costs that candidate only: the worker
is restarted and the task's arrays are sent again. A GPU target is measured the same way:
the worker holds the CUDA context, a kernel that faults is a failed trial and the worker
rebuilds the context (codegen_cuda.driver), and one that takes the process down is a crash.
ptxas is single-threaded and takes 0.2 s to seconds a GPU program, and LLVM 0.2-0.8 s a CPU
one (most of a small kernel's trial), so `prepare` compiles a round's programs in a pool of
processes first and hands the binaries (cubins, objects) to the worker.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from ..build import reference_outputs
from ..errors import MeasureError, NoDeviceError
from ..ir.stmt import PrimFunc
from ..runtime import gpu
from ..runtime.backend import backend_for
from ..runtime.measure import MeasureResult, measure_in_process
from ..runtime.target import HardwareParams
from ..runtime.task import Task
from ..runtime.worker import Worker, WorkerPool

_TASK_ARRAYS: dict = {}  # worker side: task key -> (inputs, expected outputs)
# what a worker imports before its first job, per target kind (its start-up, not a trial's)
PRELOAD = {"cpu": ("numpy", "llvmlite", "tlmir.codegen_cpu"), "cuda": ("numpy", "tlmir.codegen_cuda")}
# the smallest round compiled ahead, per target kind: starting the pool's interpreters
# (~1 s) costs more than compiling a few CPU programs in their trials saves
AHEAD_MIN = {"cpu": 16, "cuda": 2}


def _load(key: str, inputs: list, expected: list) -> bool:
    _TASK_ARRAYS.clear()  # one task's arrays at a time keeps the worker small
    _TASK_ARRAYS[key] = (inputs, expected)
    return True


def _remember(hw: HardwareParams, binaries: dict) -> int:
    backend_for(hw).remember(binaries)
    return len(binaries)


def _measure(key: str, func: PrimFunc, repeat: int, num_threads: int | None, cutoff: float | None,
             hw: HardwareParams | None = None):
    if key not in _TASK_ARRAYS:
        return None
    inputs, expected = _TASK_ARRAYS[key]
    scale = max((float(np.abs(e).max()) for e in expected if e.size), default=1.0)
    return measure_in_process(func, inputs, expected, rtol=1e-3, atol=1e-4 * (1.0 + scale),
                              repeat=repeat, num_threads=num_threads, cutoff=cutoff, hw=hw)


class Measurer:
    """Builds, verifies and times candidate programs out of process."""

    def __init__(self, timeout: float = 30.0, repeat: int = 5, num_threads: int | None = None,
                 hw: HardwareParams | None = None, compile_workers: int | None = None,
                 ahead_min: int | None = None):
        """`hw`: the target the programs are compiled for (default: this host). A GPU target
        needs a GPU here: NoDeviceError says so before any worker starts. `compile_workers`:
        processes that compile a round of programs ahead (default: one per core), if the
        round holds at least `ahead_min` (default: AHEAD_MIN of the target's kind)."""
        self.timeout, self.repeat, self.num_threads, self.hw = timeout, repeat, num_threads, hw
        self.compile_workers = compile_workers if compile_workers is not None else (os.cpu_count() or 1)
        self._compile_pool: WorkerPool | None = None
        kind = hw.kind if hw is not None else "cpu"
        self.ahead_min = ahead_min if ahead_min is not None else AHEAD_MIN.get(kind, 2)
        if kind == "cuda":
            try:
                gpu.driver()
            except NoDeviceError as e:
                raise NoDeviceError(f"measuring programs for {hw.isa} needs a GPU and {e}; `tlmir tune --dry-run` "
                                    f"compiles and checks the space without one") from None
        self.worker = Worker(preload=PRELOAD[kind])
        self._loaded: str | None = None
        self._arrays: dict = {}

    def arrays(self, task: Task) -> tuple[list, list]:
        if task.key not in self._arrays:
            inputs = task.random_inputs(seed=0)
            self._arrays = {task.key: (inputs, reference_outputs(task, inputs))}
        return self._arrays[task.key]

    def prepare(self, funcs: list[PrimFunc]) -> int:
        """Compile a round's programs ahead, `compile_workers` at a time, and give the worker
        their binaries; how many it got. Nothing is timed meanwhile: the worker waits."""
        backend = backend_for(self.hw)
        if self.compile_workers < 2 or len(funcs) < max(2, self.ahead_min) or not hasattr(backend, "compile_ahead"):
            return 0
        if self._compile_pool is None:
            self._compile_pool = WorkerPool(self.compile_workers, PRELOAD.get(backend.name, ()), timeout=self.timeout)
        # a round's worth of trial timeouts: no compile may still run when the timing starts
        per_worker = -(-len(funcs) // self.compile_workers)
        try:
            binaries = backend.compile_ahead(funcs, self.hw, self._compile_pool, timeout=self.timeout * per_worker)
        except (MeasureError, OSError) as e:
            sys.stderr.write(f"[measure] compiling ahead failed ({type(e).__name__}: {e}); "
                             f"each trial compiles its program from now on\n")
            self._compile_pool.shutdown(wait=False, cancel_futures=True)
            self._compile_pool, self.compile_workers = None, 1
            return 0
        if not binaries:
            return 0
        res = self.worker.run(_remember, self.hw, binaries, timeout=self.timeout)
        return res.value if res.ok else 0

    def measure(self, task: Task, func: PrimFunc, cutoff: float | None = None) -> MeasureResult:
        """`cutoff`: seconds beyond which one run suffices (e.g. a multiple of the best so far)."""
        for _ in range(2):
            if self._loaded != task.key:
                res = self.worker.run(_load, task.key, *self.arrays(task), timeout=self.timeout)
                if not res.ok:
                    return MeasureResult(False, error=f"loading task arrays: {res.error}", kind=res.kind)
                self._loaded = task.key
            res = self.worker.run(_measure, task.key, func, self.repeat, self.num_threads, cutoff, self.hw,
                                  timeout=self.timeout)
            if res.ok and res.value is not None:
                return res.value
            if not res.ok:
                if res.kind in ("crash", "timeout"):
                    self._loaded = None  # the worker restarted without the arrays
                return MeasureResult(False, error=res.error, kind=res.kind)
            self._loaded = None
        return MeasureResult(False, error="worker lost the task arrays twice", kind="error")

    def close(self) -> None:
        self.worker.close()
        if self._compile_pool is not None:  # idle between rounds: its processes exit at once
            self._compile_pool.shutdown(wait=True, cancel_futures=True)
            self._compile_pool = None
