"""Measurement: verified before timed; crashing or hanging candidates cost one trial."""

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


def test_the_cutoff_judges_a_warm_run_not_the_cold_first_one(monkeypatch):
    """The first call of a kernel is cold (for a 15 us layernorm in a worker: 200-400 us);
    a candidate is cut off after one run only if a warm run is slower than the cutoff."""
    from tlmir.codegen_cpu import jit
    from tlmir.runtime.measure import measure_in_process
    op, func, ins = _matmul_func()
    expected = op.run_reference(*ins)
    warm = measure_in_process(func, ins, expected, repeat=5).median
    calls = []
    orig = jit.Kernel.__call__

    def cold_first_call(self, *arrays):  # the verifying run takes a second
        calls.append(1)
        out = orig(self, *arrays)
        if len(calls) == 1:
            import time
            time.sleep(1.0)
        return out
    monkeypatch.setattr(jit.Kernel, "__call__", cold_first_call)
    res = measure_in_process(func, ins, expected, repeat=5, cutoff=100 * warm + 1e-3)
    assert res.ok and len(res.times) == 5 and res.median < 0.5
    calls.clear()
    res = measure_in_process(func, ins, expected, repeat=5, cutoff=warm / 1000)
    assert res.ok and len(res.times) == 1  # slower than the cutoff when warm too: one run


def test_a_warm_run_delayed_by_a_scheduler_tick_is_run_again(monkeypatch):
    """A fast parallel kernel that waited one 4 ms tick for a core held by another process
    is timed again, not recorded 100x slow behind the cutoff."""
    import time
    from tlmir.codegen_cpu import jit
    from tlmir.runtime.backend import Timing
    from tlmir.runtime.measure import measure_in_process
    op, func, ins = _matmul_func()
    expected = op.run_reference(*ins)
    calls, single_runs = [], []
    orig_call, orig_benchmark = jit.Kernel.__call__, jit.Kernel.benchmark

    def slow_cold_call(self, *arrays):  # the verifying run is over the cutoff
        calls.append(1)
        out = orig_call(self, *arrays)
        if len(calls) == 1:
            time.sleep(0.01)
        return out

    def first_single_run_ticked(self, *arrays, **kw):
        t = orig_benchmark(self, *arrays, **kw)
        if kw.get("repeat") == 1:
            single_runs.append(t.min)
            if len(single_runs) == 1:
                return Timing(median=0.004, min=0.004, times=(0.004,))
        return t
    monkeypatch.setattr(jit.Kernel, "__call__", slow_cold_call)
    monkeypatch.setattr(jit.Kernel, "benchmark", first_single_run_ticked)
    res = measure_in_process(func, ins, expected, repeat=5, cutoff=0.001)
    assert res.ok and len(single_runs) == 2 and len(res.times) == 5 and res.median < 0.001


def test_a_program_compiled_ahead_is_loaded_not_compiled_again(monkeypatch):
    import numpy as np

    from tlmir.codegen_cpu import jit
    op, func, ins = _matmul_func()
    key, obj, llvm_ir = jit.compile_object(func)
    jit.remember({key: (obj, llvm_ir)})

    def no_compiling(*args):
        raise AssertionError("compiled again")
    monkeypatch.setattr(jit, "_optimized_module", no_compiling)
    kernel = jit.compile_func(func)
    out = np.zeros((16, 16), "float32")
    kernel(*ins, out)
    np.testing.assert_allclose(out, op.run_reference(*ins)[0], rtol=1e-4, atol=1e-4)
    assert kernel.source == llvm_ir


def test_a_round_compiled_ahead_in_processes_is_measured_and_verified():
    import random

    from tlmir.runtime.task import Task
    from tlmir.schedule.space import SearchSpace
    from tlmir.search.measurer import Measurer
    task = Task.from_op(ops.matmul(32, 32, 64))
    space, rng = SearchSpace(task.outputs), random.Random(0)
    funcs = [tlmir.lower(space.sample(rng)[0], task.args) for _ in range(4)]
    m = Measurer(compile_workers=2, ahead_min=2)
    try:
        assert 1 <= m.prepare(funcs) <= len(funcs)  # distinct programs, each compiled once
        results = [m.measure(task, f) for f in funcs]
    finally:
        m.close()
    assert all(r.ok and r.kind == "ok" for r in results)
