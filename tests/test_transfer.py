"""Schedule transfer: a program of one task rewritten for another task of the same op."""
import math
import random

import pytest

from tlmir import ops
from tlmir.errors import ScheduleError
from tlmir.runtime.target import HardwareParams
from tlmir.schedule.decider import RandomDecider, ReplayDecider, Trace, factorizations
from tlmir.schedule.space import SearchSpace
from tlmir.search.transfer import nearest_answer, replay, tile_deviation, tile_distance

from schedutil import assert_program_matches

HW2 = HardwareParams(cores=2)


def test_nearest_tile_keeps_the_inner_levels():
    # extent 48 -> 64: the inner levels stay, the outermost takes the change
    src = (3, 2, 1, 8)
    got = nearest_answer(src, list(factorizations(64, 4, 64)))
    assert got == (4, 2, 1, 8)
    assert tile_distance(got, src) == pytest.approx(abs(2 - 1.5849625), rel=1e-6)


def test_tile_deviation_counts_the_inner_levels_only():
    assert tile_deviation((4, 2, 1, 8), (3, 2, 1, 8)) == 0.0  # the outermost absorbs the extent
    assert tile_deviation((3, 1, 1, 16), (3, 1, 1, 17)) == pytest.approx(4 * math.log2(17 / 16))
    assert tile_deviation(64, 48) == 0.0 and tile_deviation((1, 4), (1, 4)) == 0.0


def test_a_replay_of_its_own_task_deviates_nowhere():
    op = ops.dense(32, 48, 24)
    space = SearchSpace(op.outputs, HW2)
    _, trace = space.sample(random.Random(5))
    again = replay(space, trace, str(space.sketches[trace.sketch]))
    assert again.trace.to_json() == trace.to_json() and again.deviation == 0.0 and again.moved == ()
    other = SearchSpace(ops.dense(34, 51, 17).outputs, HW2)  # primes: inner tiles rarely survive
    moved = [replay(other, space.apply(k, RandomDecider(random.Random(k)))[1], str(sk))
             for k, sk in enumerate(space.sketches)]
    assert any(m is not None and m.deviation > 0 for m in moved)
    for m in moved:  # a question is named moved exactly where its tile moved
        if m is not None:
            assert (m.deviation > 0) == bool(m.moved)
            assert set(m.moved) <= {q for q, _ in m.trace.decisions}


def test_nearest_answer_of_each_kind():
    assert nearest_answer((1, 4), [(1, 4), (2, 2)]) == (1, 4)
    assert nearest_answer(48, [0, 16, 64, 512]) == 64
    assert nearest_answer("C.i.outer.j.outer.fused", ["root", "C.i.outer"]) == "C.i.outer"
    with pytest.raises(ScheduleError, match="no answer near"):
        nearest_answer((2, 3), [0, 1])


@pytest.mark.parametrize("source, target", [
    (ops.dense(32, 48, 24, bias=True, act="gelu"), ops.dense(20, 64, 40, bias=True, act="gelu")),
    (ops.conv2d_bias_relu(1, 8, 10, 10, 16, 3, 3, padding=1), ops.conv2d_bias_relu(1, 4, 12, 12, 32, 3, 3, padding=1)),
])
def test_transferred_programs_compile_and_match_numpy(source, target):
    """Every sketch's random programs of one shape, rewritten for another, compute what
    numpy computes there, and ask the target's questions only."""
    src_space, dst_space = SearchSpace(source.outputs, HW2), SearchSpace(target.outputs, HW2)
    ins = target.random_inputs(0)
    want = target.run_reference(*ins)
    rng = random.Random(3)
    moved = 0
    for k, sketch in enumerate(src_space.sketches):
        _, trace = src_space.apply(k, RandomDecider(rng))
        got = replay(dst_space, trace, str(sketch))
        if got is None:
            continue
        sch, new = got.schedule, got.trace
        assert str(dst_space.sketches[new.sketch]) == str(sketch)
        assert_program_matches(sch, target, ins, want, new)
        moved += 1
    assert moved == len(src_space.sketches)


def test_a_program_transfers_to_its_own_task_unchanged():
    op = ops.dense(32, 48, 24, bias=True, act="gelu")
    space = SearchSpace(op.outputs, HW2)
    _, trace = space.sample(random.Random(5))
    again = replay(space, trace, str(space.sketches[trace.sketch])).trace
    assert again.to_json() == trace.to_json()


def test_no_transfer_without_a_matching_sketch():
    op = ops.dense(32, 48, 24, bias=True, act="gelu")
    space = SearchSpace(op.outputs, HW2)
    assert replay(space, Trace(0, []), "X:tile, Y:inline") is None


def test_a_parallel_batch_loop_moved_to_batch_one_still_runs_in_parallel():
    """The batch-4 program parallelizes its batch loop alone (`parallel relu` = 1); on
    batch 1 that loop has one iteration, so the transfer fuses the channels in too."""
    source = SearchSpace(ops.add_relu((4, 256, 14, 14)).outputs, HW2)
    trace = Trace(0, [("tile relu.i3", (7, 2)), ("parallel relu", 1), ("vec relu", 1), ("unroll relu", 512)])
    source.apply(0, ReplayDecider(trace))  # a valid program of the source
    target = ops.add_relu((1, 1024, 14, 14))
    got = replay(SearchSpace(target.outputs, HW2), trace, str(source.sketches[0]))
    sch, moved = got.schedule, got.trace
    assert moved.answers()["parallel relu"] == 2
    assert moved.answers()["tile relu.i3"] == (7, 2)
    ins = target.random_inputs(0)
    assert_program_matches(sch, target, ins, target.run_reference(*ins), moved)
    # on batch 2 the batch loop is parallel work enough for 2 cores: replayed as it was
    kept = replay(SearchSpace(ops.add_relu((2, 1024, 14, 14)).outputs, HW2), trace, str(source.sketches[0])).trace
    assert kept.answers()["parallel relu"] == 1
