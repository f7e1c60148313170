"""The `pack` derivation rule: dense's N×K weight read through a K×N packed copy, and
matmul's B read through a K×(tile width) panel.

Sketch-count / id stability, the layout-permuting cache_read, and the property that random
traces of the new sketches lower, compile and match numpy (and replay exactly)."""
import random

import pytest

import tlmir
from tlmir import ops
from tlmir.runtime.target import HardwareParams
from tlmir.schedule.decider import RandomDecider
from tlmir.schedule.packing import pack_layouts
from tlmir.schedule.space import SearchSpace

from schedutil import (assert_hand_schedule_matches_and_replays, assert_program_matches,
                       assert_replays_identically)

HW2 = HardwareParams(cores=2)


def test_rule_fires_on_inputs_indexed_by_the_vectorized_axis_and_a_reduction():
    op = ops.dense(8, 24, 16, bias=True, act="gelu")
    d = op.outputs[0].op
    while d.name != "D":
        d = d.inputs()[0].op
    assert pack_layouts(d) == [("W", (1, 0))]           # N x K: transposed
    assert pack_layouts(ops.matmul(8, 8, 8).outputs[0].op) == [("B", (0, 1))]  # a K x N panel
    bmm = ops.make("batch_matmul", B=2, M=4, N=4, K=4).outputs[0].op
    assert pack_layouts(bmm) == [("B", (0, 1, 2))]
    for other in (ops.softmax(4, 8), ops.conv2d_nchw(1, 2, 6, 6, 2, 3, 3, padding=1)):
        assert all(not pack_layouts(t.op) for t in other.outputs)


@pytest.mark.parametrize("op, count", [
    (ops.dense(128, 3072, 768, bias=True, act="gelu"), 6),  # tile_fuse 1, 2, tile; + packed W
    (ops.dense(64, 64, 64), 6),                               # cache_write 1, 2, tile; + packed W
    (ops.matmul(64, 64, 64), 6),                              # the same; + a panel of B
])
def test_pack_sketches_are_appended(op, count):
    sketches = SearchSpace(op.outputs, HW2).sketches
    assert len(sketches) == count
    half = count // 2
    packed_input, reader = ("B", "C") if op.family.startswith("matmul") else ("W", "D")
    for plain, packed in zip(sketches[:half], sketches[half:]):
        assert packed.rules[:len(plain.rules)] == plain.rules
        assert packed.rules[len(plain.rules):] == ((packed_input, "pack", reader),)


def test_cache_read_layout_computes_the_same_and_replays():
    op = ops.dense(6, 10, 8)
    X, W = op.inputs
    (D,) = op.outputs
    s = tlmir.create_schedule(D)
    WP = s.cache_read(W, "global", [D], layout=[1, 0])
    assert WP.shape == (8, 10) and s[WP].name == "W.pack"
    s[WP].compute_at(s[D], D.op.axis[0])
    assert_hand_schedule_matches_and_replays(s, op)


@pytest.mark.parametrize("name, shape", [
    ("dense", dict(M=8, N=24, K=16, bias=True, act="gelu")),
    ("dense", dict(M=6, N=40, K=12)),                      # cache_write sketches
    ("dense", dict(M=5, N=36, K=20, bias=True)),           # odd extents
    ("matmul", dict(M=7, N=48, K=20)),                     # panels of B
    ("batch_matmul", dict(B=3, M=5, N=32, K=12)),
])
def test_random_pack_traces_compile_match_and_round_trip(name, shape):
    op = ops.make(name, **shape)
    space = SearchSpace(op.outputs, HW2)
    first = len(space.sketches) // 2
    packed = "W.pack" if name == "dense" else "B.pack"
    rng = random.Random(11)
    ins = op.random_inputs(0)
    want = op.run_reference(*ins)
    for n in range(8):
        sid = first + n % (len(space.sketches) - first)
        sch, trace = space.apply(sid, RandomDecider(rng))
        assert any(st.name == packed for st in sch.stages)
        assert_program_matches(sch, op, ins, want, trace)
        assert_replays_identically(space, trace, tlmir.lower(sch, op.args), op.args)


def test_pack_can_sit_outside_the_tile_stage():
    """`at W.pack` offers the consumer's loops (D is attached inside gelu), outermost first,
    so a panel can be packed once per outer j tile rather than once per (i, j) tile."""
    from tlmir.schedule.decider import RandomDecider

    class Record(RandomDecider):
        def _decide(self, question, options):
            if question == "at W.pack":
                self.at_options = options
            return super()._decide(question, options)

    from tlmir.runtime.target import SearchParams
    op = ops.dense(16, 64, 32, bias=True, act="gelu")
    space = SearchSpace(op.outputs, HW2, SearchParams(pack_max_repeat=10**9))  # every loop offered
    sid = next(i for i, s in enumerate(space.sketches) if str(s).endswith("D:tile_fuse2, W:packD"))
    ask = Record(3)
    space.apply(sid, ask)
    opts = ask.at_options
    assert opts[0] == "root" and "inline" not in opts
    assert opts[1].startswith("gelu.") and any(o.startswith("D.") for o in opts)
    assert opts.index(next(o for o in opts if o.startswith("gelu."))) < opts.index(
        next(o for o in opts if o.startswith("D.")))


def dense_with_tiles(i_outer: int):
    """gelu(X W^T + b) 16x64x32 by hand: gelu's loops (i tiles . j tiles fused, 2-row i
    tiles, rows, j) with D computed per 2-row tile and W read through W.pack[k, j]."""
    op = ops.dense(16, 64, 32, bias=True, act="gelu")
    out = op.outputs[0]
    s = tlmir.create_schedule(out)
    s.stage("bias").compute_inline()
    D = s.stage("D")
    i, j = out.op.axis
    io, ii = s[out].split(i, factor=16 // i_outer)
    jo, ji = s[out].split(j, factor=16)
    iio, iii = s[out].split(ii, factor=2)
    s[out].reorder(io, jo, iio, iii, ji)
    fused = s[out].fuse(io, jo)
    D.compute_at(s[out], iio)
    pack = s.cache_read(op.inputs[1], "global", [D.op.output()], layout=[1, 0])
    return s, pack, fused, iio


@pytest.mark.parametrize("i_outer", [1, 2, 4])
def test_pack_repeats_count_loops_over_axes_the_pack_does_not_use(i_outer):
    """At the fused (i tile, j tile) loop the panel of W is copied once per i tile; at the
    loop over 2-row tiles inside it, once per 2 rows (8 in all); inside D, whose i loop
    bound inference cuts to the 2 rows of the tile, once per row."""
    from tlmir.schedule.packing import pack_repeats
    from tlmir.schedule.rules.cpu import _attach_chain
    s, pack, fused, iio = dense_with_tiles(i_outer)
    reader = s.stage("D")
    rep = pack_repeats(pack, _attach_chain(reader))
    assert rep[id(fused)] == i_outer
    assert rep[id(iio)] == 8
    assert [rep[id(iv)] for iv in reader.leaf_iter_vars] == [16, 16, 16]  # D's i, j, k


def w_pack_repeat(sch) -> int:
    """How many times `sch` copies each element of W into W.pack per call (1 at root)."""
    from tlmir.schedule.packing import pack_repeats
    from tlmir.schedule.rules.cpu import _attach_chain
    pk = sch.stage("W.pack")
    if pk.attach[0] != "at":
        return 1
    return pack_repeats(pk.op.output(), _attach_chain(sch.readers_of(pk)[0]))[id(pk.attach[2])]


@pytest.mark.parametrize("limit", [1, 2, 10**9])
def test_pack_locations_that_copy_too_often_are_not_offered(limit):
    """Random dense traces never put W.pack where it is copied more than pack_max_repeat
    times per call; without the limit such places are most of the options."""
    from tlmir.runtime.target import SearchParams
    op = ops.dense(32, 128, 64, bias=True, act="gelu")
    space = SearchSpace(op.outputs, HW2, SearchParams(pack_max_repeat=limit))
    first = len(space.sketches) // 2
    rng = random.Random(5)
    worst = max(w_pack_repeat(space.apply(first + n % 3, RandomDecider(rng))[0]) for n in range(60))
    assert worst <= limit
    if limit > 2:
        assert worst > 2


def test_traces_over_a_lowered_pack_limit_still_replay_but_are_not_drawn():
    """A trace recorded when the limit was higher replays to the same program (records of
    older runs stay usable); mutating it draws an allowed location instead."""
    from tlmir.runtime.target import SearchParams
    op = ops.dense(32, 128, 64, bias=True, act="gelu")
    loose = SearchSpace(op.outputs, HW2, SearchParams(pack_max_repeat=10**9))
    strict = SearchSpace(op.outputs, HW2, SearchParams(pack_max_repeat=1))
    rng = random.Random(1)
    first = len(loose.sketches) // 2
    trace = next(tr for sch, tr in (loose.apply(first + n % 3, RandomDecider(rng)) for n in range(200))
                 if w_pack_repeat(sch) > 1)
    assert str(tlmir.lower(strict.replay(trace), op.args)) == str(tlmir.lower(loose.replay(trace), op.args))
    for k in range(20):
        sch, child = strict.mutate(trace, random.Random(k))
        assert w_pack_repeat(sch) == 1


def test_pack_max_repeat_is_validated():
    from tlmir.errors import ScheduleError
    from tlmir.runtime.target import SearchParams
    with pytest.raises(ScheduleError, match="pack_max_repeat"):
        SearchParams(pack_max_repeat=0)
