"""Property: any sequence of schedule primitives the API accepts lowers, compiles, and
computes what numpy computes; the reference interpreter agrees; the history replays."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tlmir
from tlmir import ops
from tlmir.runtime.interpreter import run_interpreted
from tlmir.schedule import replay, steps_from_json, steps_to_json

from schedutil import compute_stages, consumers, inlinable

OPS = {
    "matmul": lambda: ops.matmul(12, 20, 8),
    "conv2d": lambda: ops.conv2d_nchw(1, 3, 6, 6, 4, 3, 3, padding=1),
    "dense_bias_relu": lambda: ops.dense(6, 10, 8, bias=True, act="relu"),
}


def attached_at(s, stage, iv) -> bool:
    return any(x.attach[0] == "at" and x.attach[1] is stage and x.attach[2] is iv for x in s.stages)


def random_schedule(draw, s) -> None:
    # structure: inline element-wise stages, cache the output of a reduction
    for x in compute_stages(s):
        if inlinable(s, x) and draw(st.booleans()):
            x.compute_inline()
    reds = [x for x in compute_stages(s) if x.op.reduce_axis and x.attach[0] == "root"]
    if reds and draw(st.booleans()):
        s.cache_write(draw(st.sampled_from(reds)).op.output(), "local")
    live = [x for x in compute_stages(s) if x.attach[0] != "inline"]
    # loop structure
    for x in live:
        for _ in range(draw(st.integers(0, 3))):
            action = draw(st.sampled_from(["split", "reorder", "fuse"]))
            leaves = x.leaf_iter_vars
            if action == "split":
                x.split(draw(st.sampled_from(leaves)), factor=draw(st.sampled_from([1, 2, 3, 4, 5, 8])))
            elif action == "reorder":
                x.reorder(*draw(st.permutations(leaves)))
            else:
                pairs = [(a, b) for a, b in zip(leaves, leaves[1:]) if a.kind == b.kind]
                if pairs:
                    x.fuse(*draw(st.sampled_from(pairs)))
    # placement: producers inside their only consumer
    for x in reversed(live):
        if x.origin_op in s.outputs:
            continue
        cons = consumers(s, x)
        if len(cons) == 1 and draw(st.booleans()):
            c = cons[0]
            x.compute_at(c, draw(st.sampled_from(c.leaf_iter_vars)))
    # annotations
    for x in live:
        first, last = x.leaf_iter_vars[0], x.leaf_iter_vars[-1]
        if last.kind == "spatial" and not attached_at(s, x, last) and draw(st.booleans()):
            x.vectorize(last)
        if first.kind == "spatial" and first is not last and draw(st.booleans()):
            x.parallel(first)
        small = [v for v in x.leaf_iter_vars[1:-1] if v.extent <= 16]
        if small and draw(st.booleans()):
            x.unroll(draw(st.sampled_from(small)))
        if draw(st.booleans()):
            x.pragma(first, "auto_unroll_max_step", draw(st.sampled_from([0, 16, 64])))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(OPS)), data=st.data())
def test_random_schedule_lowers_compiles_and_matches(name, data):
    op = OPS[name]()
    s = tlmir.create_schedule(op.outputs)
    random_schedule(data.draw, s)
    func = tlmir.lower(s, op.args)
    ins = op.random_inputs(1)
    want = op.run_reference(*ins)
    outs = op.empty_outputs()
    tlmir.build(s, op.args)(*ins, *outs)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4, err_msg=str(func))
    outs = op.empty_outputs()
    run_interpreted(func, *ins, *outs)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4, err_msg=str(func))
    op2 = OPS[name]()
    s2 = tlmir.create_schedule(op2.outputs)
    replay(s2, steps_from_json(steps_to_json(s.history)))
    assert str(tlmir.lower(s2, op2.args)) == str(func)
