"""Fast framework baselines (PyTorch, numpy) for every op, to time tlmir kernels against.

`baselines(op)` maps a framework name to a callable taking the op's inputs in `op.inputs`
order and returning its (single) output: `{"torch": fn, "onednn": fn, "numpy": fn}`. Each
op module declares its ops' callables beside their definitions (`base.baseline`,
registered by op family); this module only looks them up, converts inputs and times them.
A framework without a sensible fast path for an op is left out: numpy has no fast
convolution or pooling, so the conv / pool ops only have "torch". "onednn" is PyTorch's
own oneDNN linear, for dense and matmul, which "torch" runs through MKL's sgemm
(`ops/linalg.py`). An op whose family registered nothing gives `{}`.

The torch callables take torch tensors; `prepare(op, arrays, "torch")` makes them once with
`torch.from_numpy` (sharing memory with the arrays), so timing excludes the conversion.
Everything is float32 on both sides (the numpy baselines never upcast to float64 - the point
is speed), using each framework's idiomatic fast path: F.linear / conv2d / conv_transpose2d /
max_pool2d / avg_pool2d / softmax / layer_norm, torch.rms_norm, torch.matmul / bmm; numpy
matmul (BLAS sgemm) and vectorized float32 formulas.

Threads: `baseline_times(op, inputs, threads)` sets torch's intra-op thread count for the
measurement and restores it afterwards. numpy's BLAS thread count cannot be changed at run
time without threadpoolctl, so the numpy times use whatever OPENBLAS_NUM_THREADS (or
OMP_NUM_THREADS / MKL_NUM_THREADS) the process started with; numpy's element-wise code is
single-threaded regardless. Next to tlmir kernels, time them with `baselines_isolated`
(a child process of their own, torch's default OpenMP settings).
"""
from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
import time
from typing import Callable, Sequence

import numpy as np

from ..errors import TlmirError
from .base import BASELINES, FRAMEWORKS, OpDef


def baselines(op: OpDef) -> dict[str, Callable]:
    """{"torch": fn, "onednn": fn, "numpy": fn} for `op`, from the builders its family
    registered in `BASELINES` (frameworks without a fast path left out; {} for a family
    with none). Each fn takes the inputs in `op.inputs` order - as prepared by
    `prepare(op, arrays, framework)` - and returns the op's output (all ops have one)."""
    builders = BASELINES.get(op.family, {})
    out: dict[str, Callable] = {}
    for fw in FRAMEWORKS:
        fn = builders[fw](op.params) if fw in builders else None
        if fn is not None:
            out[fw] = fn
    return out


def prepare(op: OpDef, arrays: Sequence[np.ndarray], framework: str) -> list:
    """The inputs converted once for `framework`: contiguous arrays of each input's dtype
    (float32), wrapped with torch.from_numpy (no copy when already so) for "torch" and
    "onednn"."""
    if len(arrays) != len(op.inputs):
        raise ValueError(f"{op.family}: expected {len(op.inputs)} inputs, got {len(arrays)}")
    arrs = [np.ascontiguousarray(a, dtype=t.dtype) for a, t in zip(arrays, op.inputs)]
    if framework == "numpy":
        return arrs
    if framework in ("torch", "onednn"):
        import torch
        return [torch.from_numpy(a) for a in arrs]
    raise ValueError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")


def time_baseline(fn: Callable, args: Sequence, repeat: int = 10,
                  min_sample_s: float = 1e-3) -> float:
    """Median seconds per call of fn(*args): one warm-up call, then `repeat` samples of n
    back-to-back calls each, n chosen so a sample lasts about `min_sample_s` (1 ms)."""
    args = list(args)
    fn(*args)                                            # warm-up (allocations, dispatch)
    n = 1
    while True:                                          # calibrate the inner count
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        dt = time.perf_counter() - t0
        if dt >= min_sample_s:
            break
        n = n * 2 if dt <= 0 else max(n + 1, min(n * 10, int(n * min_sample_s * 1.2 / dt)))
    samples = []
    for _ in range(max(1, int(repeat))):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


def baseline_times(op: OpDef, inputs: Sequence[np.ndarray], threads: int,
                   repeat: int = 10) -> dict[str, float]:
    """Median seconds per call of each available baseline on `inputs` (numpy arrays in
    op.inputs order). torch runs with `threads` intra-op threads (the previous count is
    restored afterwards); numpy uses the BLAS thread count the process started with
    (OPENBLAS_NUM_THREADS etc.; it cannot be changed at run time without threadpoolctl)."""
    import torch

    fns = baselines(op)
    times: dict[str, float] = {}
    prev = torch.get_num_threads()
    try:
        torch.set_num_threads(max(1, int(threads)))
        with torch.inference_mode():
            for fw, fn in fns.items():
                times[fw] = time_baseline(fn, prepare(op, inputs, fw), repeat)
    finally:
        torch.set_num_threads(prev)
    return times


def _isolated_child(cases: list, threads: Sequence[int], repeat: int,
                    tries: int) -> list[dict[int, dict[str, float]]]:
    os.environ.pop("OMP_WAIT_POLICY", None)  # torch with its own defaults (before it loads)
    from . import make
    out = []
    for family, params in cases:
        op = make(family, **params)
        inputs = op.random_inputs(0)
        per = {}
        for t in threads:
            runs = [baseline_times(op, inputs, t, repeat) for _ in range(tries)]
            per[t] = {fw: [r[fw] for r in runs] for fw in runs[0]}
        out.append(per)
    return out


def baselines_isolated(ops: Sequence[OpDef], threads: Sequence[int], repeat: int = 10,
                       tries: int = 3, processes: int = 2, spread: bool = False) -> list[dict]:
    """baseline_times of each op on `op.random_inputs(0)` (the arrays `Task.random_inputs(0)`
    gives its task) at each thread count, timed in fresh Python processes with torch's
    default OpenMP settings: [{threads: {framework: seconds}}], in `ops` order; with
    `spread`, {framework: (fastest, median, slowest)} of the tries x processes medians instead.

    Each time is the fastest of `tries` medians in each of `processes` processes: on this
    shared machine torch's 2-thread time of a 15-us op was now and then 7.5 ms for a whole
    measurement, a whole fresh process sometimes ran its 2-thread conv at half speed, and
    a stall is not PyTorch's speed. The child draws the arrays itself: on arrays sent to
    it by pickle torch's conv ran 30% (1 thread) to 45% (2 threads) slower; and it is a
    plain interpreter, as in a multiprocessing child the 2-thread conv ran 25% slower.

    Why not in the caller's process: there the two OpenMP runtimes (torch's and the one
    tlmir's kernels use) compete for the cores, threads of one spinning after its parallel
    region slowing the other; and OMP_WAIT_POLICY=PASSIVE, which stops that, puts
    torch's threads to sleep between parallel regions: its 2-thread batch_matmul
    12x128x128x64 then ran no faster than 1 thread (151 against 323 GFLOP/s)."""
    jobs = [(op.family, dict(op.params)) for op in ops]
    if not jobs:
        return []
    code = ("import pickle, sys; from tlmir.ops.baselines import _isolated_child; "
            "sys.stdout.buffer.write(pickle.dumps(_isolated_child(*pickle.load(sys.stdin.buffer))))")
    payload = pickle.dumps((jobs, list(threads), repeat, tries))
    runs = []
    for _ in range(max(1, processes)):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, input=payload)
        if done.returncode != 0:
            raise TlmirError(f"timing the baselines in a child process failed: "
                             f"{done.stderr.decode(errors='replace')[-800:]}")
        runs.append(pickle.loads(done.stdout))
    def summary(medians: list[float]):
        return (min(medians), statistics.median(medians), max(medians)) if spread else min(medians)
    return [{t: {fw: summary([m for r in runs for m in r[c][t][fw]]) for fw in runs[0][c][t]}
             for t in runs[0][c]} for c in range(len(jobs))]


def baseline_times_isolated(op: OpDef, threads: Sequence[int], repeat: int = 10, tries: int = 3,
                            processes: int = 2) -> dict[int, dict[str, float]]:
    """baselines_isolated for one op: {threads: {framework: seconds}}."""
    return baselines_isolated([op], threads, repeat, tries, processes)[0]


__all__ = ["FRAMEWORKS", "baselines", "prepare", "time_baseline", "baseline_times",
           "baselines_isolated", "baseline_times_isolated"]
