"""Choosing the best program by re-measuring the fastest few (tune's confirmation)."""
import json
import statistics

import pytest

from tlmir import ops
from tlmir.runtime.records import CONFIRM, Record, RecordDB, best_of, confirmed_best, confirmed_times
from tlmir.runtime.target import SearchParams
from tlmir.runtime.task import Task
from tlmir.search.tune import tune

CONFIRMING = SearchParams(population=16, measures_per_round=8, evolution_iters=2,
                          confirm_top=2, confirm_rounds=2, confirm_min_trials=1, cost_model_steps=100)


def _rec(trace: int, seconds: float, strategy: str = "random") -> Record:
    return Record("k" * 16, "t", "hw", json.dumps({"sketch": 0, "decisions": [["x", trace]]}),
                  [seconds], strategy=strategy)


def test_best_of_takes_the_lowest_median_of_a_confirmation_that_ends_the_records():
    recs = [_rec(1, 1.0), _rec(2, 2.0), _rec(3, 0.5)]
    assert best_of(recs) == (recs[2].trace, 0.5)  # no confirmation: the fastest record
    confirm = [_rec(3, 0.9, CONFIRM), _rec(1, 0.8, CONFIRM), _rec(3, 0.7, CONFIRM),
               _rec(1, 0.85, CONFIRM), _rec(3, 1.2, CONFIRM), _rec(1, 0.75, CONFIRM)]
    assert best_of(recs + confirm) == (recs[0].trace, pytest.approx(0.8))  # 0.8 < median 0.9
    assert confirmed_best(recs + confirm) == best_of(recs + confirm)
    assert confirmed_best(recs) is None
    # the search went on after the confirmation: its times are not comparable any more
    assert best_of(recs + confirm + [_rec(4, 0.95)]) == (recs[2].trace, 0.5)
    assert confirmed_times(recs + confirm + [_rec(4, 0.95)]) == {}
    assert best_of([]) is None


def test_a_confirmation_timed_beside_another_job_does_not_pick_the_best():
    """Re-timings at whole scheduler ticks far above the search's best (another job ran
    on the second core) are left out; with none left the fastest record stands."""
    recs = [_rec(1, 120e-6), _rec(2, 100e-6), _rec(3, 300e-6)]
    ticks = [_rec(2, 7.95e-3, CONFIRM), _rec(1, 7.96e-3, CONFIRM), _rec(2, 7.94e-3, CONFIRM),
             _rec(1, 134e-6, CONFIRM)]
    assert confirmed_times(recs + ticks) == {recs[0].trace: [134e-6]}
    assert best_of(recs + ticks) == (recs[0].trace, 134e-6)
    assert confirmed_times(recs + ticks[:3]) == {}
    assert best_of(recs + ticks[:3]) == (recs[1].trace, 100e-6)


def test_tune_spends_the_end_of_its_budget_re_measuring_its_best_programs(tmp_path):
    task = Task.from_op(ops.matmul(64, 64, 64))
    db = str(tmp_path / "r.db")
    res = tune(task, trials=12, strategy="evolutionary", db=db, sp=CONFIRMING, progress=False)
    assert res.measurements == 12
    with RecordDB(db) as rdb:
        recs = rdb.records(task.key)
    search, confirm = recs[:8], recs[8:]
    assert all(r.strategy == "evolutionary" for r in search) and all(r.strategy == CONFIRM for r in confirm)
    fastest = []
    for r in sorted((r for r in search if r.ok), key=lambda r: r.best):
        if r.trace not in fastest:
            fastest.append(r.trace)
    assert [r.trace for r in confirm] == fastest[:2] * 2  # in turns, the fastest two
    medians = {t: statistics.median(v) for t, v in confirmed_times(recs).items()}
    winner = min(medians, key=medians.get)
    assert res.best_trace.to_json() == winner and res.best_seconds == pytest.approx(medians[winner])
    assert res.confirmed and res.to_dict()["confirmed"]
    again = tune(task, trials=12, strategy="evolutionary", db=db, sp=CONFIRMING, progress=False)
    assert again.measurements == 12 and again.best_trace.to_json() == winner  # resumed: nothing to do


def _searched_then_one_confirm_record(tmp_path, **fields) -> tuple:
    """(task, db path, fastest search record): 8 random measurements of a small matmul, then
    one confirmation record of the fastest (`fields`: its seconds or error), as a tuner killed
    during its confirmation leaves them."""
    task = Task.from_op(ops.matmul(32, 32, 32))
    db = str(tmp_path / "r.db")
    plain = SearchParams(population=16, measures_per_round=8, evolution_iters=2)
    tune(task, trials=8, strategy="random", db=db, sp=plain, progress=False)
    with RecordDB(db) as rdb:
        first = min((r for r in rdb.records(task.key) if r.ok), key=lambda r: r.best)
        rdb.append(Record(task.key, task.name, first.hw_key, first.trace, strategy=CONFIRM,
                          **(fields or {"seconds": [first.best]})))
    return task, db, first


def test_a_confirmation_cut_short_goes_on_where_it_stopped(tmp_path):
    task, db, first = _searched_then_one_confirm_record(tmp_path)
    res = tune(task, trials=12, strategy="random", db=db, sp=CONFIRMING, progress=False)
    with RecordDB(db) as rdb:
        recs = rdb.records(task.key)
    assert res.measurements == 12 and len(recs) == 12
    assert [r.strategy for r in recs[8:]] == [CONFIRM] * 4  # no new search measurement
    assert recs[10].trace == first.trace and recs[9].trace == recs[11].trace != first.trace


def test_a_confirmation_whose_re_measurements_all_failed_confirms_nothing(tmp_path):
    task, db, first = _searched_then_one_confirm_record(tmp_path, error="crashed")
    res = tune(task, trials=9, strategy="random", db=db, sp=CONFIRMING, progress=False)
    assert res.measurements == 9 and not res.confirmed  # the fastest record, not a median
    assert res.best_trace.to_json() == first.trace and res.best_seconds == pytest.approx(first.best)
