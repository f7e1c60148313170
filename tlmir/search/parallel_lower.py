"""Lower a batch of candidate schedules in worker processes, one per spare core.

Evolutionary search lowers 2,000-4,500 candidates a round so its cost model can rank
them, and lowering is pure Python (4-15 ms a program): on a 2-core host it took 60% of
an evolutionary-1000 run, more than the measurements. Nothing is measured while a round
is proposed, so the cores are free. The parent still draws every trace (the random
numbers stay in one process, so a seed picks the same programs either way); the workers
replay each trace, lower it and compute its cost-model features, and send back only
whether it lowered and its features. The few programs measured are lowered again in the
parent: pickling every program back (~5 KB, 1.6 ms each) cost as much as the workers saved.

A worker keeps the space of the task it saw last: the task's tensors travel with every
chunk (a few KB), and the sketches are derived once per task per worker.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import hashlib
import multiprocessing
import os
import pickle
import sys
from typing import Sequence

import numpy as np

from ..errors import TlmirError
from ..ir.stmt import PrimFunc
from ..schedule.decider import Trace
from ..schedule.lower import lower
from ..schedule.space import SearchSpace
from .features import program_features

MIN_BATCH = 48        # smaller batches are lowered in the calling process (a chunk's overhead)
CHUNK = 64            # traces per job: several jobs per worker even out their lengths

_pool: concurrent.futures.Executor | None = None
_pool_size = 0
_broken = False        # the pool failed once in this process: lower in process from then on
_spaces: dict[str, tuple] = {}   # worker side: task token -> (space, args)

Lowered = tuple[PrimFunc | None, str | None, np.ndarray | None]
# (function, error, features); a worker process sends no function back (None, error free)


def lowering_workers(requested: int) -> int:
    """Processes to lower in: `requested` (SearchParams.lowering_workers), or 0 for one per
    core of this host, at most 8."""
    return requested if requested > 0 else min(os.cpu_count() or 1, 8)


def lower_one(space: SearchSpace, args, sch, features: bool) -> Lowered:
    """Lower one schedule; a schedule the space offers but lowering refuses is an error
    string (a failed trial), not an exception."""
    try:
        func = lower(sch, args)
    except TlmirError as e:
        return None, f"{type(e).__name__}: {e}", None
    return func, None, program_features(func, space.hw) if features else None


def lower_batch(space: SearchSpace, args, sch_traces: Sequence[tuple], features: bool = False,
                workers: int = 0) -> list[Lowered]:
    """(function, error, features) of each (schedule, trace), in order; `features`: compute
    the cost-model features too. In `lowering_workers(workers)` processes when the batch is
    large enough to pay for it: then the function is None where there is no error (the
    workers only checked that it lowers; lower it here when it is needed)."""
    n = lowering_workers(workers)
    if n < 2 or len(sch_traces) < MIN_BATCH or _broken:
        return [lower_one(space, args, sch, features) for sch, _ in sch_traces]
    try:
        blob = pickle.dumps((space.outputs, args, space.hw, space.sp))
    except (pickle.PicklingError, AttributeError, TypeError):   # e.g. a te body holding a local function
        return [lower_one(space, args, sch, features) for sch, _ in sch_traces]
    token = hashlib.sha1(blob).hexdigest()
    traces = [trace.to_json() for _, trace in sch_traces]
    jobs = [(token, blob, traces[i:i + CHUNK], features) for i in range(0, len(traces), CHUNK)]
    try:
        out: list[Lowered] = []
        for part in _get_pool(n).map(_lower_chunk, jobs):
            out += part
        return out
    except (concurrent.futures.process.BrokenProcessPool, OSError, pickle.PicklingError) as e:
        _give_up(e)
        return [lower_one(space, args, sch, features) for sch, _ in sch_traces]


def _get_pool(n: int) -> concurrent.futures.Executor:
    global _pool, _pool_size
    if _pool is None or _pool_size != n:
        shutdown()
        # spawn, not fork: the parent may hold torch's threads (the world model, the TLM)
        _pool = concurrent.futures.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
        _pool_size = n
    return _pool


def _give_up(e: BaseException) -> None:
    global _broken
    _broken = True
    shutdown()
    sys.stderr.write(f"[lower] worker processes failed ({type(e).__name__}: {e}); lowering in this process\n")


def shutdown() -> None:
    """Stop the worker processes (they start again on the next large batch)."""
    global _pool, _pool_size
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
    _pool, _pool_size = None, 0


atexit.register(shutdown)


def _lower_chunk(job: tuple) -> list[Lowered]:
    """Worker side: replay and lower a chunk of traces of one task."""
    token, blob, traces, features = job
    if token not in _spaces:
        outputs, args, hw, sp = pickle.loads(blob)
        _spaces.clear()
        _spaces[token] = (SearchSpace(outputs, hw, sp), args)
    space, args = _spaces[token]
    out = []
    for text in traces:
        try:
            sch = space.replay(Trace.from_json(text))
        except TlmirError as e:
            out.append((None, f"{type(e).__name__}: {e}", None))
            continue
        _, error, feats = lower_one(space, args, sch, features)
        out.append((None, error, feats))
    return out
