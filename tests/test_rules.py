"""Derivation rules are chosen by the target's kind: a rule set plugs in with one entry,
and SearchSpace, sampling and replay go through it."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from tlmir import ops
from tlmir.build import build
from tlmir.errors import ScheduleError
from tlmir.lm.language import QUESTION_KEYWORDS
from tlmir.runtime.target import HardwareParams, SearchParams
from tlmir.schedule import create_schedule
from tlmir.schedule.rules import RULE_SETS, Sketch, question_keywords, rule_set
from tlmir.schedule.space import SearchSpace

HW = HardwareParams(cores=2, l1_kb=32, l2_kb=1024)


class OneLoopRules:
    """A toy target kind: one sketch, which asks whether to parallelize the outermost loop."""
    kind = "toy"
    questions = ("parallel",)

    def sketches(self, outputs, hw, sp):
        return [Sketch((("all", "default", None),))]

    def build(self, outputs, sketch, ask, hw, sp):
        s = create_schedule(outputs)
        st = s[outputs[0]]
        if ask.choice(f"parallel {st.name}", [0, 1]):
            st.parallel(st.leaf_iter_vars[0])
        return s


def test_the_cpu_rule_set_is_the_default_and_asks_the_language_s_questions():
    assert rule_set("cpu") is RULE_SETS["cpu"]
    assert question_keywords() == QUESTION_KEYWORDS == ("tile", "at", "parallel", "vec", "unroll")
    op = ops.matmul(64, 64, 64)
    space = SearchSpace(op.outputs, HW)
    assert space.rules is RULE_SETS["cpu"] and len(space.sketches) > 1


def test_an_unknown_target_kind_is_a_clear_error():
    with pytest.raises(ScheduleError, match="no derivation rules for target kind 'tpu'.*cpu"):
        SearchSpace(ops.matmul(8, 8, 8).outputs, dataclasses.replace(HW, kind="tpu"))


def test_a_new_rule_set_plugs_in_with_one_entry(monkeypatch):
    monkeypatch.setitem(RULE_SETS, "toy", OneLoopRules())
    op = ops.add((4, 64))
    space = SearchSpace(op.outputs, dataclasses.replace(HW, kind="toy"), SearchParams())
    assert len(space.sketches) == 1
    sch, trace = space.sample(random.Random(1))
    again = space.replay(trace)
    ins = op.random_inputs(0)
    for s in (sch, again):
        out = np.zeros(op.outputs[0].shape, "float32")
        build(s, op.args)(*ins, out)
        np.testing.assert_allclose(out, op.reference(*ins)[0], rtol=1e-6)
    assert trace.sketch == 0 and [q for q, _ in trace.decisions] == ["parallel add"]


@pytest.mark.parametrize("op", [ops.matmul(64, 48, 32), ops.conv2d_nchw(1, 16, 14, 14, 32, 3, 3, padding=1),
                                ops.add((1, 96, 14, 14))], ids=["matmul", "conv", "add"])
def test_parallel_options_follow_the_sketch_not_the_tiles_or_the_cores(op):
    """A model writing a sentence can list a `parallel` question's options from the sketch
    and the compute locations alone: random tile answers and any core count offer the same
    fuse depths, and the innermost loop (the one to vectorize) is never fused."""
    from tlmir.lm.language import trace_options
    from tlmir.schedule.decider import RandomDecider
    rng = random.Random(0)
    offered: dict = {}
    for hw in (HW, HardwareParams(cores=64)):
        space = SearchSpace(op.outputs, hw)
        for _ in range(40):
            sch, trace = space.apply(rng.randrange(len(space.sketches)), RandomDecider(rng))
            places = tuple(a for q, a in trace.decisions if q.startswith("at "))
            for q, opts in trace_options(op.outputs, hw, trace).items():
                if q.startswith("parallel "):
                    offered.setdefault((trace.sketch, places, q), set()).add(tuple(opts))
            for st in sch.stages:
                leaves = st.leaf_iter_vars
                assert len(leaves) < 2 or st.iter_kind.get(leaves[-1]) != "parallel", (trace, st.name)
    assert offered and all(len(v) == 1 for v in offered.values()), offered


def test_a_trace_that_fused_the_innermost_loop_still_replays_and_is_written():
    """Fusing every loop of a small stage was offered before the options followed the
    sketch: such a recorded trace replays, and its sentence lists the answer it gave."""
    from tlmir import te
    from tlmir.lm.language import sentence_to_trace, trace_to_sentence
    from tlmir.schedule.decider import RandomDecider, Trace
    A = te.placeholder((4, 6), name="A")
    B = te.compute((4, 6), lambda i, j: A[i, j] * 2.0, name="B")
    space = SearchSpace([B], HW)
    drawn = {space.apply(0, RandomDecider(s))[1].answers()["parallel B"] for s in range(60)}
    trace = Trace(0, [("tile B.j", (6, 1)), ("parallel B", 3), ("unroll B", 0)])
    sch = space.replay(trace)
    leaves = sch.stages[-1].leaf_iter_vars
    assert drawn == {1, 2} and len(leaves) == 1 and sch.stages[-1].iter_kind[leaves[0]] == "parallel"
    sentence = trace_to_sentence([B], HW, trace)
    assert " parallel B 1 2 3 = 3 " in sentence and sentence_to_trace(sentence) == trace
