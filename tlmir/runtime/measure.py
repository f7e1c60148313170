"""Build, run, verify and time one candidate program.

A wrong result is a failed measurement, never a time. `measure` runs the candidate in
an isolated worker process, so a crash or hang in generated code costs one trial.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..ir.stmt import PrimFunc
from .backend import compile_func
from .target import HardwareParams
from .worker import run_isolated


@dataclass
class MeasureResult:
    ok: bool
    median: float = float("inf")          # seconds per call
    min: float = float("inf")
    times: list = field(default_factory=list)
    error: str | None = None
    kind: str = "ok"                      # ok | wrong | error | crash | timeout


def check_outputs(got: list[np.ndarray], expected: list[np.ndarray], rtol: float, atol: float) -> str | None:
    """None if every output matches its reference, else a message naming the first mismatch."""
    for n, (g, e) in enumerate(zip(got, expected)):
        if not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=False):
            bad = ~np.isclose(g, e, rtol=rtol, atol=atol)
            err = float(np.nanmax(np.abs(g.astype("float64") - e))) if np.isfinite(g).all() else float("nan")
            return (f"output {n} differs from the reference at {int(bad.sum())} of {g.size} elements "
                    f"(max abs error {err:.3g})")
    return None


# A parallel kernel timed while another process holds a core can wait at a barrier until
# the scheduler's next tick (4 ms), however fast it is; a single warm run over the cutoff
# is therefore run again (up to this many times, keeping the fastest) while it is short
# enough for the wait to be a tick rather than the program.
RETIMES_OVER_CUTOFF = 2
RETIME_BELOW = 0.1  # seconds


def measure_in_process(func: PrimFunc, inputs: list[np.ndarray], expected: list[np.ndarray],
                       rtol: float = 1e-4, atol: float = 1e-4, repeat: int = 10,
                       num_threads: int | None = None, cutoff: float | None = None,
                       hw: HardwareParams | None = None) -> MeasureResult:
    """Compile, run once and verify, then time. Runs in the calling process.

    A candidate whose warm run is slower than `cutoff` seconds is timed by that run alone:
    it cannot be the best, and repeating it would only cost time (a short one is run again,
    see RETIMES_OVER_CUTOFF). The first run only verifies: it is cold (first call of the JIT
    code, first touch of temporaries) and takes 200-400 us for a 15 us layernorm, so were it
    to decide the cutoff every small candidate would look slow and be recorded at its cold
    time. The number of repeats (about 2 s per candidate) is sized by a warm run too."""
    kernel = compile_func(func, hw)
    if num_threads is not None:
        kernel.num_threads = num_threads
    outs = [np.full(e.shape, np.nan, e.dtype) for e in expected]
    t0 = time.perf_counter()
    kernel(*inputs, *outs)
    per_call = time.perf_counter() - t0  # the cold verifying run, until a warm one is needed
    wrong = check_outputs(outs, expected, rtol, atol)
    if wrong:
        return MeasureResult(False, error=wrong, kind="wrong")
    if (cutoff is not None and per_call > cutoff) or per_call * repeat > 2.0:
        per_call = kernel.benchmark(*inputs, *outs, warmup=0, repeat=1, min_time=0.0).min
    for _ in range(RETIMES_OVER_CUTOFF):
        if cutoff is None or per_call <= cutoff or per_call > RETIME_BELOW:
            break
        per_call = min(per_call, kernel.benchmark(*inputs, *outs, warmup=0, repeat=1, min_time=0.0).min)
    if cutoff is not None and per_call > cutoff:
        return MeasureResult(True, per_call, per_call, [per_call])
    repeat = max(2, min(repeat, int(2.0 / max(per_call, 1e-9))))  # about 2 s at most per candidate
    t = kernel.benchmark(*inputs, *outs, warmup=1 if per_call > 0.05 else 2, repeat=repeat)
    return MeasureResult(True, t.median, t.min, list(t.times))


def measure(func: PrimFunc, inputs: list[np.ndarray], expected: list[np.ndarray], timeout: float = 60.0,
            **kw) -> MeasureResult:
    """`measure_in_process` in an isolated worker: crashes and hangs become failed results."""
    res = run_isolated(_measure_kw, func, inputs, expected, kw, timeout=timeout)
    if res.ok:
        return res.value
    return MeasureResult(False, error=res.error, kind=res.kind)


def _measure_kw(func, inputs, expected, kw) -> MeasureResult:
    return measure_in_process(func, inputs, expected, **kw)
