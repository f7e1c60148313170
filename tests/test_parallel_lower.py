"""Candidates built in worker processes: the same programs as in process, and no worker
outlives its search."""
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
from worker_jobs import alive

from tlmir import ops
from tlmir.runtime.target import SearchParams
from tlmir.runtime.task import Task
from tlmir.schedule.space import SearchSpace
from tlmir.search import parallel_lower
from tlmir.search.strategy import EvolutionarySearch, build_candidates

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = Task.from_op(ops.matmul(32, 32, 64))


def _batch(workers: int) -> list:
    """Samples, then mutants of them, built with `workers` processes."""
    space = SearchSpace(TASK.outputs, sp=SearchParams(lowering_workers=workers))
    n = parallel_lower.MIN_BATCH
    samples = build_candidates(space, TASK.args, [parallel_lower.sample_request(s) for s in range(n)], True)
    parents = [c for c in samples if c.lowered]
    mutants = [parallel_lower.mutate_request(parents[i % len(parents)].key, 1000 + i) for i in range(n)]
    return samples + build_candidates(space, TASK.args, mutants, True)


def test_workers_build_the_same_programs_with_the_same_features_and_code():
    serial, parallel = _batch(1), _batch(2)
    assert [c.key for c in parallel] == [c.key for c in serial]
    assert [c.lowered for c in parallel] == [c.lowered for c in serial]
    worked = [c for c in parallel if c._func is None and c.lowered]  # built in a worker, not lowered here yet
    assert len(worked) > parallel_lower.MIN_BATCH
    for cand, ref in list(zip(parallel, serial))[::16]:
        assert np.array_equal(cand.features, ref.features)
        assert str(cand.func) == str(ref.func)  # lowered here on first use


def test_evolutionary_search_picks_the_same_programs_with_any_number_of_workers():
    def picks(workers):
        sp = SearchParams(population=parallel_lower.MIN_BATCH, evolution_iters=1, lowering_workers=workers)
        search = EvolutionarySearch(SearchSpace(TASK.outputs, sp=sp), TASK.args, seed=3, task=TASK)
        return [c.key for c in search.propose(8)]
    assert picks(2) == picks(1)


def test_a_replayed_trace_the_space_refuses_is_a_failed_candidate():
    space = SearchSpace(TASK.outputs, sp=SearchParams(lowering_workers=1))
    good = build_candidates(space, TASK.args, [parallel_lower.sample_request(1)])[0]
    stale = type(good.trace)(len(space.sketches) + 5, list(good.trace.decisions))
    bad = build_candidates(space, TASK.args, [parallel_lower.replay_request(stale)])[0]
    assert good.lowered and not bad.lowered and "sketch" in bad.error and bad.func is None


def test_a_script_without_a_main_guard_builds_in_workers_that_die_with_it(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent("""
        import time
        from tlmir import ops
        from tlmir.runtime.target import SearchParams
        from tlmir.runtime.task import Task
        from tlmir.schedule.space import SearchSpace
        from tlmir.search import parallel_lower
        from tlmir.search.strategy import build_candidates
        task = Task.from_op(ops.matmul(32, 32, 64))
        space = SearchSpace(task.outputs, sp=SearchParams(lowering_workers=2))
        reqs = [parallel_lower.sample_request(s) for s in range(parallel_lower.MIN_BATCH)]
        assert all(c.lowered for c in build_candidates(space, task.args, reqs))
        print(*parallel_lower._pool.pids, flush=True)
        time.sleep(60)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=REPO))
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
    finally:
        proc.kill()
        proc.wait()
    assert "Traceback" not in proc.stderr.read()
    assert len(pids) >= 1
    deadline = time.monotonic() + 10
    left = pids
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in pids if alive(p)]
    assert not left, f"pool workers {left} outlived their killed parent"
