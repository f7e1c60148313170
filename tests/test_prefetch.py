"""Software prefetch of a pack's next panel (tlmir.codegen_cpu.prefetch): which lines it
fetches, where it sits, when it is left out, and that programs keep their values."""
import itertools
import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlmir import ops
from tlmir.codegen_cpu import compile_func
from tlmir.codegen_cpu.llvm_ir import emit_module
from tlmir.codegen_cpu.prefetch import LINE_BYTES, add_prefetches
from tlmir.ir import arith
from tlmir.ir import expr as E
from tlmir.ir import stmt as S
from tlmir.runtime.interpreter import run_interpreted
from tlmir.runtime.target import HardwareParams
from tlmir.schedule.decider import RandomDecider, Trace
from tlmir.schedule.lower import lower
from tlmir.schedule.space import SearchSpace

HW2 = HardwareParams(cores=2)
DENSE_BEST = Trace(3, [("tile D.i", (1, 16, 2, 4)), ("tile D.j", (96, 1, 2, 16)), ("tile D.k", (192, 4)),
                       ("parallel gelu", 2), ("vec gelu", 1), ("unroll gelu", 512), ("vec D", 1),
                       ("unroll D", 16), ("at W.pack", "D.j.outer.outer.outer"), ("parallel W.pack", 1),
                       ("unroll W.pack", 16)])


def nests(s: S.Stmt, loops=()):
    """(statement, enclosing loops outermost first) for every statement under `s`."""
    yield s, loops
    inner = loops + (s,) if isinstance(s, S.For) else loops
    for c in s.children():
        yield from nests(c, inner)


def iterations(loops):
    return itertools.product(*[range(f.min.value, f.min.value + f.extent.value) for f in loops])


def lines_of(func: S.PrimFunc, pack_iteration: int) -> tuple[set, set, set]:
    """(lines the prefetches fetch at `pack_iteration` of the loop holding the pack, lines the
    pack copies at the next iteration, the line after each contiguous run of elements it
    copies), with the loops outside the holding loop at 0."""
    found = [(s, ls) for s, ls in nests(func.body) if isinstance(s, S.Prefetch)]
    assert found
    per_line = LINE_BYTES // 4
    src = found[0][0].buffer
    (copy, copy_loops), = [(s, ls) for s, ls in nests(func.body) if isinstance(s, S.Store)
                           and isinstance(s.value, E.Load) and s.value.buffer is src]
    holder = next(f for f in reversed(copy_loops) if f in found[0][1])
    outside = {f.var: 0 for f in copy_loops[:copy_loops.index(holder)]}
    got = set()
    for pf, loops in found:
        inner = loops[loops.index(holder) + 1:]
        for vals in iterations(inner):
            env = {**outside, holder.var: pack_iteration, **{f.var: v for f, v in zip(inner, vals)}}
            got.add(arith.evaluate(pf.index, env) // per_line)
    inner = copy_loops[copy_loops.index(holder) + 1:]
    elems = {arith.evaluate(copy.value.index, {**outside, holder.var: pack_iteration + 1,
                                                **{f.var: v for f, v in zip(inner, vals)}})
             for vals in iterations(inner)}
    after = {e // per_line + 1 for e in elems if e + 1 not in elems}
    return got, {e // per_line for e in elems}, after


def packed_program(op, rng: random.Random, tries: int = 50):
    """(program, the same with prefetches) of a random packed-sketch schedule of `op` whose
    pack sits inside a loop and gets prefetches, or None."""
    space = SearchSpace(op.outputs, HW2)
    packed = [i for i, s in enumerate(space.sketches) if any(r[1] == "pack" for r in s.rules)]
    for _ in range(tries):
        sch, _ = space.apply(rng.choice(packed), RandomDecider(rng))
        base = lower(sch, op.args)
        func = add_prefetches(base)
        if func is not base:
            return base, func
    return None


def test_dense_prefetches_the_next_weight_panel_from_its_k_loop():
    op = ops.dense(128, 3072, 768, bias=True, act="gelu")
    space = SearchSpace(op.outputs, HW2)
    func = add_prefetches(lower(space.replay(DENSE_BEST), op.args))
    (pf, loops), = [(s, ls) for s, ls in nests(func.body) if isinstance(s, S.Prefetch)]
    assert [f.var.name for f in loops] == ["i.outer.j.outer.fused", "i.outer.outer.inner", "k.outer"]
    assert pf.buffer.name == "W"
    for panel in (0, 7, 95):
        got, region, _ = lines_of(func, panel)
        assert got == region == set(range((panel + 1) * 1536, (panel + 2) * 1536))
    assert "prefetch(W[" in str(func)
    assert "llvm.prefetch.p0" in emit_module(func)


def test_no_prefetch_for_a_pack_at_the_root_or_a_pack_that_is_little_of_the_work():
    dense = ops.dense(128, 3072, 768, bias=True, act="gelu")
    space = SearchSpace(dense.outputs, HW2)
    at_root = Trace(DENSE_BEST.sketch, [(q, "root" if q == "at W.pack" else a) for q, a in DENSE_BEST.decisions])
    f = lower(space.replay(at_root), dense.args)
    assert add_prefetches(f) is f
    # matmul 1024^3 with a 1024 x 128 panel of B per parallel iteration: each copied element
    # is used 1024 times, so the copy is too small a share of the time to prefetch
    mm = ops.matmul(1024, 1024, 1024)
    space = SearchSpace(mm.outputs, HW2)
    trace = Trace(5, [("tile C.i", (1, 128, 4, 2)), ("tile C.j", (8, 4, 2, 16)), ("tile C.k", (256, 4)),
                      ("tile B.pack.ax1", (16, 64)), ("parallel C", 2), ("vec C", 1), ("unroll C", 512),
                      ("at B.pack", "C.i.outer.outer.outer.j.outer.outer.outer.fused"), ("vec B.pack", 1),
                      ("unroll B.pack", 16)])
    f = lower(space.replay(trace), mm.args)
    assert "B.pack" in str(f) and add_prefetches(f) is f


PACKED_OPS = [ops.dense(32, 96, 64, bias=True, act="gelu"), ops.matmul(48, 64, 40),
              ops.make("batch_matmul", B=3, M=32, N=48, K=40)]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(PACKED_OPS) - 1), seed=st.integers(0, 10_000))
def test_random_packed_programs_prefetch_their_next_region_and_keep_their_values(which, seed):
    """Every line the pack copies next is prefetched (but the last, when the region is one
    contiguous run that may start mid-line); nothing else is, but the line after a run
    (the point past its end that covers a run starting mid-line); the compiled program
    still matches numpy."""
    op = PACKED_OPS[which]
    progs = packed_program(op, random.Random(seed))
    if progs is None:
        return  # no program of this draw has a pack inside a loop
    base, func = progs
    got, region, after = lines_of(func, 0)
    assert got <= region | after
    assert len(region - got) <= (1 if len(after) == 1 else 0)
    ins = op.random_inputs(0)
    outs = [np.zeros(t.shape, t.dtype) for t in op.outputs]
    compile_func(func)(*ins, *outs)
    np.testing.assert_allclose(outs[0], op.reference(*ins)[0], rtol=1e-4, atol=1e-4)


def test_the_interpreter_runs_prefetches_as_nothing():
    op = PACKED_OPS[0]
    _, func = packed_program(op, random.Random(0))
    assert any(isinstance(s, S.Prefetch) for s in S.walk_stmt(func.body))
    ins = op.random_inputs(0)
    outs = [np.zeros(t.shape, t.dtype) for t in op.outputs]
    run_interpreted(func, *ins, *outs)
    np.testing.assert_allclose(outs[0], op.reference(*ins)[0], rtol=1e-4, atol=1e-4)
