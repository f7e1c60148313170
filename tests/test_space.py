"""The schedule space: sketch counts, sampling, exact trace round trips, mutation."""
import random

import numpy as np
import pytest

import tlmir
from tlmir import ops
from tlmir.build import reference_outputs
from tlmir.errors import ScheduleError
from tlmir.runtime.target import HardwareParams
from tlmir.schedule.decider import MutateDecider, RandomDecider, Trace, factorizations
from tlmir.schedule.space import SearchSpace

from schedutil import assert_program_matches, assert_replays_identically
from test_ops_schedules import CASES

HW2 = HardwareParams(cores=2)


@pytest.mark.parametrize("op, hw, count", [
    (ops.matmul(512, 512, 512), HW2, 3),                      # tile; cache-write fused at level 1, 2
    (ops.matmul(8, 8, 512), HardwareParams(cores=4), 5),      # + two rfactor variants
    (ops.matmul(8, 8, 512), HW2, 3),                          # 64 outputs > 16 x 2 cores: no rfactor
    (ops.conv2d_bias_relu(1, 64, 56, 56, 64, 3, 3, padding=1), HW2, 3),
    (ops.softmax(128, 3072), HW2, 9),
])
def test_ansor_sketch_counts(op, hw, count):
    """Ansor's counts, before the `pack` copies our rule appends (tests/test_pack.py)."""
    sketches = SearchSpace(op.outputs, hw).sketches
    assert len([s for s in sketches if not any(r == "pack" for _, r, _ in s.rules)]) == count


def test_factorizations_respect_innermost_limit():
    f = factorizations(12, 3, 4)
    assert all(a * b * c == 12 and c <= 4 for a, b, c in f)
    assert (1, 3, 4) in f and (1, 1, 12) not in f and len(set(f)) == len(f)


@pytest.mark.parametrize("name", sorted(CASES))
def test_random_traces_compile_match_and_round_trip(name):
    op = ops.make(name, **CASES[name])
    space = SearchSpace(op.outputs, HW2)
    rng = random.Random(7)
    ins = op.random_inputs(0)
    want = op.run_reference(*ins)
    for _ in range(4):
        sch, trace = space.sample(rng)
        assert_program_matches(sch, op, ins, want, trace)
        assert_replays_identically(space, trace, tlmir.lower(sch, op.args), op.args)


def test_mutation_changes_exactly_one_answer_when_possible():
    op = ops.matmul(64, 64, 64)
    space = SearchSpace(op.outputs, HW2)
    rng = random.Random(3)
    _, trace = space.sample(rng)
    q = trace.decisions[0][0]
    _, mutated = space.apply(trace.sketch, MutateDecider(trace, rng, question=q))
    diff = [a for a, b in zip(trace.decisions, mutated.decisions) if a != b]
    assert [d[0] for d in diff] == [q]


def test_mutations_pick_questions_by_kind_weight():
    from tlmir.schedule.decider import Trace
    trace = Trace(0, [("tile C.n", (1, 1, 1, 1)), ("tile C.i", (2, 2, 2, 2)), ("tile C.j", (4, 2, 2, 1)),
                      ("unroll C", 16), ("vec C", 1), ("at B.pack", "root")])
    rng = random.Random(0)
    picks = [MutateDecider(trace, rng, weights={"tile": 0.9, "unroll": 0.1}).target for _ in range(2000)]
    # vec and at weigh nothing; the extent-1 tile is never picked
    assert set(picks) == {"tile C.i", "tile C.j", "unroll C"}
    assert 0.86 < (picks.count("tile C.i") + picks.count("tile C.j")) / len(picks) < 0.94
    assert abs(picks.count("tile C.i") - picks.count("tile C.j")) < 150
    # no weights (or none that match): every question with something to mutate alike
    for w in (None, {"parallel": 1.0}):
        picks = {MutateDecider(trace, rng, weights=w).target for _ in range(300)}
        assert picks == {q for q, _ in trace.decisions} - {"tile C.n"}
    # the default space: Ansor's CPU weights
    space = SearchSpace(ops.matmul(64, 64, 64).outputs, HW2)
    assert dict(space.sp.mutation_weights)["tile"] == 0.9


def test_tile_mutation_moves_one_factor_between_two_levels():
    op = ops.matmul(64, 64, 64)
    space = SearchSpace(op.outputs, HW2)
    rng = random.Random(5)
    for _ in range(20):
        _, trace = space.sample(rng)
        q, old = next((q, a) for q, a in trace.decisions if q.startswith("tile "))
        _, mutated = space.apply(trace.sketch, MutateDecider(trace, rng, question=q))
        new = mutated.answers()[q]
        changed = [(x, y) for x, y in zip(old, new) if x != y]
        assert len(changed) == 2, (old, new)
        (a, b), (c, d) = changed
        assert a * c == b * d and (b % a == 0 or a % b == 0)


def test_bad_traces_are_rejected():
    op = ops.matmul(64, 64, 64)
    space = SearchSpace(op.outputs, HW2)
    _, trace = space.sample(random.Random(0))
    q, a = trace.decisions[0]
    bad = Trace(trace.sketch, [(q, (3, 3, 3, 3))] + trace.decisions[1:])
    with pytest.raises(ScheduleError, match="not a valid option"):
        space.replay(bad)
    with pytest.raises(ScheduleError, match="no answer"):
        space.replay(Trace(trace.sketch, trace.decisions[1:]))
    with pytest.raises(ScheduleError, match="sketch 99"):
        space.replay(Trace(99, trace.decisions))
    with pytest.raises(ScheduleError, match="unreadable trace"):
        Trace.from_json("{")


def test_sketch_filter_draws_only_the_matching_sketches():
    from tlmir.runtime.target import SearchParams
    op = ops.conv2d_nchw(1, 16, 8, 8, 16, 3, 3, padding=1)
    space = SearchSpace(op.outputs, HW2, SearchParams(sketch_filter="packconv"))
    packed = {i for i, s in enumerate(space.sketches) if "packconv" in str(s)}
    assert packed and len(packed) < len(space.sketches)
    rng = random.Random(0)
    drawn = [space.sample(rng)[1] for _ in range(40)]
    assert {t.sketch for t in drawn} == packed
    plain = SearchSpace(op.outputs, HW2)               # unfiltered: the same draws as before
    a, b = random.Random(3), random.Random(3)
    assert plain.sample(a)[1] == SearchSpace(op.outputs, HW2).sample(b)[1]
    assert plain.drawn == list(range(len(plain.sketches)))
    with pytest.raises(ScheduleError, match="sketch_filter 'nothing' matches none"):
        SearchSpace(op.outputs, HW2, SearchParams(sketch_filter="nothing"))
    with pytest.raises(ScheduleError, match="sketch_filter .* is not a regular expression"):
        SearchParams(sketch_filter="(")


def test_random_traces_of_workload_tasks_compile_and_match():
    from tlmir.workloads import split_tasks
    tasks = [t for t in split_tasks("held-out") if t.flops < 2e7][:6]
    assert len(tasks) >= 4
    rng = random.Random(11)
    for task in tasks:
        space = SearchSpace(task.outputs, HW2)
        sch, trace = space.sample(rng)
        ins = task.random_inputs(0)
        outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
        tlmir.build(sch, task.args)(*ins, *outs)
        for got, want in zip(outs, reference_outputs(task, ins)):
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3, err_msg=f"{task.name}: {trace}")


def test_stage_with_several_readers_can_be_computed_in_their_common_parent():
    """softmax's `exp` (read by `sum` and `out`) may be computed per row inside `out` once
    `sum` is attached there (Ansor's GetSingleConsumerId): one pass, one parallel loop."""
    op = ops.softmax(64, 32)
    space = SearchSpace(op.outputs, HW2)
    rng = random.Random(3)
    ins = op.random_inputs(0)
    want = op.run_reference(*ins)
    seen = 0
    for _ in range(400):
        sch, trace = space.sample(rng)
        answers = dict(trace.decisions)
        if answers.get("at sum", "").startswith("out.") and answers.get("at exp", "").startswith("out."):
            seen += 1
            assert_program_matches(sch, op, ins, want, trace, atol=1e-5)
            if seen == 5:
                break
    assert seen == 5


@pytest.mark.parametrize("sketch", [20, 22, 26])  # layernorm: var rfactor'ed (0 / 1) or plain
def test_producer_of_an_attached_chain_is_computed_per_row_correctly(sketch):
    """layernorm's `mean` is read by `var.rf` (attached in `var`, attached in `out`) and by
    `out`: it may be computed at `out`'s loops; every such program must still be right."""
    op = ops.layernorm(16, 64)
    space = SearchSpace(op.outputs, HW2)
    rng = random.Random(sketch)
    ins = op.random_inputs(0)
    want = op.run_reference(*ins)
    seen = 0
    for _ in range(300):
        sch, trace = space.apply(sketch, RandomDecider(rng))
        if not dict(trace.decisions).get("at mean", "root").startswith("out."):
            continue
        seen += 1
        assert_program_matches(sch, op, ins, want, trace)
        if seen == 4:
            break
    assert seen == 4
