"""Hand-written, op-agnostic schedules and random schedules used by the tests."""
from __future__ import annotations

import numpy as np

import tlmir
from tlmir.ops import OpDef


def compute_stages(s):
    return [st for st in s.stages if not st.is_placeholder]


def consumers(s, st):
    """Stages that read `st` once inlined stages are looked through."""
    out = []
    for r in s.readers_of(st):
        for c in (consumers(s, r) if r.attach[0] == "inline" else [r]):
            if c not in out:
                out.append(c)
    return out


def inlinable(s, st) -> bool:
    return not st.op.reduce_axis and st.origin_op not in s.outputs


def tile_vectorize_parallel(s, op: OpDef) -> None:
    """Per stage: split the innermost spatial axis by 4 and vectorize it, move reductions
    inside, fuse the two outermost loops and run them in parallel."""
    for st in compute_stages(s):
        sp, red = list(st.op.axis), list(st.op.reduce_axis)
        if sp[-1].extent < 8:
            continue
        o, i = st.split(sp[-1], factor=4)
        order = sp[:-1] + [o] + red + [i]
        st.reorder(*order)
        st.vectorize(i)
        lead = order[0]
        if len(order) > 2 and order[1].kind == "spatial":
            lead = st.fuse(order[0], order[1])
        st.parallel(lead)


def inline_and_compute_at(s, op: OpDef) -> None:
    """Inline element-wise stages; compute every other intermediate inside its only
    consumer's outermost loop (after splitting that loop)."""
    for st in compute_stages(s):
        if inlinable(s, st):
            st.compute_inline()
    for st in reversed(compute_stages(s)):
        if st.attach[0] != "root" or st.origin_op in s.outputs:
            continue
        cons = consumers(s, st)
        if len(cons) == 1:
            c = cons[0]
            first = c.leaf_iter_vars[0]
            if first.extent >= 4 and first.kind == "spatial" and c.attach[0] == "root":
                first, _ = c.split(first, nparts=2)
            st.compute_at(c, first)


def cache_write_schedule(s, op: OpDef) -> None:
    """cache_write the output (or the last reduction) into a local tile computed at the
    output's outer loop; the copy-out loop is vectorized and its outer loop parallel."""
    out = s[op.outputs[0]]
    reds = [st for st in compute_stages(s) if st.op.reduce_axis]
    target = out if (out.op.reduce_axis or not reds) else reds[-1]
    t = target.op.output()
    local = s[s.cache_write(t, "local")]
    sp = list(target.op.axis)
    inner = sp[-1]
    if inner.extent >= 8:
        o, inner = target.split(inner, factor=8)
        target.reorder(*(sp[:-1] + [o, inner]))
        target.vectorize(inner)
        attach = o
    else:
        attach = target.leaf_iter_vars[-1]
    if target.leaf_iter_vars[0] is not attach:
        target.parallel(target.leaf_iter_vars[0])
    local.compute_at(target, attach)
    lsp, lred = list(local.op.axis), list(local.op.reduce_axis)
    local.reorder(*(lsp[:-1] + lred + [lsp[-1]]))
    if target.leaf_iter_vars[-1] is inner and inner.extent == 8:
        local.vectorize(lsp[-1])


SCHEDULES = {
    "default": lambda s, op: None,
    "tile_vectorize_parallel": tile_vectorize_parallel,
    "inline_and_compute_at": inline_and_compute_at,
    "cache_write": cache_write_schedule,
}


def check_op(op: OpDef, schedule, rtol=1e-4, atol=1e-4, seed=0) -> tlmir.schedule.Schedule:
    s = tlmir.create_schedule(op.outputs)
    schedule(s, op)
    f = tlmir.build(s, op.args)
    ins = op.random_inputs(seed)
    outs = op.empty_outputs()
    f(*ins, *outs)
    for got, want in zip(outs, op.run_reference(*ins)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return s


def assert_program_matches(sch, op: OpDef, ins, want, trace, rtol=1e-4, atol=1e-4) -> None:
    """Build `sch` (the program of `trace`), run it on `ins`, compare with `want`."""
    outs = op.empty_outputs()
    tlmir.build(sch, op.args)(*ins, *outs)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=rtol, atol=atol, err_msg=str(trace))


def assert_replays_identically(space, trace, func, args) -> None:
    """`trace` survives JSON exactly and replays into `func`, the loop IR it was drawn as."""
    from tlmir.schedule.decider import ReplayDecider, Trace
    again = Trace.from_json(trace.to_json())
    assert again == trace
    sch, trace2 = space.apply(again.sketch, ReplayDecider(again))
    assert trace2 == trace and str(tlmir.lower(sch, args)) == str(func)


def assert_hand_schedule_matches_and_replays(s, op: OpDef) -> None:
    """A schedule written by hand computes what numpy computes, and its history (through
    JSON) replays into the same loop IR on a fresh schedule."""
    from tlmir.schedule import replay, steps_from_json, steps_to_json
    ins = op.random_inputs(0)
    got = op.empty_outputs()
    tlmir.build(s, op.args)(*ins, *got)
    np.testing.assert_allclose(got[0], op.run_reference(*ins)[0], rtol=1e-5, atol=1e-5)
    s2 = tlmir.create_schedule(op.outputs)
    replay(s2, steps_from_json(steps_to_json(s.history)))
    assert str(tlmir.lower(s2, op.args)) == str(tlmir.lower(s, op.args))
