"""Novel tasks: drawn deterministically, in no workload, and every one a task the space
schedules into a program that computes what its definition says."""
import random

import numpy as np

from tlmir.build import reference_outputs
from tlmir.ir.dag import ComputeDAG
from tlmir.lm.novel_tasks import OddExtents, extent, grouped_conv, novel_tasks, odd_shape_tasks
from tlmir.runtime.backend import compile_func
from tlmir.runtime.measure import check_outputs
from tlmir.schedule.decider import RandomDecider
from tlmir.schedule.lower import lower
from tlmir.schedule.space import SearchSpace
from tlmir.workloads import split_tasks


def _lowers_compiles_and_matches(task, rng: random.Random) -> None:
    """A random program of a random sketch of `task` computes what its definition says."""
    space = SearchSpace(task.outputs)
    kernel = compile_func(lower(space.apply(rng.randrange(len(space.sketches)),
                        RandomDecider(rng))[0], task.args))
    ins = task.random_inputs(0)
    outs = [np.zeros(t.shape, t.dtype) for t in task.outputs]
    kernel(*ins, *outs)
    assert not check_outputs(outs, reference_outputs(task, ins), 1e-3, 1e-3), task.name


def test_extents_stay_in_range_and_are_not_all_powers_of_two():
    rng = random.Random(0)
    drawn = [extent(rng, 8, 1000) for _ in range(400)]
    assert all(8 <= n <= 1000 for n in drawn)
    assert any(n & (n - 1) for n in drawn) and any(not n & (n - 1) for n in drawn)


def test_novel_tasks_are_deterministic_new_and_varied():
    tasks = novel_tasks(40, seed=5)
    assert [t.key for t in tasks] == [t.key for t in novel_tasks(40, seed=5)]
    assert [t.key for t in tasks] != [t.key for t in novel_tasks(40, seed=6)]
    assert len({t.key for t in tasks}) == 52  # 40 mixed, 40 // 8 grouped convs, 5 feature maps, 2 rows
    known = {t.key for split in ("train", "held-out") for t in split_tasks(split)}
    assert not known & {t.key for t in tasks}
    names = {t.name for t in tasks}
    assert {"novel_te_chain", "novel_te_reduce", "novel_te_epilogue"} <= names
    assert len(names) >= 10
    for t in tasks:  # every input is read: a task's arguments are its DAG's placeholders
        assert {a.op for a in t.inputs} <= {f.op for f in ComputeDAG(t.outputs).stages}, t.name
    library = [t for t in novel_tasks(200, seed=0) if not t.name.startswith("novel_te_")]
    assert any(t.name.startswith("matmul_m1_") for t in library)  # decoder steps are drawn
    avoided = novel_tasks(5, seed=5, avoid=frozenset({tasks[0].key}))
    assert tasks[0].key not in {t.key for t in avoided}


def test_grouped_convolutions_come_after_the_mixed_draws_and_vary_their_group_width():
    mixed = novel_tasks(80, seed=0)[:80]
    assert [t.key for t in novel_tasks(80, seed=0)[:80]] == [t.key for t in mixed]
    drawn = novel_tasks(160, seed=0)
    assert [t.key for t in drawn[:80]] == [t.key for t in mixed]
    grouped, maps, rows = drawn[160:180], drawn[180:200], drawn[200:]
    assert len(grouped) == 20 and len(maps) == 20 and len(rows) == 10
    assert all(t.name.startswith("add") and len(t.outputs[0].shape) == 4 for t in maps)
    assert len({t.outputs[0].shape[1] for t in maps}) >= 10
    assert all(t.inputs[0].shape[0] == 1 for t in rows) and len({t.name.split("_")[0] for t in rows}) >= 3
    assert all("_g" in t.name and t.name.startswith("conv2d") for t in grouped)
    widths = {t.inputs[1].shape[1] for t in grouped}  # the weight's channels per group
    assert len(widths) >= 4
    rng = random.Random(3)
    op = grouped_conv(rng)
    assert op.params["groups"] > 1 and op.params["C"] % op.params["groups"] == 0


def test_novel_te_programs_grouped_convolutions_and_feature_maps_lower_compile_and_match():
    rng = random.Random(1)
    tasks = [t for t in novel_tasks(30, seed=2) if t.name.startswith("novel_te_")
             and all(np.prod(x.shape) <= 1 << 16 for x in t.args)][:4]
    assert tasks
    drawn = novel_tasks(240, seed=0)
    tasks += [t for t in drawn[240:270] if t.flops < 3e6][:2]  # grouped convolutions
    small = [t for t in drawn[270:] if np.prod(t.outputs[0].shape) < 1 << 16]
    tasks += [t for t in small if t.name.startswith("add")][:2]  # feature maps
    tasks += [t for t in small if len(t.outputs[0].shape) <= 2][:2]  # one-row ops
    assert len(tasks) >= 10
    for task in tasks:
        _lowers_compiles_and_matches(task, rng)


def test_odd_extents_reach_every_number_word_and_beyond():
    rng = OddExtents(0)
    drawn = [extent(rng, 8, 4096) for _ in range(4000)]
    assert all(8 <= n <= 4096 for n in drawn)
    assert any(n > 1024 for n in drawn)
    seen = set(drawn)
    assert 997 in seen or 1021 in seen or 1019 in seen  # a prime no product of small primes is
    assert len({n for n in seen if n <= 1024}) > 700  # most number words up to 1024 turn up


def test_odd_shape_tasks_are_deterministic_new_and_hold_numbers_novel_tasks_never_draw():
    tasks = odd_shape_tasks(60, seed=3)
    assert [t.key for t in tasks] == [t.key for t in odd_shape_tasks(60, seed=3)]
    assert len({t.key for t in tasks}) == 60
    known = {t.key for split in ("train", "held-out") for t in split_tasks(split)}
    assert not known & {t.key for t in tasks}

    def rough(n: int) -> bool:  # a factor above 7: novel_tasks never draws such an extent
        for p in (2, 3, 5, 7):
            while n % p == 0:
                n //= p
        return n > 1
    assert any(rough(d) for t in tasks for x in t.args for d in x.shape)
    rng = random.Random(0)
    for task in [t for t in tasks if t.flops < 2e6][:3]:
        _lowers_compiles_and_matches(task, rng)
