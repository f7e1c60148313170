"""The backend registry: "cpu" (native code) and "interp" (the reference interpreter) compile
the same schedules to kernels that agree with each other and with the ops' references."""
import numpy as np
import pytest

import tlmir
from tlmir import ops
from tlmir.errors import ArgumentError, BuildError
from tlmir.runtime.backend import available_backends, backend_for, compile_func, get_backend
from tlmir.runtime.target import host_hardware

from schedutil import SCHEDULES
from test_ops_schedules import CASES

OPS = ("matmul", "conv2d_bias_relu", "softmax", "layernorm")


def test_the_registry_knows_cpu_and_interp():
    assert {"cpu", "interp"} <= set(available_backends())
    assert get_backend("cpu").name == "cpu" and get_backend("interp").name == "interp"
    assert backend_for(host_hardware()).name == "cpu" and backend_for(None).name == "cpu"
    with pytest.raises(BuildError, match=r"unknown backend 'tpu'; available: cpu, cuda, interp"):
        get_backend("tpu")


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("name", OPS)
def test_both_backends_agree_with_the_reference(name, schedule):
    op = ops.make(name, **CASES[name])
    s = tlmir.create_schedule(op.outputs)
    SCHEDULES[schedule](s, op)
    func = tlmir.lower(s, op.args, op.family)
    ins = op.random_inputs(0)
    want = op.run_reference(*ins)
    got = {}
    for backend in ("cpu", "interp"):
        kernel = compile_func(func, host_hardware(), backend)
        outs = op.empty_outputs()
        kernel(*ins, *outs)
        for g, w in zip(outs, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=backend)
        got[backend] = outs
    for c, i in zip(got["cpu"], got["interp"]):
        np.testing.assert_allclose(c, i, rtol=1e-4, atol=1e-4)


def _matmul():
    op = ops.make("matmul", **CASES["matmul"])
    return op, tlmir.create_schedule(op.outputs)


def test_build_with_the_interpreter_and_the_kernel_interface():
    op, s = _matmul()
    ins = op.random_inputs(1)
    want = op.run_reference(*ins)[0]
    sources = {}
    for backend in ("cpu", "interp"):
        f = tlmir.build(s, op.args, backend=backend)
        out = op.empty_outputs()[0]
        f(*ins, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
        f.num_threads = 1
        t = f.benchmark(*ins, out, warmup=0, repeat=3, min_time=0.0)
        assert 0 < t.min <= t.median and len(t.times) == 3
        sources[backend] = f.source
    assert "define" in sources["cpu"] and "for" in sources["interp"]


def test_the_interpreted_kernel_checks_its_arguments():
    op, s = _matmul()
    f = tlmir.build(s, op.args, backend="interp")
    a, b = op.random_inputs(0)
    m, n = op.outputs[0].shape
    with pytest.raises(ArgumentError, match=r"argument 2 \(.*\): expected shape \(24, 40\), got \(40, 24\)"):
        f(a, b, np.zeros((n, m), "float32"))
    with pytest.raises(ArgumentError, match="expected 3 arrays"):
        f(a, b)
    with pytest.raises(ArgumentError, match="expected dtype float32, got float64"):
        f(a, b.astype("float64"), np.zeros((m, n), "float32"))


def test_an_unknown_backend_in_build_names_the_known_ones():
    op, s = _matmul()
    with pytest.raises(BuildError, match="unknown backend 'gpu'; available: cpu, cuda, interp"):
        tlmir.build(s, op.args, backend="gpu")
