"""Issue 5: SFT, the tlm strategies, and the iterative optimization loop."""
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tlmir import ops
from tlmir.errors import ModelError, TlmirError
from tlmir.lm.registry import BASE_MODEL, load_model
from tlmir.lm.iterate import IterateConfig, Iteration, task_batches
from tlmir.lm.language import hw_prompt, trace_to_sentence
from tlmir.lm.sft import answer_flags, answer_nll, decision_flags, sft
from tlmir.runtime.records import Record, RecordDB
from tlmir.runtime.target import SearchParams, host_hardware
from tlmir.runtime.task import Task
from tlmir.schedule.space import SearchSpace
from tlmir.search.tune import tune

SMALL = SearchParams(population=16, measures_per_round=8, evolution_iters=2, tlm_hybrid_pool=32,
                     tlm_rank_per_slot=4, tlm_rank_min_pool=0, cost_model_steps=100)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_answer_flags_mark_only_answers():
    words = "<s> v4 task input A 8 stage B elem sp 8 read A i hw cpu avx512 sketch 2 " \
            "tile B.i 8 = 2 4 parallel B = 1 at C = root </s>".split()
    flagged = [w for w, f in zip(words, answer_flags(words)) if f]
    assert flagged == ["2", "2", "4", "1", "root", "</s>"]
    learned = [w for w, f in zip(words, decision_flags(words)) if f]
    assert learned == words[words.index("sketch"):]  # learn="sentences": the question words too


def _demos(task, n, seed=0):
    """n random sentences of `task`."""
    hw = host_hardware()
    space = SearchSpace(task.outputs, hw)
    rng = random.Random(seed)
    return [trace_to_sentence(task, hw, space.sample(rng)[1]) for _ in range(n)]


def test_sft_raises_the_likelihood_of_the_demonstrations(tmp_path):
    base, tok, _ = load_model(BASE_MODEL)
    demos = [d for d in _demos(Task.from_op(ops.dense(32, 48, 64, bias=True, act="gelu")), 40)
             if not tok.unknown_decisions(d)][:6]
    assert len(demos) == 6
    before = answer_nll(base, tok, demos)
    stats = sft(BASE_MODEL, demos, str(tmp_path / "sft"), epochs=12, batch_size=6, lr=1e-3, log=None)
    assert stats["completed"]
    tuned, tok2, meta = load_model(str(tmp_path / "sft"))
    after = answer_nll(tuned, tok2, demos)
    assert after < 0.7 * before, (before, after)
    assert meta["sft"]["demonstrations"] == 6 and meta["train"]["loss_mask"]
    assert meta["sft"]["learn"] == "answers"
    assert meta["sft"]["hardware"] == [" ".join(hw_prompt(host_hardware()))]  # what generation prompts with
    with pytest.raises(ModelError, match="learn must be one of answers, sentences"):
        sft(BASE_MODEL, demos, str(tmp_path / "bad"), learn="questions", log=None)


def test_sft_skips_demonstrations_the_vocabulary_cannot_spell(tmp_path):
    base_tok = load_model(BASE_MODEL)[1]
    demos = [d for d in _demos(Task.from_op(ops.matmul(32, 48, 64)), 12)
             if not base_tok.unknown_decisions(d)][:3]
    assert len(demos) == 3
    unknown = demos[0].replace("C.", "C.zz", 1)
    logs = []
    stats = sft(BASE_MODEL, demos + [unknown], str(tmp_path / "sft"), epochs=1, batch_size=4,
                log=logs.append)
    assert stats["completed"] and load_model(str(tmp_path / "sft"))[2]["sft"]["skipped"] == 1
    assert any("skipping 1 of 4 demonstrations" in line for line in logs)
    with pytest.raises(ModelError, match="none of the 1 demonstrations"):
        sft(BASE_MODEL, [unknown], str(tmp_path / "none"), log=None)


@pytest.mark.parametrize("strategy", ["tlm", "tlm+evolutionary"])
def test_tlm_strategies_find_verified_kernels(strategy):
    task = Task.from_op(ops.matmul(64, 64, 64))
    res = tune(task, trials=10, strategy=strategy, sp=SMALL, progress=False)
    assert res.measurements == 10 and res.best_trace is not None
    a, b = task.random_inputs(5)
    c = np.zeros((64, 64), "float32")
    res.build()(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_unranked_tlm_with_one_trial_uses_the_greedy_program():
    task = Task.from_op(ops.softmax(16, 64))
    one = tune(task, trials=1, strategy="tlm@none", progress=False)
    again = tune(task, trials=1, strategy="tlm@none", seed=7, progress=False)
    assert one.measurements == 1 and one.best_trace is not None
    assert one.best_trace == again.best_trace  # greedy: independent of the sampling seed


def test_task_batches_hold_every_type():
    tasks = [Task.from_op(ops.matmul(16 * i, 16, 16)) for i in range(1, 5)] + \
            [Task.from_op(ops.softmax(4, 8 * i)) for i in range(1, 5)]
    batches = task_batches(tasks, 2)
    assert sorted(len(b) for b in batches) == [4, 4]
    for b in batches:
        assert {t.name.split("_")[0] for t in b} == {"matmul", "softmax"}


_RUN = textwrap.dedent("""
    import sys
    from tlmir import ops
    from tlmir.lm.iterate import IterateConfig, Iteration
    from tlmir.runtime.task import Task
    if __name__ == "__main__":
        tasks = [Task.from_op(ops.matmul(32, 32, 32)), Task.from_op(ops.softmax(8, 64))]
        Iteration(sys.argv[1], "base", tasks, IterateConfig(rounds=2, per_task=4, batches=1,
                  sft_epochs=1), log=None).run()
""")


def test_iterate_resumes_after_sigkill_without_repeating_measurements(tmp_path):
    out = tmp_path / "run"
    script = tmp_path / "run.py"
    script.write_text(_RUN)
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen([sys.executable, str(script), str(out)], env=env)
    db_path = out / "records.db"
    deadline = time.time() + 120
    before = []
    while time.time() < deadline and proc.poll() is None:
        if db_path.exists():
            with RecordDB(str(db_path)) as db:
                before = db.records()
            if len(before) >= 3:
                break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert before, "the run measured nothing before it was killed"
    tasks = [Task.from_op(ops.matmul(32, 32, 32)), Task.from_op(ops.softmax(8, 64))]
    archive = str(tmp_path / "archive")
    res = Iteration(str(out), "base", tasks, IterateConfig(rounds=2, per_task=4, batches=1, sft_epochs=1),
                    log=None, archive=archive).run()
    with RecordDB(str(db_path)) as db:
        after = db.records()
        ids = {r.id: r.trace for r in after}
        assert all(ids.get(r.id) == r.trace for r in before)  # nothing lost
        for t in tasks:
            traces = [r.trace for r in after if r.task_key == t.key]
            assert len(traces) == len(set(traces))  # no program measured twice
            for rnd in (0, 1):
                assert sum(r.round == rnd for r in after if r.task_key == t.key) <= 4
    prog = json.loads((out / "progress.json").read_text())
    assert sorted(map(tuple, prog["done"])) == sorted((r, t.key) for r in (0, 1) for t in tasks)
    lat = [p["normalized_latency"] for p in res["curve"]]
    assert lat[0] == 1.0 and all(b <= a + 1e-12 for a, b in zip(lat, lat[1:]))
    assert sorted(k for b in prog["batches"] for k in b) == sorted(t.key for t in tasks)
    with pytest.raises(TlmirError, match="other tasks"):  # batches never silently re-dealt
        Iteration(str(out), "base", tasks[:1] + [Task.from_op(ops.matmul(16, 16, 16))], log=None)
    model, tok, _ = load_model(str(out))  # the run directory is now a model
    assert tok.vocab_size == model.config.vocab_size
    assert (out / "curve.png").stat().st_size > 0
    # a new machine: an empty run directory resumes from the archive kept in the repository
    fresh = Iteration(str(tmp_path / "fresh"), "base", tasks, IterateConfig(rounds=2, per_task=4, batches=1,
                      sft_epochs=1), log=None, archive=archive)
    assert sorted(r.trace for r in fresh.db.records()) == sorted(r.trace for r in after)
    assert fresh.progress["done"] == prog["done"] and fresh.progress["curve"] == prog["curve"]


def test_eval_reports_framework_sums_and_speedups(tmp_path):
    from tlmir.evaluate import Evaluation, category, frameworks, markdown, representative_tasks
    reps = representative_tasks("held-out")
    cats = [category(t) for t in reps]
    assert len(cats) == len(set(cats)) >= 15 and "conv2d_bias_relu_3x3" in cats
    fws = frameworks([1, 3], "random:2,4")
    assert [f.label for f in fws] == ["tlm-1", "tlm-3", "random-2", "random-4"]
    tasks = [Task.from_op(ops.softmax(8, 64)), Task.from_op(ops.dense(16, 32, 64, bias=True))]
    ev = Evaluation(str(tmp_path), tasks, fws, sp=SMALL, log=None)
    ev.search()
    rep = ev.report(rounds=1)
    assert rep["complete_tasks"] == 2
    totals = rep["framework_seconds"]
    assert set(totals) == {"tlm-1", "tlm-3", "random-2", "random-4", "pytorch"}
    for r in rep["tasks"]:  # a longer prefix of the same run is never worse (same programs re-timed)
        assert r["wall_seconds"]["random-4"] >= r["wall_seconds"]["random-2"] > 0
    assert rep["speedup"]["tlm-1"]["tlm-1"] == 1.0
    assert rep["speedup"]["random-2"]["random-4"] == pytest.approx(totals["random-4"] / totals["random-2"])
    assert "| tlm-3 |" in markdown(rep)
    recs, n = ev._best(fws[3], tasks[0], top=3)  # the report confirms a run's 3 best of its first k
    assert n == 4 and len(recs) == 3 and [r.best for r in recs] == sorted(r.best for r in recs)
    with RecordDB(str(tmp_path / "random.db")) as db:  # the baseline is one run of 4
        assert db.count() == 8
    Evaluation(str(tmp_path), tasks, fws, sp=SMALL, log=None).search()  # resumed: nothing more
    with RecordDB(str(tmp_path / "random.db")) as db:
        assert db.count() == 8


def test_pytorch_is_timed_by_its_fastest_path():
    """The task report and the network report compare against PyTorch's default call or
    its oneDNN path, whichever is faster."""
    from tlmir.evaluate import pytorch_fastest
    assert pytorch_fastest({"torch": 2e-3, "onednn": 1e-3, "numpy": 5e-4}) == 1e-3
    assert pytorch_fastest({"torch": 1e-3, "onednn": None}) == 1e-3
    assert pytorch_fastest({"numpy": 1e-3}) is None


def test_network_report_and_retime(tmp_path):
    from tlmir.evaluate import format_network, network_report, retime_network
    db = str(tmp_path / "net.db")
    rep = network_report("conv-autoencoder-w16-l2", "tlm", 1, db=db, progress=False, sp=SMALL, passes=1)
    assert rep["measurements"] == len(rep["subgraphs"]) == 4
    t = rep["total"]
    assert 0 < t["tuned"] < float("inf") and t["default"] > 0 and t["pytorch"] > 0
    again = retime_network(rep, passes=1)  # the same programs, rebuilt from the DB and timed again
    assert [r["task"] for r in again["subgraphs"]] == [r["task"] for r in rep["subgraphs"]]
    assert [r["measurements"] for r in again["subgraphs"]] == [1] * 4 and again["passes"] == 1
    assert 0 < again["total"]["tuned"] < float("inf")
    assert "total (weighted)" in format_network(again)


def test_tlm_tunes_a_user_defined_te_operator():
    from tlmir import te
    A = te.placeholder((48, 40), name="Act")
    k = te.reduce_axis(40, name="r")
    S = te.compute((48,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="sumsq")
    task = Task("sum_of_squares", [A, S], reference=lambda a: [(a.astype("float64") ** 2).sum(1).astype("float32")])
    res = tune(task, trials=4, strategy="tlm", sp=SMALL, progress=False)
    assert res.measurements == 4 and res.failures == 0 and res.best_trace is not None
    a = task.random_inputs(1)[0]
    out = np.zeros(48, "float32")
    res.build()(a, out)
    np.testing.assert_allclose(out, (a.astype("float64") ** 2).sum(1), rtol=1e-4)


def test_eval_archive_restores_a_baseline_on_a_new_machine(tmp_path):
    from tlmir.evaluate import Evaluation, frameworks
    fws = frameworks([], "random:2,4")
    tasks = [Task.from_op(ops.softmax(8, 64)), Task.from_op(ops.add_relu((16, 16)))]
    archive = str(tmp_path / "archive")
    Evaluation(str(tmp_path / "a"), tasks, fws, sp=SMALL, log=None, archive=archive).search()
    assert sorted(os.listdir(archive)) == ["random.jsonl.xz", "random.wall.json"]
    with RecordDB(str(tmp_path / "a" / "random.db")) as db:
        first = [(r.task_key, r.trace, r.best) for r in db.records()]
    logs: list[str] = []
    fresh = Evaluation(str(tmp_path / "b"), tasks, fws, sp=SMALL, log=logs.append, archive=archive)
    n = len(first)
    assert any(f"{n} measurements restored" in m and f"{n} of them on this host's class" in m for m in logs)
    fresh.search()  # everything was restored: nothing measured again
    with RecordDB(str(tmp_path / "b" / "random.db")) as db:
        assert [(r.task_key, r.trace, r.best) for r in db.records()] == first
    assert fresh.wall["random.db"] == Evaluation(str(tmp_path / "a"), tasks, fws, log=None).wall["random.db"]


def test_iterate_restarts_a_fine_tuning_the_kill_interrupted(tmp_path, monkeypatch):
    tasks = [Task.from_op(ops.softmax(8, 64)), Task.from_op(ops.add_relu((16, 16)))]
    it = Iteration(str(tmp_path), "base", tasks, IterateConfig(rounds=2, per_task=2, batches=1), log=None)
    it.progress["done"] = [[0, t.key] for t in tasks]  # round 0 measured; its fine-tuning never finished
    assert it._last_complete_round() == 0
    started = []
    monkeypatch.setattr(it, "_start_sft", started.append)
    it.run()
    assert started[:2] == [0, 1]  # round 0's fine-tuning again, before round 1 is measured, then round 1's


def test_iterate_on_a_new_cpu_class_starts_from_a_model_and_keeps_other_demonstrations(tmp_path):
    """--start-model writes the rounds before the first fine-tuning; --extra-demos join the
    run's own demonstrations in every fine-tuning, but those of the run's own CPU class; an
    unreadable file is a one-line error."""
    from tlmir.lm.language import hw_prompt
    from tlmir.lm.registry import model_dir
    task = Task.from_op(ops.softmax(8, 64))
    extra = tmp_path / "other.jsonl"
    own = f"<s> v4 task {' '.join(hw_prompt(host_hardware()))} sketch 0 </s>"
    extra.write_text("".join(json.dumps({"key": "k", "task": "t", "seconds": 1.0, "sentence": s}) + "\n"
                             for s in ("<s> v4 x", own)))
    cfg = IterateConfig(rounds=1, per_task=2, batches=1, start_model="tlm", extra_demos=str(extra))
    it = Iteration(str(tmp_path / "run"), "base", [task], cfg, log=None)
    assert it.latest_model(0) == (model_dir("tlm"), -1) and it.base == model_dir("base")
    assert it.training_sentences() == (["<s> v4 x"], None)  # nothing measured yet: the extra ones
    _, trace = SearchSpace(task.outputs, it.hw, it.sp).sample(random.Random(0))
    it.db.append(Record(task.key, task.name, it.hw.key, trace.to_json(), [1e-5], strategy="iterate"))
    out = tmp_path / "demos.jsonl"  # what a run stopped between rounds would fine-tune on
    assert it.export_demonstrations(str(out)) == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["sentence"] == "<s> v4 x" and rows[1]["key"] == task.key and rows[1]["seconds"] == 1e-5
    assert [r["sentence"] for r in rows] == it.training_sentences()[0][::-1]
    with pytest.raises(TlmirError, match="missing.jsonl"):
        Iteration(str(tmp_path / "bad"), "base", [task],
                  IterateConfig(extra_demos=str(tmp_path / "missing.jsonl")), log=None)


def test_ranked_iterate_measures_the_evaluators_picks_plus_explored_ones(tmp_path):
    from types import SimpleNamespace

    from tlmir.lm.generate import Generator, Sampling
    from tlmir.lm.tlm_search import cached_model
    from tlmir.search.rankers import WorldRanker
    from tlmir.search.strategy import make_candidate
    task = Task.from_op(ops.dense(32, 48, 64, bias=True, act="gelu"))
    it = Iteration(str(tmp_path), "base", [task],
                   IterateConfig(rounds=1, per_task=4, batches=1, rank_per_slot=4, explore=1), log=None)
    space = SearchSpace(task.outputs, it.hw, it.sp)
    model, tok, _ = cached_model("base")
    written = Generator(model, tok, it.hw, Sampling(1.0), seed=3).generate(task, 16, 16, space)
    pool = {g.trace.to_json(): g for g in written if g.trace is not None}
    assert len(pool) > 5
    cands = [make_candidate(space, task.args, (g.schedule, g.trace)) for g in pool.values()]
    scores = WorldRanker(space, task).score(cands)
    order = [cands[i].key for i in np.argsort(-scores, kind="stable")]
    seen = {order[0]}  # measured in an earlier round: never picked again
    picks = it._pick(0, task, space, SimpleNamespace(generate=lambda *a: written), 4, seen)
    keys = [c.key for c in picks]
    assert keys[:3] == order[1:4]  # the evaluator's best three not measured before
    assert keys[3] in order[4:] and len(set(keys)) == 4  # one explored from the rest
    it.cfg = IterateConfig(rounds=1, per_task=4, batches=1, rank_per_slot=1)
    as_written = [k for k in pool if k not in seen][:4]
    assert [c.key for c in it._pick(0, task, space, SimpleNamespace(generate=lambda *a: written), 4, seen)] \
        == as_written
    it.db.close()
    with pytest.raises(TlmirError, match="rank_per_slot"):
        Iteration(str(tmp_path / "bad"), "base", [task], IterateConfig(rank_per_slot=0), log=None)


def test_iterate_gains_new_tasks_from_the_first_round_not_measured_in_full(tmp_path):
    from tlmir.lm.iterate import running_tasks
    a, b = Task.from_op(ops.softmax(8, 64)), Task.from_op(ops.add_relu((16, 16)))
    new = Task.from_op(ops.matmul(16, 16, 16))
    cfg = IterateConfig(rounds=3, per_task=2, batches=2)
    it = Iteration(str(tmp_path), "base", [a, b], cfg, log=None)
    it.progress["done"] = [[0, key] for key in it.progress["batches"][0]]  # round 0 measured
    it._save_progress()
    it.db.close()
    assert sorted(running_tasks(str(tmp_path))) == sorted([a.key, b.key])
    grown = Iteration(str(tmp_path), "base", [a, b, new], cfg, log=None)
    assert new.key in grown.progress["batches"][0] and grown.progress["joined"] == {new.key: 1}
    assert [0, new.key] in grown.progress["done"] and [2, new.key] not in grown.progress["done"]
    assert grown._last_complete_round() == 0  # round 0 stays complete; round 2 measures it
    grown.db.close()


def test_eval_report_leaves_out_a_run_that_was_never_made(tmp_path):
    from tlmir.evaluate import Evaluation, frameworks
    tasks = [Task.from_op(ops.softmax(8, 64)), Task.from_op(ops.add_relu((16, 16)))]
    ev = Evaluation(str(tmp_path), tasks, frameworks([1, 2], "random:4", ["tlm"]), log=None)
    rows = [{"task": t.name, "seconds": {"tlm-1": 2e-6, "random-4": 1e-6, "pytorch": 1e-6},
             "wall_seconds": {"tlm-1": 1.0, "random-4": 2.0}} for t in tasks]  # no tlm-2 run at all
    rep = ev.summarize(rows, 2)
    assert rep["complete_tasks"] == 2 and "tlm-2" not in rep["framework_seconds"]
    assert rep["speedup"]["random-4"]["tlm-1"] == pytest.approx(2.0)


def test_tlm_evolutionary_refines_in_growing_rounds_after_picks_from_a_large_pool():
    from tlmir.lm.tlm_search import TLMEvolutionarySearch
    task = Task.from_op(ops.matmul(64, 64, 64))
    sp = SearchParams(population=16, evolution_iters=1, tlm_hybrid_pool=24, tlm_first_round=2)
    search = TLMEvolutionarySearch(SearchSpace(task.outputs, host_hardware(), sp), task.args, task=task)
    assert [search.round_size(d) for d in (0, 2, 4, 8, 40, 100)] == [2, 2, 4, 8, 40, 64]
    written = []
    write = search.tlm._write
    search.tlm._write = lambda n, *a, **k: written.append(n) or write(n, *a, **k)
    first = search.propose(2)
    assert len(first) == 2 and written == [24]  # the evaluator's top 2 of 24 written
    search.update([(c, 1e-3 * (i + 1)) for i, c in enumerate(first)])
    second = search.propose(2)
    assert len(second) == 2 and not {c.key for c in second} & {c.key for c in first}


def _spin():
    while True:
        pass


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def _settles(pid: int, ok, seconds: float = 5.0) -> bool:
    deadline = time.time() + seconds
    while not ok(_state(pid)):
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states from /proc")
def test_fine_tuning_is_stopped_while_programs_are_timed(tmp_path):
    """A kernel timed beside a running process can wait whole scheduler ticks: the
    background fine-tuning is stopped while iterate measures and continued after."""
    import multiprocessing as mp
    it = Iteration(str(tmp_path / "it"), BASE_MODEL, [Task.from_op(ops.matmul(16, 16, 16))],
                   IterateConfig(rounds=1, per_task=1, batches=1), log=None)
    proc = mp.get_context("spawn").Process(target=_spin, daemon=True)
    proc.start()
    try:
        it._sft = (proc, 0)
        with it._sft_stopped():
            assert _settles(proc.pid, lambda s: s == "T")  # stopped, once out of any disk wait
        assert _settles(proc.pid, lambda s: s != "T")
    finally:
        proc.kill()
        proc.join()
        it.db.close()


def test_each_fine_tuned_model_borrows_the_start_models_sources_and_the_runs_programs(tmp_path):
    from tlmir.search.transfer_sources import SOURCES_FILE, SourceLibrary
    from tlmir.lm.registry import model_dir
    task = Task.from_op(ops.softmax(8, 64))
    it = Iteration(str(tmp_path / "run"), "base", [task], IterateConfig(rounds=1, start_model="tlm"), log=None)
    _, trace = SearchSpace(task.outputs, it.hw, it.sp).sample(random.Random(0))
    it.db.append(Record(task.key, task.name, it.hw.key, trace.to_json(), [1e-5], strategy="iterate"))
    it._write_sources(str(tmp_path / "sft"))
    got = SourceLibrary.load(str(tmp_path / "sft" / SOURCES_FILE))
    shipped = SourceLibrary.of_model(model_dir("tlm"))
    assert len(got) == len(shipped) + 1
    mine = [s for s in got.by_type["softmax"] if s.task_key == task.key]
    assert [(s.trace, s.hw_key) for s in mine] == [(trace.to_json(), it.hw.key)]
