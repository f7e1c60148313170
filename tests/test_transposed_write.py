"""Rule `cache_write_transposed`: an NCHW conv whose output rows are too short for whole
vectors accumulates with its output channels last, fed by a packed weight.

Where the rule fires, sketch-id stability, the layout-permuting cache_write, and the
property that random traces of the new sketches lower, compile, match numpy and replay."""
import random

import pytest

import tlmir
from tlmir import ops
from tlmir.errors import ScheduleError
from tlmir.runtime.target import HardwareParams
from tlmir.schedule.decider import RandomDecider
from tlmir.schedule.packing import transposed_vector_axis
from tlmir.schedule.space import SearchSpace

from schedutil import (assert_hand_schedule_matches_and_replays, assert_program_matches,
                       assert_replays_identically)

HW2 = HardwareParams(cores=2)


def _tiled(op):
    """The reduction stage of `op` (the conv)."""
    return next(s.op for s in tlmir.create_schedule(op.outputs).stages if s.op.name == "conv")


@pytest.mark.parametrize("op, axis", [
    (ops.conv2d_nchw(1, 512, 7, 7, 2048, 1, 1), 1),            # 7 wide: channels instead
    (ops.conv2d_nchw(1, 1024, 14, 14, 2048, 1, 1, stride=2), 1),
    (ops.conv2d_bias_relu(1, 128, 14, 14, 32, 3, 3, padding=1), 1),
    (ops.conv2d_nchw(1, 64, 56, 56, 256, 1, 1), None),          # 56 wide fills vectors
    (ops.conv2d_nchw(1, 64, 7, 7, 24, 1, 1), None),             # 24 channels do not
    (ops.conv2d_nchw(1, 64, 7, 7, 64, 3, 3, padding=1, groups=4), None),  # X indexed by k
    (ops.depthwise_conv2d_nchw(1, 64, 7, 7, 3, 3, padding=1), None),
    (ops.dense(16, 64, 64), None),
    (ops.dense(32, 8, 64), 0),                                  # rows of X, packed
])
def test_rule_fires_on_short_rows_with_whole_vectors_of_channels(op, axis):
    assert transposed_vector_axis(_tiled(op) if "conv" in op.family else op.outputs[0].op, 16) == axis


def test_transposed_sketches_are_appended_after_the_others():
    op = ops.conv2d_bias_relu(1, 64, 7, 7, 64, 3, 3, padding=1)
    sketches = SearchSpace(op.outputs, HW2).sketches
    assert [str(s) for s in sketches[:3]] == [
        "relu:skip, bias:inline, conv:tile_fuse1, pad:skip",
        "relu:skip, bias:inline, conv:tile_fuse2, pad:skip",
        "relu:skip, bias:inline, conv:tile, pad:skip"]
    assert [str(s) for s in sketches[3:]] == [
        "relu:skip, bias:inline, conv:cache_write_transposed1, pad:skip, W:packconv",
        "relu:skip, bias:inline, conv:cache_write_transposed2, pad:skip, W:packconv"]
    assert len(SearchSpace(ops.conv2d_nchw(1, 64, 56, 56, 64, 1, 1).outputs, HW2).sketches) == 3


def test_cache_write_layout_computes_the_same_and_replays():
    op = ops.conv2d_nchw(1, 3, 5, 5, 16, 1, 1)
    (out,) = op.outputs
    s = tlmir.create_schedule(out)
    local = s.cache_write(out, "local", layout=[0, 2, 3, 1])
    assert local.shape == (1, 5, 5, 16)
    assert [a.name for a in local.op.axis] == ["n.c", "p.c", "q.c", "k.c"]
    s[local].vectorize(s[local].leaf_iter_vars[3])
    assert_hand_schedule_matches_and_replays(s, op)
    assert "layout=[0, 2, 3, 1]" in str(s.history)
    with pytest.raises(ScheduleError, match="not a permutation"):
        tlmir.create_schedule(out).cache_write(out, "local", layout=[0, 1, 1, 2])


@pytest.mark.parametrize("op", [
    ops.conv2d_nchw(1, 8, 6, 6, 16, 3, 3, padding=1),           # padded 3x3
    ops.conv2d_nchw(1, 8, 7, 7, 32, 1, 1, stride=2),            # strided 1x1
    ops.conv2d_bias_relu(1, 4, 5, 5, 32, 1, 1),                 # fused into relu
    ops.conv2d_bias_relu(1, 6, 6, 6, 16, 3, 3, stride=2, padding=1),
    ops.dense(16, 5, 12, bias=True, act="gelu"),
], ids=["3x3", "1x1-s2", "bias-relu", "bias-relu-s2", "dense"])
def test_random_transposed_traces_compile_match_and_round_trip(op):
    space = SearchSpace(op.outputs, HW2)
    ids = [i for i, s in enumerate(space.sketches) if "transposed" in str(s)]
    assert len(ids) == 2
    rng = random.Random(5)
    ins = op.random_inputs(0)
    want = op.run_reference(*ins)
    for n in range(6):
        sch, trace = space.apply(ids[n % 2], RandomDecider(rng))
        names = {st.name for st in sch.stages}
        assert {"conv.local", "W.pack"} <= names or {"D.local", "X.pack"} <= names
        assert_program_matches(sch, op, ins, want, trace)
        assert_replays_identically(space, trace, tlmir.lower(sch, op.args), op.args)


def test_a_transposed_program_transfers_between_a_conv_and_a_conv_with_an_epilogue():
    """The NCHW conv's copy-out loops and the ReLU's read as the same epilogue: a program
    of one replays on the other in the same sketch, with the same tiles."""
    from tlmir.search.transfer import replay
    src_op = ops.conv2d_nchw(1, 8, 7, 7, 32, 1, 1)
    dst_op = ops.conv2d_bias_relu(1, 8, 7, 7, 32, 1, 1)
    src, dst = SearchSpace(src_op.outputs, HW2), SearchSpace(dst_op.outputs, HW2)
    rng = random.Random(2)
    for sid in [i for i, s in enumerate(src.sketches) if "transposed" in str(s)]:
        _, trace = src.apply(sid, RandomDecider(rng))
        got = replay(dst, trace, str(src.sketches[sid]))
        assert got is not None and "transposed" in str(dst.sketches[got.trace.sketch])
        assert got.deviation == 0
        tiles = lambda t: [a for q, a in t.decisions if q.startswith("tile ")]  # noqa: E731
        assert tiles(got.trace) == tiles(trace)
