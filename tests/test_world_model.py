"""The world-model evaluator: it learns a ranking, stores as safetensors, refuses bad files."""
import json
import os
import random

import numpy as np
import pytest

from tlmir import ops
from tlmir.errors import ModelError
from tlmir.lm.registry import BASE_MODEL, TOKENIZER_FILE
from tlmir.lm.language import trace_to_sentence
from tlmir.lm.tokenizer import Tokenizer
from tlmir.runtime.records import Record
from tlmir.runtime.target import HardwareParams, host_hardware
from tlmir.runtime.task import Task
from tlmir.schedule.space import SearchSpace
from tlmir.search.world_model import WorldModelConfig, split_sentence
from tlmir.search.world_train import (Evaluator, Program, drop_stale, programs_from_records, ranking_metrics,
                                      train_evaluator)

TOK = Tokenizer.load(os.path.join(BASE_MODEL, TOKENIZER_FILE))
HW = HardwareParams("cpu", "avx512", 2, 16, 32, 1024)


def _toy_programs(n: int = 96):
    """Random programs of two matmuls whose 'latency' is a known function of the decisions:
    faster with a larger unroll and with a vectorized inner loop."""
    progs = []
    for task in (Task.from_op(ops.matmul(64, 64, 64)), Task.from_op(ops.matmul(32, 128, 64))):
        space, rng = SearchSpace(task.outputs, HW), random.Random(0)
        seen = set()
        while sum(p.task_key == task.key for p in progs) < n:
            _, trace = space.sample(rng)
            sentence = trace_to_sentence(task, HW, trace)
            if sentence in seen:
                continue
            seen.add(sentence)
            answers = {a[0]: int(a[-1]) for a in split_sentence(sentence)[1] if a[0] in ("unroll", "vec")}
            unroll, vec = answers.get("unroll", 0), answers.get("vec", 0)
            progs.append(Program(task.key, sentence, 1.0 / (1 + np.log2(1 + unroll) + 3 * vec)))
    return progs


def test_sentence_splits_into_prompt_and_one_action_per_decision():
    task = Task.from_op(ops.matmul(64, 64, 64))
    _, trace = SearchSpace(task.outputs, HW).sample(random.Random(1))
    prompt, actions = split_sentence(trace_to_sentence(task, HW, trace))
    assert prompt[0] == "<s>" and "hw" in prompt and "sketch" not in prompt
    assert actions[0][0] == "sketch" and len(actions[0]) == 2
    assert all(a[0] in ("tile", "at", "parallel", "vec", "unroll") for a in actions[1:])
    assert all("=" in a for a in actions[1:])


def test_ranking_loss_falls_and_the_known_order_is_learned():
    progs = _toy_programs()
    untrained = train_evaluator(progs, TOK, WorldModelConfig(TOK.vocab_size, d_model=32), steps=1, lr=1e-9)
    before = ranking_metrics(progs, untrained.score([p.sentence for p in progs]))
    logs = []
    ev = train_evaluator(progs, TOK, WorldModelConfig(TOK.vocab_size, d_model=32), steps=150,
                         tasks_per_batch=2, per_task=32, lr=3e-3, log=logs.append)
    losses = [float(line.split("loss ")[1].split()[0]) for line in logs]
    assert losses[-1] < 0.6 * losses[0]
    after = ranking_metrics(progs, ev.score([p.sentence for p in progs]))
    assert after["pairwise_accuracy"] >= max(0.85, before["pairwise_accuracy"] + 0.1)
    assert after["kendall_tau"] > 0.7


def test_evaluator_round_trips_through_safetensors_and_refuses_bad_files(tmp_path):
    progs = _toy_programs(16)
    ev = train_evaluator(progs, TOK, WorldModelConfig(TOK.vocab_size, d_model=16, transition=False), steps=3)
    ev.save(str(tmp_path / "ev"))
    assert sorted(os.listdir(tmp_path / "ev")) == ["config.json", "model.safetensors", "tokenizer.json"]
    again = Evaluator.load(str(tmp_path / "ev"))
    assert again.model.config.transition is False
    sentences = [p.sentence for p in progs]
    np.testing.assert_allclose(again.score(sentences), ev.score(sentences), rtol=1e-5, atol=1e-6)
    weights = tmp_path / "ev" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    with pytest.raises(ModelError, match="model.safetensors is missing or does not match"):
        Evaluator.load(str(tmp_path / "ev"))
    ev.save(str(tmp_path / "ev"))
    cfg = json.loads((tmp_path / "ev" / "config.json").read_text())
    (tmp_path / "ev" / "config.json").write_text(json.dumps({**cfg, "vocab_size": 7}))
    with pytest.raises(ModelError, match=f"tokenizer has {TOK.vocab_size} words, the model 7"):
        Evaluator.load(str(tmp_path / "ev"))
    (tmp_path / "ev" / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot read config.json"):
        Evaluator.load(str(tmp_path / "ev"))
    with pytest.raises(ModelError, match="does-not-exist"):
        Evaluator.load(str(tmp_path / "does-not-exist"))


def test_programs_from_records_replay_each_machine_and_keep_failures():
    task = Task.from_op(ops.matmul(32, 32, 32))
    _, trace = SearchSpace(task.outputs, host_hardware()).sample(random.Random(0))
    hw = host_hardware()
    recs = [Record(task.key, task.name, hw.key, trace.to_json(), [1e-3]),
            Record(task.key, task.name, hw.key, trace.to_json(), error="wrong", error_kind="wrong"),
            Record("other", "other", hw.key, trace.to_json(), [1e-3])]
    progs = programs_from_records(recs, {task.key: task})
    assert [p.seconds for p in progs] == [1e-3, None]
    assert progs[0].sentence == trace_to_sentence(task, hw, trace)


def test_one_task_measured_on_two_cpu_classes_is_ranked_within_each():
    """An AVX2 host's latencies are not compared with an AVX-512 host's: each class's best
    program of the task gets throughput 1, and ranking metrics count two groups."""
    from tlmir.search.world_train import normalized_throughput
    task = Task.from_op(ops.matmul(32, 32, 32))
    avx2 = HardwareParams("cpu", "avx2", 2, 8, 32, 512)
    space = SearchSpace(task.outputs, HW)
    traces = [space.sample(random.Random(i))[1].to_json() for i in range(2)]
    recs = [Record(task.key, task.name, HW.key, traces[0], [1e-3]), Record(task.key, task.name, HW.key, traces[1], [2e-3]),
            Record(task.key, task.name, avx2.key, traces[0], [4e-3]), Record(task.key, task.name, avx2.key, traces[1], [8e-3])]
    progs = programs_from_records(recs, {task.key: task}, with_features=False)
    assert [p.hw_key for p in progs] == [HW.key, HW.key, avx2.key, avx2.key]
    np.testing.assert_allclose(normalized_throughput(progs), [1.0, 0.5, 1.0, 0.5])
    assert ranking_metrics(progs, np.array([2.0, 1.0, 2.0, 1.0]))["tasks"] == 2


def test_stale_records_of_matching_tasks_are_left_out():
    from tlmir.argtypes import stale_rule
    rule = stale_rule("_s2_@2026-11-25T08:04Z")
    t = rule[1]
    recs = [Record("a", "conv2d_1x3x224x224_7x7_s2_p3", "hw", "{}", [1e-3], timestamp=t - 1),
            Record("a", "conv2d_1x3x224x224_7x7_s2_p3", "hw", "{}", [1e-3], timestamp=t + 1),
            Record("b", "conv2d_1x3x224x224_3x3_s1_p1", "hw", "{}", [1e-3], timestamp=t - 1),
            Record("a", "conv2d_1x3x224x224_7x7_s2_p3", "hw", "{}", [1e-3]),
            Record("c", "max_pool2d_1x64x112x112_3_s2_p1", "hw", "{}", [1e-3], timestamp=t - 1),
            Record("c", "max_pool2d_1x64x112x112_3_s2_p1", "hw2", "{}", [1e-3], timestamp=t + 1)]
    # c was measured again on another CPU class only: its old records here stay
    assert drop_stale(recs, [rule]) == recs[1:]
    assert drop_stale(recs, []) == recs


def test_training_resumes_from_its_checkpoint_as_if_never_killed(tmp_path, monkeypatch):
    from tlmir.search import world_train
    progs = _toy_programs(24)
    cfg = WorldModelConfig(TOK.vocab_size, d_model=16)
    whole = train_evaluator(progs, TOK, cfg, steps=6, tasks_per_batch=2, per_task=8)
    ckpt = str(tmp_path / "ckpt")
    save = world_train._save_checkpoint

    def save_then_die(directory, ev, opt, run):
        save(directory, ev, opt, run)
        if run["step"] == 4:
            raise KeyboardInterrupt  # killed right after the checkpoint of step 4
    monkeypatch.setattr(world_train, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_evaluator(progs, TOK, cfg, steps=6, tasks_per_batch=2, per_task=8, checkpoint=ckpt, checkpoint_every=2)
    logs = []
    resumed = train_evaluator(progs, TOK, cfg, steps=6, tasks_per_batch=2, per_task=8, checkpoint=ckpt,
                              checkpoint_every=2, log=logs.append)
    assert any("resumed from" in line and "step 4" in line for line in logs)
    sentences = [p.sentence for p in progs]
    np.testing.assert_allclose(resumed.score(sentences), whole.score(sentences), rtol=1e-4, atol=1e-5)
    with pytest.raises(ModelError, match="trained with other settings"):
        train_evaluator(progs, TOK, cfg, steps=9, tasks_per_batch=2, per_task=8, checkpoint=ckpt)
