"""The GPU rule set (Ansor's): its sketch counts, every sketch of every op checked against
numpy in the interpreter and compiled by NVRTC for sm_80 and sm_90, and no tile over a
target's limits ever offered."""
import random

import numpy as np
import pytest

import tlmir
from tlmir import ops
from tlmir.codegen_cuda.render import render
from tlmir.runtime.backend import compile_func
from tlmir.runtime.interpreter import run_interpreted
from tlmir.runtime.target import GPU_CLASSES
from tlmir.schedule.decider import Decider, RandomDecider
from tlmir.schedule.rules.gpu import shared_bytes
from tlmir.schedule.space import SearchSpace

from test_ops_schedules import CASES

SM90 = GPU_CLASSES["sm_90"]


def test_sketch_counts_match_ansors():
    """Ansor's CUDA sketches: matmul 1, softmax 4, conv2d + bias + relu 1."""
    cases = {("matmul", 1): dict(M=1024, N=1024, K=1024), ("softmax", 4): dict(M=128, N=1000),
             ("conv2d_bias_relu", 1): dict(N=1, C=64, H=56, W=56, K=64, R=3, S=3, padding=1)}
    for (name, count), params in cases.items():
        sketches = SearchSpace(ops.make(name, **params).outputs, SM90).sketches
        assert len(sketches) == count, (name, [str(s) for s in sketches])
    conv = SearchSpace(ops.make("conv2d_bias_relu", **cases[("conv2d_bias_relu", 1)]).outputs, SM90).sketches[0]
    assert str(conv) == "relu:skip, bias:inline, conv:tile_fuse, pad:inline"
    # a short row: no cross-thread reduction (not longer than a warp)
    assert len(SearchSpace(ops.make("softmax", M=64, N=32).outputs, SM90).sketches) == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_sketch_of_every_op_matches_numpy_and_compiles(name):
    op = ops.make(name, **CASES[name])
    space = SearchSpace(op.outputs, SM90)
    ins = op.random_inputs(0)
    want = op.run_reference(*ins)
    for k in range(len(space.sketches)):
        sch, trace = space.apply(k, RandomDecider(random.Random(k)))
        func = tlmir.lower(sch, op.args)
        outs = op.empty_outputs()
        run_interpreted(func, *ins, *outs)
        for got, w in zip(outs, want):
            np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5, err_msg=f"{trace}\n{func}")
        for arch in ("sm_80", "sm_90"):
            kernel = compile_func(func, GPU_CLASSES[arch])
            assert all(r.registers > 0 for r in kernel.resources) and f".target {arch}" in kernel.ptx


class _Offered(Decider):
    """Random answers; keeps every option every question offered."""

    def __init__(self, rng):
        super().__init__()
        self.rng, self.offered = rng, []

    def _decide(self, question, options):
        self.offered.append((question, options))
        return self.rng.choice(options)


@pytest.mark.parametrize("arch", ["sm_70", "sm_90"])
def test_no_tile_over_the_limits_is_ever_offered(arch):
    hw = GPU_CLASSES[arch]
    op = ops.make("conv2d_bias_relu", N=1, C=64, H=28, W=28, K=128, R=3, S=3, padding=1)
    space = SearchSpace(op.outputs, hw)
    rng = random.Random(0)
    for _ in range(6):
        ask = _Offered(rng)
        sch, _ = space.apply(0, ask)
        tiles = {q: o for q, o in ask.offered if q.startswith("tile conv.")}
        assert set(tiles) == {"tile conv.n", "tile conv.k", "tile conv.p", "tile conv.q", "tile conv.rc",
                              "tile conv.rr", "tile conv.rs"}
        (kernel,) = render(tlmir.lower(sch, op.args)).kernels
        assert kernel.threads <= hw.max_threads and kernel.shared_bytes <= hw.max_shared_kb * 1024
    # the limits cut the space: a 5-level tile of 128 with 256 threads in one axis is absent
    ask = _Offered(random.Random(1))
    space.apply(0, ask)
    k_options = dict(ask.offered)["tile conv.k"]
    assert k_options and all(f[2] <= hw.max_threads and f[1] <= hw.max_vthread for f in k_options)
    assert (1, 1, 128, 1, 1) in k_options and (1, 16, 8, 1, 1) not in k_options  # 16 vthreads > 8


def test_shared_memory_of_a_tile_is_the_region_a_block_reads():
    op = ops.make("matmul", M=256, N=256, K=256)
    (C,) = op.outputs
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    assert shared_bytes(C.op, {id(i): 64, id(j): 32, id(k): 8}) == (64 * 8 + 8 * 32) * 4
    conv = ops.make("conv2d_nchw", N=1, C=8, H=16, W=16, K=8, R=3, S=3, stride=2, padding=1).outputs[0].op
    n, kk, p, q = conv.axis
    rc, rr, rs = conv.reduce_axis
    # 4x4 outputs at stride 2 with a 3x3 window read a 9x9 input patch per channel
    assert shared_bytes(conv, {id(p): 4, id(q): 4, id(rc): 2, id(rr): 3, id(rs): 3, id(kk): 4}) == \
        (2 * 9 * 9 + 4 * 2 * 3 * 3) * 4


def test_a_dense_gelu_kernel_holds_its_epilogue():
    op = ops.make("dense", M=64, N=64, K=64, bias=True, act="gelu")
    sch, _ = SearchSpace(op.outputs, SM90).sample(random.Random(0))
    src = tlmir.build(sch, op.args, target="cuda:sm_90").source
    assert src.count("__global__") == 1 and "erff(" in src and "__shared__" in src


def test_two_tiled_stages_reading_one_input_get_copies_of_their_own():
    from tlmir import te
    A = te.placeholder((16, 16), name="A")
    B = te.placeholder((16, 16), name="B")
    k = te.reduce_axis(16, "k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    k2 = te.reduce_axis(16, "k2")
    D = te.compute((16, 16), lambda i, j: te.sum(A[i, k2] * C[k2, j], axis=k2), name="D")
    space = SearchSpace([D], SM90)
    sch, trace = space.sample(random.Random(0))
    names = [st.name for st in sch.stages]
    assert len(names) == len(set(names)) and "A.shared" in names and "A.shared_1" in names
    assert str(tlmir.lower(space.replay(trace), [A, B, D])) == str(tlmir.lower(sch, [A, B, D]))
