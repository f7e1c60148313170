"""Measurement: verified before timed; crashing or hanging candidates cost one trial."""
import numpy as np

import tlmir
from tlmir import ops
from tlmir.ir.expr import Load, Var, const
from tlmir.ir.stmt import For, PrimFunc, Store
from tlmir.runtime.measure import measure


def _matmul_func():
    op = ops.matmul(16, 16, 16)
    s = tlmir.create_schedule(op.outputs)
    func = tlmir.lower(s, op.args)
    ins = op.random_inputs(0)
    return op, func, ins


def test_measure_good_candidate():
    op, func, ins = _matmul_func()
    res = measure(func, ins, op.run_reference(*ins), timeout=60)
    assert res.ok and res.kind == "ok" and 0 < res.min <= res.median


def test_wrong_result_is_a_failed_trial():
    op, func, ins = _matmul_func()
    bad = [r + 1.0 for r in op.run_reference(*ins)]
    res = measure(func, ins, bad, timeout=60)
    assert not res.ok and res.kind == "wrong" and "differs from the reference" in res.error


def _one_store(index, extent=1):
    op, func, ins = _matmul_func()
    out = func.args[-1]
    body = For(Var("i"), const(0), const(extent), "serial",
               Store(out, const(index), Load(out, const(0)) + 1.0))
    return op, ins, PrimFunc("evil", func.args, body)


def test_crash_and_hang_cost_one_trial_each():
    op, ins, crash = _one_store(1 << 40)          # write far outside the buffer
    res = measure(crash, ins, op.run_reference(*ins), timeout=60)
    assert not res.ok and res.kind == "crash"
    op, ins, hang = _one_store(0, extent=1 << 60)  # runs for ages
    res = measure(hang, ins, op.run_reference(*ins), timeout=3)
    assert not res.ok and res.kind == "timeout"
    op, func, ins = _matmul_func()                 # the next candidate is measured normally
    assert measure(func, ins, op.run_reference(*ins), timeout=60).ok
