"""The tuning loop: results, records, faults (crash, hang, SIGKILL) and resumption."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tlmir
from tlmir import ops, te
from tlmir.runtime.records import RecordDB
from tlmir.runtime.target import SearchParams
from tlmir.runtime.task import Task
from tlmir.search.measurer import Measurer
from tlmir.search.tune import tune, tune_workload

SMALL = SearchParams(population=16, measures_per_round=8, evolution_iters=2, cost_model_steps=100)


def test_tune_finds_a_verified_kernel_and_records_everything(tmp_path):
    task = Task.from_op(ops.matmul(64, 64, 64))
    db = tmp_path / "r.db"
    res = tune(task, trials=12, strategy="evolutionary", db=str(db), sp=SMALL, progress=False)
    assert res.measurements == 12 and res.best_trace is not None
    a, b = task.random_inputs(3)
    c = np.zeros((64, 64), "float32")
    res.build()(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    with RecordDB(str(db)) as rdb:
        recs = rdb.records(task.key)
        assert len(recs) == 12 and len({r.trace for r in recs}) == 12
        assert rdb.best(task.key, recs[0].hw_key)[0].best == pytest.approx(res.best_seconds)


def test_tune_out_of_time_stops_after_its_first_round():
    """max_seconds: no round starts after it (the first always runs, and no confirmation
    follows); a negative budget is refused."""
    task = Task.from_op(ops.softmax(8, 64))
    res = tune(task, trials=64, strategy="random", sp=SMALL, progress=False, max_seconds=0)
    assert res.measurements == SMALL.measures_per_round and res.best_trace is not None
    with pytest.raises(tlmir.TlmirError, match="max_seconds"):
        tune(task, trials=8, strategy="random", progress=False, max_seconds=-1.0)


def test_user_defined_task_without_numpy_reference(capsys):
    """Also: away from a terminal (a pipe, a log) progress is a line per round."""
    A = te.placeholder((32, 48), name="A")
    B = te.compute((32, 48), lambda i, j: te.exp(A[i, j]) * 2.0 + A[i, (j + 1) % 48], name="B")
    sp = SearchParams(population=16, measures_per_round=4, evolution_iters=2)
    res = tune(Task("mine", [A, B]), trials=6, strategy="random", sp=sp)
    assert res.best_trace is not None and res.failures == 0
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split("] ", 1)[1].split(",")[0] for ln in lines[:2]] == ["mine: 4/6 measured", "mine: 6/6 measured"]


def test_crashing_candidates_cost_one_trial_each():
    # every program of this task reads far outside A: each candidate crashes its worker (a
    # data-dependent guard, always true, is one the definition-time bounds check trusts)
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: te.if_then_else(A[0] < 1e30, A[i * 100_000_000], 0.0), name="B")
    task = Task("crash", [A, B], reference=lambda a: [np.zeros(16, "float32")])
    res = tune(task, trials=4, strategy="random", sp=SMALL, progress=False)
    assert res.measurements == 4 and res.failures == 4 and res.best_trace is None


def test_hanging_candidates_time_out_and_the_run_goes_on():
    task = Task.from_op(ops.matmul(512, 512, 512))
    meas = Measurer(timeout=0.05)  # far too short for a 512³ matmul: every trial times out
    try:
        res = tune(task, trials=2, strategy="random", sp=SMALL, progress=False, measurer=meas)
    finally:
        meas.close()
    assert res.measurements == 2 and res.failures == 2


def test_sigkill_mid_run_then_resume(tmp_path, capsys):
    db = str(tmp_path / "k.db")
    script = textwrap.dedent(f"""
        from tlmir import ops
        from tlmir.runtime.target import SearchParams
        from tlmir.runtime.task import Task
        from tlmir.search.tune import tune
        if __name__ == "__main__":
            sp = SearchParams(population=16, measures_per_round=4, evolution_iters=1)
            tune(Task.from_op(ops.matmul(48, 48, 48)), trials=40, strategy="random", db={db!r},
                 sp=sp, progress=False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    task = Task.from_op(ops.matmul(48, 48, 48))
    deadline = time.time() + 120
    done = 0
    while time.time() < deadline and done < 5:
        time.sleep(0.5)
        if os.path.exists(db):
            with RecordDB(db) as rdb:
                done = rdb.count(task.key)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert done >= 5
    with RecordDB(db) as rdb:
        before = rdb.records(task.key)
    assert len(before) >= 5
    res = tune(task, trials=len(before) + 3, strategy="random", db=db, sp=SMALL)
    with RecordDB(db) as rdb:
        after = rdb.records(task.key)
    assert [r.trace for r in after[: len(before)]] == [r.trace for r in before]
    assert len(after) == len(before) + 3 == res.measurements
    assert f"] matmul: {len(before)} measurements resumed from {db}\n" in capsys.readouterr().err
    assert len({r.trace for r in after}) == len(after)  # nothing measured twice


def test_workload_tuning_spends_the_budget():
    tasks = [(Task.from_op(ops.matmul(32, 32, 32)), 2.0), (Task.from_op(ops.softmax(16, 64)), 1.0)]
    res = tune_workload(tasks, trials_per_task=8, strategy="random", sp=SMALL, progress=False)
    assert res.measurements == 16
    assert all(r.best_trace is not None for r in res.results)
    assert res.weighted_seconds == pytest.approx(2 * res.results[0].best_seconds + res.results[1].best_seconds)


def test_an_exhausted_task_hands_its_budget_to_the_others():
    A = te.placeholder((2,), name="A")
    B = te.compute((2,), lambda i: A[i] * 2.0, name="B")
    tiny = Task("tiny", [A, B])  # 12 programs in all; so heavily weighted that the scheduler wants it
    tasks = [(tiny, 1e6), (Task.from_op(ops.matmul(32, 32, 32)), 1.0)]  # whatever a busy host times
    res = tune_workload(tasks, trials_per_task=14, strategy="random", sp=SMALL, progress=False)
    assert [r.measurements for r in res.results] == [12, 16]  # the budget of 28 is spent in full


def test_evolutionary_search_warms_up_in_small_rounds(monkeypatch):
    from tlmir.search.strategy import EvolutionarySearch, RandomSearch
    sizes = {"evolutionary": [], "random": []}
    for cls in (EvolutionarySearch, RandomSearch):
        orig = cls.propose

        def spy(self, n, orig=orig, cls=cls):
            if type(self) is cls:  # not RandomSearch.propose filling up an evolutionary round
                sizes[self.name].append(n)
            return orig(self, n)
        monkeypatch.setattr(cls, "propose", spy)
    sp = SearchParams(population=16, measures_per_round=8, warmup_rounds=4, evolution_iters=2,
                      cost_model_steps=100)
    task = Task.from_op(ops.matmul(32, 32, 32))
    tune(task, trials=14, strategy="evolutionary", sp=sp, progress=False)
    tune(task, trials=14, strategy="random", sp=sp, progress=False)
    # the first round's worth (8) in 4 rounds of 2: the cost model ranks from the second on
    assert sizes == {"evolutionary": [2, 2, 2, 2, 6], "random": [8, 6]}


def test_bad_strategy_and_target():
    task = Task.from_op(ops.matmul(8, 8, 8))
    with pytest.raises(tlmir.TlmirError, match="unknown strategy"):
        tune(task, trials=1, strategy="magic", progress=False)
    with pytest.raises(tlmir.TlmirError, match="unknown target"):
        tune(task, trials=1, target="tpu", progress=False)


def test_replaying_a_database_record_rebuilds_the_measured_program(tmp_path):
    from tlmir.schedule.decider import Trace
    from tlmir.schedule.space import SearchSpace
    task = Task.from_op(ops.dense(16, 32, 24, bias=True, act="relu"))
    db = str(tmp_path / "d.db")
    res = tune(task, trials=6, strategy="random", db=db, sp=SMALL, progress=False)
    with RecordDB(db) as rdb:
        rec = rdb.best(task.key, rdb.records(task.key)[0].hw_key)[0]
    space = SearchSpace(task.outputs)
    again = tlmir.lower(space.replay(Trace.from_json(rec.trace)), task.args)
    assert str(again) == str(tlmir.lower(res.best_schedule(), task.args))


def test_local_mutants_refine_the_best_program_of_each_leading_sketch():
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.strategy import EvolutionarySearch
    sp = SearchParams(population=32, local_share=0.25, local_parents=2)
    task = Task.from_op(ops.softmax(64, 32))
    search = EvolutionarySearch(SearchSpace(task.outputs, sp=sp), task.args, seed=0)
    first = search.propose(24)
    # made-up throughputs: the first program proposed is the fastest, the last the slowest
    fake = {c.key: 1.0 / (1 + i) for i, c in enumerate(first)}
    search.update([(c, 1.0 / fake[c.key]) for c in first])
    best_by_sketch = {}
    for c in sorted(first, key=lambda c: -fake[c.key]):
        best_by_sketch.setdefault(c.trace.sketch, c)
    leading = list(best_by_sketch)[:2]
    local = search._local_mutants(6, sorted(search.measured, key=lambda m: -m[1]))
    assert len(local) == 6 and len({c.key for c in local}) == 6
    assert all(c.trace.sketch in leading for c in local)
    assert not {c.key for c in local} & {c.key for c in first}
    picks = search.propose(16)
    assert len(picks) == 16 and not {c.key for c in picks} & {c.key for c in first}


def test_bad_local_search_params_are_refused():
    from tlmir.errors import ScheduleError
    for bad in ({"local_share": 1.5}, {"local_share": -0.1}, {"local_parents": 0}):
        with pytest.raises(ScheduleError, match="local_"):
            SearchParams(**bad)
    for bad in ({"sketch_share": 1.5}, {"sketch_drop_factor": 0.5}, {"sketch_drop_after": -1}):
        with pytest.raises(ScheduleError, match="sketch_"):
            SearchParams(**bad)
    with pytest.raises(ScheduleError, match="mutation_weights"):
        SearchParams(mutation_weights=(("tile", -1.0),))


def _fake_candidates(per_sketch: dict[int, int]):
    from tlmir.schedule.decider import Trace
    from tlmir.search.strategy import Candidate
    return [Candidate(Trace(s, [("n", i)]), None) for s, n in per_sketch.items() for i in range(n)]


def test_every_racing_sketch_keeps_its_share_of_the_model_picks():
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.strategy import EvolutionarySearch
    task = Task.from_op(ops.matmul(32, 32, 32))
    sp = SearchParams(sketch_share=0.5, sketch_drop_factor=10.0)
    search = EvolutionarySearch(SearchSpace(task.outputs, sp=sp), task.args, seed=0)
    cands = _fake_candidates({0: 20, 1: 20, 2: 20, 3: 20})
    # the model loves sketch 0 (scores 100..81), then 1, 2, 3; one sketch-3 candidate failed to lower
    scores = np.array([100.0 - i for i in range(80)])
    scores[79] = -np.inf
    measured = [(cands[0], 1.0), (cands[20], 0.5), (cands[40], 0.05)]  # sketch 2: 20x slower
    # ... but after one try, sketch 2 is still in the race: 12 * 0.5 = 6 places dealt over
    # 4 sketches, each its best-scored first: 0, 1, 2, 3, then 0 and 1 again
    top = search._top(cands, scores, 12, search._dropped_sketches(measured))
    assert sorted(cands[i].trace.sketch for i in top) == [0] * 8 + [1, 1, 2, 3]
    assert {40, 60} <= set(top)
    measured += [(cands[41 + i], 0.0) for i in range(15)]  # 16 tries: dropped
    dropped = search._dropped_sketches(measured)
    assert dropped == {2}
    top = search._top(cands, scores, 12, dropped)
    sketches = [cands[i].trace.sketch for i in top]
    # 6 places over sketches 0, 1, 3 (3 never measured): 2 each, each its own
    # best-scored; the other 6 by global score, i.e. sketch 0
    assert len(top) == 12 and len(set(top)) == 12
    assert sketches.count(3) == 2 and sketches.count(1) == 2 and 2 not in sketches
    assert {i for i in top if cands[i].trace.sketch == 3} == {60, 61}
    assert sorted(i for i in top if cands[i].trace.sketch == 0) == list(range(8))
    # fewer places than sketches: the best-scored sketches get one each
    assert sorted(cands[i].trace.sketch for i in search._top(cands, scores, 4, dropped)) == [0, 0, 0, 1]
    assert search._top(cands, scores, 2, dropped) == [0, 1]
    # share 0: the plain global ranking
    search.sp = SearchParams(sketch_share=0.0)
    assert search._top(cands, scores, 12, dropped) == list(range(12))


def test_search_param_overrides_are_typed_and_checked():
    from tlmir.errors import ScheduleError
    from tlmir.runtime.target import search_params
    sp = search_params(["population=256", "tile_mutation=redraw", "unroll_steps=0,16", "eps-greedy=0.1"])
    assert (sp.population, sp.tile_mutation, sp.unroll_steps, sp.eps_greedy) == (256, "redraw", (0, 16), 0.1)
    assert search_params([]) == SearchParams()
    assert search_params(["tlm_borrow_own=true"]).tlm_borrow_own is True
    assert search_params(["tlm_borrow_own=0"]).tlm_borrow_own is False
    for bad, match in (("nope=1", "nope=1.*population"), ("population=many", "population: 'many'"),
                       ("tlm_borrow_own=maybe", "tlm_borrow_own: 'maybe' cannot be read as bool"),
                       ("population", "NAME=VALUE"), ("tile_mutation=zigzag", "tile_mutation")):
        with pytest.raises(ScheduleError, match=match):
            search_params([bad])
