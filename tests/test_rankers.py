"""Cost models of the searches: the world model as evolutionary search's ranker and as the
TLM's sample picker, its program features, online fine-tuning, resuming after a kill."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tlmir import ops
from tlmir.cli import main
from tlmir.errors import ScheduleError, TlmirError
from tlmir.runtime.records import RecordDB
from tlmir.runtime.target import SearchParams, host_hardware
from tlmir.runtime.task import Task
from tlmir.schedule.lower import lower
from tlmir.schedule.space import SearchSpace
from tlmir.search.features import NUM_FEATURES, program_features
from tlmir.search.rankers import cached_evaluator
from tlmir.search.strategy import make_strategy, parse_strategy
from tlmir.search.world_model import WorldModelConfig
from tlmir.search.world_train import Evaluator, Program, ranking_metrics, train_evaluator
from test_world_model import HW, TOK, _toy_programs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = SearchParams(population=48, evolution_iters=2, measures_per_round=8, warmup_rounds=2,
                     world_finetune_steps=5)


def _with_features(progs):
    """The toy programs with the features of their lowered loop nests."""
    from tlmir.lm.language import parse_sentence
    spaces, out = {}, []
    tasks = {t.key: t for t in (Task.from_op(ops.matmul(64, 64, 64)), Task.from_op(ops.matmul(32, 128, 64)))}
    for p in progs:
        task = tasks[p.task_key]
        space = spaces.setdefault(p.task_key, SearchSpace(task.outputs, HW))
        func = lower(space.replay(parse_sentence(p.sentence)[1]), task.args)
        out.append(Program(p.task_key, p.sentence, p.seconds, program_features(func, HW)))
    return out


def test_an_evaluator_reading_features_round_trips_and_asks_for_them(tmp_path):
    progs = _with_features(_toy_programs(16))
    ev = train_evaluator(progs, TOK, WorldModelConfig(TOK.vocab_size, d_model=16, n_features=NUM_FEATURES), steps=3)
    assert float(ev.model.feature_std.min()) > 0 and float(ev.model.feature_mean.abs().sum()) > 0
    ev.save(str(tmp_path / "ev"))
    again = Evaluator.load(str(tmp_path / "ev"))
    assert again.model.config.n_features == NUM_FEATURES
    np.testing.assert_allclose(again.score_programs(progs), ev.score_programs(progs), rtol=1e-5, atol=1e-6)
    with pytest.raises(TlmirError, match="reads program features"):
        again.score([p.sentence for p in progs])


def test_search_params_name_the_evaluator_the_world_ranker_starts_from(tmp_path):
    from tlmir.runtime.target import search_params
    from tlmir.search.rankers import WorldRanker
    progs = _toy_programs(16)
    train_evaluator(progs, TOK, WorldModelConfig(TOK.vocab_size, d_model=16), steps=2).save(str(tmp_path / "ev"))
    task = Task.from_op(ops.matmul(64, 64, 64))
    sp = search_params([f"world_evaluator={tmp_path / 'ev'}"])
    ranker = WorldRanker(SearchSpace(task.outputs, HW, sp), task)
    assert ranker.ev.model.config.d_model == 16 != cached_evaluator().model.config.d_model
    bad = search_params([f"world_evaluator={tmp_path / 'none'}"])
    with pytest.raises(TlmirError, match=f"evaluator {tmp_path / 'none'}: cannot read config.json"):
        WorldRanker(SearchSpace(task.outputs, HW, bad), task)


def test_fine_tuning_on_a_tasks_measurements_teaches_its_order():
    progs = [p for p in _toy_programs(64)][:64]  # the first task's programs only
    ev = train_evaluator(progs, TOK, WorldModelConfig(TOK.vocab_size, d_model=32), steps=1)
    before = ranking_metrics(progs, ev.score_programs(progs))["pairwise_accuracy"]
    ev.fine_tune(progs, steps=80, lr=3e-3)
    after = ranking_metrics(progs, ev.score_programs(progs))["pairwise_accuracy"]
    assert after >= 0.8 and after > before + 0.1


@pytest.mark.parametrize("spec, message", [("evolutionary@lstm", "takes cost model mlp or world, not 'lstm'"),
                                           ("tlm@mlp", "takes cost model world or none"),
                                           ("random@world", "takes no cost model, not 'world'"),
                                           ("annealing", "unknown strategy 'annealing'")])
def test_a_bad_strategy_or_cost_model_is_named(spec, message):
    with pytest.raises(TlmirError, match=message):
        parse_strategy(spec)


@pytest.mark.parametrize("likelihood", [0.0, 1.0])
def test_ranked_tlm_measures_the_top_picks_of_its_pool(likelihood):
    """Weight 0: the evaluator's top picks; otherwise the top of evaluator rank + weight x
    likelihood rank."""
    task = Task.from_op(ops.dense(16, 64, 64))
    space = SearchSpace(task.outputs, host_hardware(), SearchParams(tlm_rank_per_slot=8, tlm_rank_min_pool=0,
                                                                    tlm_rank_likelihood=likelihood,
                                                                    tlm_transfers=0))
    search = make_strategy("tlm", space, task, seed=0)
    pools = []
    write = search._write
    search._write = lambda n, exclude, draws=4: pools.append(write(n, exclude, draws)) or pools[-1]
    picks = search.propose(3)
    assert len(pools) == 1 and len(pools[0]) > 3 and len(picks) == 3
    scores = search.ranker.score(pools[0])
    assert np.isfinite(scores).sum() >= 3
    if likelihood:
        like = np.array([search.logprob[c.key] for c in pools[0]])
        assert np.all(like < 0) and len(set(like)) > 1
        rank = lambda x: np.argsort(np.argsort(x, kind="stable"), kind="stable")  # noqa: E731
        scores = rank(scores) + likelihood * rank(like)
    by_key = dict(zip((c.key for c in pools[0]), scores))
    assert sorted((by_key[c.key] for c in picks), reverse=True) == sorted(scores, reverse=True)[:3]
    assert make_strategy("tlm@none", space, task).ranker is None


def test_ranked_tlm_picks_one_program_from_at_least_the_minimum_pool():
    """TLM-1 ranks as large a pool as a ten-measurement run (`tlm_rank_min_pool`), capped
    by `tlm_rank_max`; a negative minimum is refused, naming the field."""
    task = Task.from_op(ops.dense(16, 64, 64))
    sizes = []
    for min_pool, cap in ((24, 1024), (24, 16)):
        sp = SearchParams(tlm_rank_per_slot=4, tlm_rank_min_pool=min_pool, tlm_rank_max=cap, tlm_transfers=0)
        search = make_strategy("tlm", SearchSpace(task.outputs, host_hardware(), sp), task, seed=0)
        asked = []
        write = search._write
        search._write = lambda n, exclude, draws=4: asked.append(n) or write(n, exclude, draws)
        assert len(search.propose(1)) == 1
        sizes.append(asked[0])
    assert sizes == [24, 16]
    with pytest.raises(ScheduleError, match="tlm_rank_min_pool"):
        SearchParams(tlm_rank_min_pool=-1)


_CHILD = """
import sys
from tlmir import ops
from tlmir.runtime.task import Task
from tlmir.search.tune import tune
from test_rankers import SMALL
tune(Task.from_op(ops.matmul(32, 32, 64)), trials=200, strategy="evolutionary@world", db=sys.argv[1],
     progress=False, sp=SMALL)
"""


def test_evolutionary_search_with_the_world_model_resumes_after_a_kill(tmp_path, capsys):
    from tlmir.search.tune import tune
    path = str(tmp_path / "world.db")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "tests")]))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, path], env=env, stderr=subprocess.PIPE, text=True)
    task = Task.from_op(ops.matmul(32, 32, 64))
    try:
        deadline, seen = time.monotonic() + 120, 0
        while seen < 12 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.5)
            if os.path.exists(path):
                with RecordDB(path) as db:
                    seen = len(db.records(task.key))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL, child.stderr.read()
    with RecordDB(path) as db:
        before = [r.trace for r in db.records(task.key)]
    assert len(before) >= 12  # two warm-up rounds of 4, then rounds the world model ranks
    res = tune(task, trials=len(before) + 8, strategy="evolutionary@world", db=path, progress=False, sp=SMALL)
    with RecordDB(path) as db:
        after = db.records(task.key)
    assert [r.trace for r in after[: len(before)]] == before  # nothing lost
    assert len(after) == res.measurements == len(before) + 8
    assert len({r.trace for r in after}) == len(after)  # the resumed search knew what was measured
    assert all(r.strategy == "evolutionary@world" for r in after)
    assert main(["rank", "--db", path, "--op", "matmul", "--shape", "32,32,64", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert f"# matmul: {len(after)} programs | pairwise accuracy" in out
    assert len([line for line in out.splitlines() if line.strip()[:1].isdigit()]) == 3


def test_the_shipped_evaluator_loads_within_its_size_and_scores_programs():
    ev = cached_evaluator()
    assert ev.model.config.vocab_size == ev.tok.vocab_size
    assert os.path.getsize(os.path.join(REPO, "tlmir", "lm", "models", "evaluator", "model.safetensors")) < 20e6
    progs = _with_features(_toy_programs(8)) if ev.reads_features else _toy_programs(8)
    scores = ev.score_programs(progs)
    assert np.isfinite(scores).all() and np.ptp(scores) > 0
