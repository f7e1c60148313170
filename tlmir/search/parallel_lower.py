"""Build and lower a batch of candidate programs in worker processes, one per core.

Evolutionary search builds and lowers 2,000-4,500 candidates a round so its cost model
can rank them, all in pure Python (about 8 ms a program): on a 2-core host that took 60%
of an evolutionary-1000 run, more than the measurements. Nothing is measured while a
round is proposed, so the cores are free. The workers are the measuring worker's kind
(runtime.worker.WorkerPool): fresh interpreters, so a script without a main guard can
search, and a search killed by SIGKILL takes them along. The parent asks for programs by request: a
sample or a mutant, each with its own seed drawn from the search's random numbers (so a
seed picks the same programs however many workers there are), or a trace to replay. The
workers build, lower and compute the cost-model features, and send back the trace, any
error and the features. The few programs measured are lowered again in the parent:
pickling every program back (~5 KB, 1.6 ms each) cost as much as the workers saved.

A worker keeps the space of the task it saw last: the task's tensors travel with every
chunk (a few KB), and the sketches are derived once per task per worker.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import pickle
import random
import sys
from typing import Sequence

import numpy as np

from ..errors import MeasureError, TlmirError
from ..ir.stmt import PrimFunc
from ..runtime.worker import WorkerPool
from ..schedule.decider import Trace
from ..schedule.lower import lower
from ..schedule.space import SearchSpace
from .features import program_features

MIN_BATCH = 128       # smaller batches are built in the calling process: starting the workers
                      # (~1 s) would cost a small search more than they save
CHUNK = 64            # traces per job: several jobs per worker even out their lengths

_pool: WorkerPool | None = None
_pool_size = 0
_broken = False        # the pool failed once in this process: lower in process from then on
_spaces: dict[str, tuple] = {}   # worker side: task token -> (space, args)

Built = tuple[Trace, PrimFunc | None, str | None, np.ndarray | None]
# (trace, function, error, features); from a worker process the function is None
# where there is no error: the worker only checked that the program lowers


def lowering_workers(requested: int) -> int:
    """Processes to lower in: `requested` (SearchParams.lowering_workers), or 0 for one per
    core of this host, at most 8."""
    return requested if requested > 0 else min(os.cpu_count() or 1, 8)


def lower_one(space: SearchSpace, args, sch, features: bool) -> tuple[PrimFunc | None, str | None, np.ndarray | None]:
    """Lower one schedule: (function, error, features); a schedule the space offers but
    lowering refuses is an error string (a failed trial), not an exception."""
    try:
        func = lower(sch, args)
    except TlmirError as e:
        return None, f"{type(e).__name__}: {e}", None
    return func, None, program_features(func, space.hw) if features else None


def in_workers(count: int, workers: int) -> bool:
    """Whether a batch of `count` programs is built in worker processes."""
    return lowering_workers(workers) >= 2 and count >= MIN_BATCH and not _broken


def sample_request(seed: int) -> tuple:
    """A random program of the space, drawn with its own seed (so where it is drawn does not matter)."""
    return ("sample", None, seed)


def mutate_request(parent: str, seed: int) -> tuple:
    """A mutant of the program whose trace (JSON) is `parent`, drawn with its own seed."""
    return ("mutate", parent, seed)


def replay_request(trace: Trace) -> tuple:
    return ("replay", trace.to_json(), 0)


def build_one(space: SearchSpace, args, request: tuple, features: bool) -> Built:
    """The program a request names, built and lowered in this process."""
    kind, text, seed = request
    if kind == "sample":
        sch, trace = space.sample(random.Random(seed))
    elif kind == "mutate":
        sch, trace = space.mutate(Trace.from_json(text), random.Random(seed))
    else:
        trace = Trace.from_json(text)
        try:
            sch = space.replay(trace)
        except TlmirError as e:
            return trace, None, f"{type(e).__name__}: {e}", None
    return (trace,) + lower_one(space, args, sch, features)


def build_batch(space: SearchSpace, args, requests: Sequence[tuple], features: bool = False,
                workers: int = 0) -> list[Built]:
    """The programs `requests` name (sample_request, mutate_request, replay_request), in
    order; `features`: with the cost model's features. In `lowering_workers(workers)`
    processes when the batch is large enough to pay for it; the result does not depend on
    where they were built."""
    n = lowering_workers(workers)
    blob = None
    if in_workers(len(requests), workers):
        try:
            blob = pickle.dumps((space.outputs, args, space.hw, space.sp))
        except (pickle.PicklingError, AttributeError, TypeError):   # e.g. a te body holding a local function
            blob = None
    if blob is None:
        return [build_one(space, args, r, features) for r in requests]
    token = hashlib.sha1(blob).hexdigest()
    jobs = [(token, blob, requests[i:i + CHUNK], features) for i in range(0, len(requests), CHUNK)]
    try:
        out: list[Built] = []
        for part in _get_pool(n).map(_build_chunk, jobs):
            out += [(Trace.from_json(text), None, error, feats) for text, error, feats in part]
        return out
    except (MeasureError, OSError) as e:   # a worker crashed, timed out or raised
        _give_up(e)
        return [build_one(space, args, r, features) for r in requests]


def _get_pool(n: int) -> WorkerPool:
    global _pool, _pool_size
    if _pool is None or _pool_size != n:
        shutdown()
        _pool = WorkerPool(n, preload=(__name__,))
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
        _pool.shutdown(wait=True, cancel_futures=True)
    _pool, _pool_size = None, 0


atexit.register(shutdown)


def _build_chunk(job: tuple) -> list[tuple[str, str | None, np.ndarray | None]]:
    """Worker side: build a chunk of one task's requests; (trace JSON, error, features) each."""
    token, blob, requests, features = job
    if token not in _spaces:
        outputs, args, hw, sp = pickle.loads(blob)
        _spaces.clear()
        _spaces[token] = (SearchSpace(outputs, hw, sp), args)
    space, args = _spaces[token]
    out = []
    for request in requests:
        trace, _, error, feats = build_one(space, args, request, features)
        out.append((trace.to_json(), error, feats))
    return out
