"""`tlmir.build`: schedule -> loop program -> kernel for a target, by a backend."""
from __future__ import annotations

import numpy as np

from .runtime.backend import compile_func
from .runtime.inplace import InPlaceKernel, merge_inplace
from .runtime.target import parse_target
from .runtime.task import Task
from .schedule import Schedule, create_schedule, lower


def build(sch: Schedule, args, target: str = "cpu", name: str = "main", backend: str | None = None,
          inplace: dict[int, int] | None = None):
    """Lower `sch` and compile it for `target` ("cpu": this host; "cpu:avx2": this host
    held to AVX2, 256-bit vectors; see runtime.target.parse_target) with `backend` (None:
    the target's default, "cpu"; "interp": the reference interpreter; see
    runtime.backend); returns a kernel callable on numpy arrays.

    A written array may share memory with no other argument, unless `inplace` declares it:
    {k: j} builds output `args[k]` to overwrite input `args[j]` (an element-wise output of
    the same shape and dtype), and the kernel is then called with the same array for both."""
    hw = parse_target(target)
    func = lower(sch, args, name)
    if inplace:
        return InPlaceKernel(compile_func(merge_inplace(func, inplace), hw, backend), func, inplace)
    return compile_func(func, hw, backend)


def reference_outputs(task: Task, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The outputs a program of `task` must produce on `inputs`: its numpy reference's, in the
    outputs' dtypes, or without one its untuned default schedule's (built here, not by the
    task: a task is data, below schedules and backends)."""
    if task.reference is not None:
        return [np.asarray(o).astype(t.dtype) for o, t in zip(task.reference(*inputs), task.outputs)]
    outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
    build(create_schedule(task.outputs), task.args)(*inputs, *outs)
    return outs
