"""Framework baselines (tlmir.ops.baselines): every op has a torch baseline, every baseline
matches the op's float64 reference, and the timing helpers behave."""
import numpy as np
import pytest
import torch

from tlmir import ops
from tlmir.ops.baselines import (baseline_times, baseline_times_isolated, baselines,
                                 baselines_isolated, prepare, time_baseline)

from test_ops_schedules import CASES

CONV_POOL = {"conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d_nchw", "conv2d_bias_relu",
             "conv2d_bias",
             "conv2d_transpose_nchw", "max_pool2d", "avg_pool2d"}

# extra parameter sets exercising options the CASES leave at their defaults
EXTRA = [
    ("dense", dict(M=5, N=7, K=9)),
    ("dense", dict(M=6, N=10, K=12, bias=True, act="relu")),
    ("dense", dict(M=6, N=10, K=12, act="gelu")),
    ("batch_matmul", dict(B=6, M=3, N=4, K=5, scale=0.5, mask=2)),
    ("batch_matmul", dict(B=4, M=3, N=4, K=5, mask=1)),
    ("conv2d_nchw", dict(N=2, C=6, H=11, W=9, K=4, R=3, S=2, stride=(2, 1), padding=(1, 0),
                         dilation=(1, 2), groups=2)),
    ("conv2d_nhwc", dict(N=2, C=4, H=8, W=7, K=6, R=3, S=3, stride=1, padding=2, dilation=2,
                         groups=2)),
    ("depthwise_conv2d_nchw", dict(N=2, C=3, H=9, W=9, R=3, S=3, stride=2, padding=1,
                                   multiplier=2)),
    ("depthwise_conv2d_nchw", dict(N=1, C=4, H=7, W=7, R=3, S=3, padding=1, bias=True,
                                   act="relu6")),
    ("conv2d_bias", dict(N=1, C=4, H=7, W=7, K=6, R=3, S=3, padding=1, groups=2)),
    ("conv2d_transpose_nchw", dict(N=2, C=3, H=4, W=6, K=5, R=3, S=3, stride=(2, 3),
                                   padding=(1, 0), output_padding=(1, 2), act="tanh")),
    ("conv2d_transpose_nchw", dict(N=1, C=3, H=4, W=4, K=2, R=2, S=2)),
    ("max_pool2d", dict(N=2, C=3, H=9, W=11, kernel=(3, 2), stride=(2, 1), padding=(1, 1))),
    ("max_pool2d", dict(N=1, C=2, H=8, W=8)),
    ("avg_pool2d", dict(N=1, C=3, H=11, W=11, kernel=3, stride=2, padding=1)),
    ("layernorm", dict(M=3, N=33, eps=1e-3)),
    ("rmsnorm", dict(M=3, N=33, eps=1e-2)),
    ("add", dict(shape=(2, 3, 5, 7))),
    ("add_relu", dict(shape=(17,))),
    ("scale_shift_tanh", dict(shape=(9, 10))),
    ("bias_add_gelu", dict(M=4, N=300)),
]

ALL = [(n, CASES[n]) for n in CASES] + EXTRA


def _to_numpy(y):
    if isinstance(y, torch.Tensor):
        return y.detach().numpy()
    return np.asarray(y)


def test_every_op_has_a_torch_baseline():
    assert set(CASES) == set(ops.OPS)
    for name in ops.OPS:
        fns = baselines(ops.make(name, **CASES[name]))
        assert "torch" in fns, name
        assert ("numpy" in fns) == (name not in CONV_POOL), name
        if torch.backends.mkldnn.is_available():  # PyTorch's oneDNN linear: dense and matmul
            assert ("onednn" in fns) == (name in ("dense", "matmul")), name


def test_unknown_op_has_no_baselines():
    op = ops.make("add", shape=(4,))
    op.family = "no_such_op"
    assert baselines(op) == {}


def test_prepare_rejects_bad_input():
    op = ops.make("add", shape=(4,))
    with pytest.raises(ValueError):
        prepare(op, op.random_inputs(), "jax")
    with pytest.raises(ValueError):
        prepare(op, op.random_inputs()[:1], "numpy")


@pytest.mark.parametrize("name,params", ALL, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ALL)])
def test_baseline_matches_reference(name, params):
    op = ops.make(name, **params)
    inputs = op.random_inputs(seed=3)
    ref = op.run_reference(*inputs)[0]
    fns = baselines(op)
    assert fns
    for fw, fn in fns.items():
        args = prepare(op, inputs, fw)
        if fw == "torch":
            assert all(isinstance(a, torch.Tensor) for a in args)
        y = _to_numpy(fn(*args))
        assert y.dtype == np.float32, (fw, y.dtype)       # no float64 upcast
        assert y.shape == ref.shape, (fw, y.shape, ref.shape)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4, err_msg=f"{name} / {fw}")
        # the inputs are left untouched (in-place tricks only touch fresh buffers)
        for a, b in zip(prepare(op, inputs, "numpy"), op.random_inputs(seed=3)):
            np.testing.assert_array_equal(a, b)


def test_gelu_tails_float32():
    op = ops.make("bias_add_gelu", M=1, N=4001)
    x = np.linspace(-9, 9, 4001, dtype=np.float32)[None, :]
    b = np.zeros(4001, np.float32)
    ref = op.run_reference(x, b)[0]
    for fw, fn in baselines(op).items():
        y = _to_numpy(fn(*prepare(op, [x, b], fw)))
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-6, err_msg=fw)


def test_time_baseline_positive():
    calls = []
    t = time_baseline(lambda: calls.append(1), [], repeat=3)
    assert t > 0
    assert len(calls) > 3          # warm-up + calibration + samples, many inner calls


@pytest.mark.parametrize("name", ["matmul", "conv2d_nchw", "softmax"])
def test_baseline_times_restores_threads(name):
    op = ops.make(name, **CASES[name])
    prev = torch.get_num_threads()
    times = baseline_times(op, op.random_inputs(), threads=1, repeat=3)
    assert set(times) == set(baselines(op))
    assert all(isinstance(v, float) and v > 0 for v in times.values())
    assert torch.get_num_threads() == prev


def test_isolated_baselines_time_each_case_and_thread_count_in_a_child(monkeypatch):
    """The child rebuilds each op from its name and parameters, draws its inputs and times
    every baseline at each thread count (also when the parent runs with
    OMP_WAIT_POLICY=PASSIVE)."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    cases = [ops.dense(8, 16, 12, bias=True, act="gelu"), ops.softmax(4, 32)]
    times = baselines_isolated(cases, threads=(1, 2), repeat=2, tries=1, processes=1)
    assert len(times) == 2
    for op, per_threads in zip(cases, times):
        assert sorted(per_threads) == [1, 2]
        for per in per_threads.values():
            assert set(per) == set(baselines(op)) and all(v > 0 for v in per.values())
    one = baseline_times_isolated(cases[1], threads=(1,), repeat=2, tries=2, processes=2)
    assert set(one) == {1} and set(one[1]) == set(baselines(cases[1]))
    (spread,) = baselines_isolated(cases[1:], threads=(1,), repeat=2, tries=2, processes=1, spread=True)
    assert all(0 < lo <= mid <= hi for lo, mid, hi in spread[1].values())  # fastest, median, slowest
