"""Property: any program of the GPU space (a random sketch, random answers) lowers,
compiles with NVRTC, computes what numpy computes in the interpreter, replays from its
trace and stays in the space under mutation."""
import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tlmir
from tlmir import ops
from tlmir.codegen_cuda.render import render
from tlmir.runtime.backend import compile_func
from tlmir.runtime.interpreter import run_interpreted
from tlmir.runtime.target import GPU_CLASSES
from tlmir.schedule.space import SearchSpace

OPS = {
    "matmul": lambda: ops.matmul(24, 20, 12),
    "conv2d": lambda: ops.conv2d_nchw(1, 3, 7, 7, 4, 3, 3, stride=2, padding=1),
    "dense_gelu": lambda: ops.dense(6, 10, 16, bias=True, act="gelu"),
    "softmax": lambda: ops.softmax(3, 40),
    "layernorm": lambda: ops.layernorm(4, 36),
    "max_pool": lambda: ops.max_pool2d(1, 2, 9, 9, kernel=3, stride=2, padding=1),
}


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(OPS)), arch=st.sampled_from(sorted(GPU_CLASSES)), seed=st.integers(0, 10**6))
def test_a_random_gpu_program_compiles_and_matches_numpy(name, arch, seed):
    op, hw = OPS[name](), GPU_CLASSES[arch]
    space = SearchSpace(op.outputs, hw)
    rng = random.Random(seed)
    sch, trace = space.sample(rng)
    func = tlmir.lower(sch, op.args)
    for k in render(func).kernels:
        assert k.threads <= hw.max_threads and k.shared_bytes <= hw.max_shared_kb * 1024
    kernel = compile_func(func, hw)
    assert len(kernel.resources) == len(kernel.unit.kernels)
    ins = op.random_inputs(seed % 7)
    outs = op.empty_outputs()
    run_interpreted(func, *ins, *outs)
    for got, want in zip(outs, op.run_reference(*ins)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{trace}\n{func}")
    assert str(tlmir.lower(space.replay(trace), op.args)) == str(func)
    mutant, mtrace = space.mutate(trace, rng)
    assert str(tlmir.lower(space.replay(mtrace), op.args)) == str(tlmir.lower(mutant, op.args))
