"""Every op in tlmir.ops matches its numpy reference under the default schedule and
three hand-written ones (split/reorder/fuse/vectorize/parallel/compute_at/cache_write)."""
import pytest

from tlmir import ops

from schedutil import SCHEDULES, check_op

CASES = {
    "matmul": dict(M=24, N=40, K=20),
    "batch_matmul": dict(B=2, M=12, N=16, K=8),
    "dense": dict(M=8, N=24, K=16, bias=True, act="gelu"),
    "conv2d_nchw": dict(N=1, C=4, H=10, W=10, K=8, R=3, S=3, stride=1, padding=1),
    "conv2d_nhwc": dict(N=1, C=4, H=9, W=9, K=8, R=3, S=3, stride=2, padding=1),
    "depthwise_conv2d_nchw": dict(N=1, C=8, H=10, W=10, R=3, S=3, stride=1, padding=1),
    "conv2d_bias_relu": dict(N=1, C=4, H=8, W=8, K=8, R=3, S=3, stride=1, padding=1),
    "conv2d_bias": dict(N=1, C=4, H=8, W=8, K=8, R=1, S=1, stride=2, act="relu6"),
    "max_pool2d": dict(N=1, C=4, H=12, W=12, kernel=3, stride=2, padding=1),
    "avg_pool2d": dict(N=1, C=4, H=12, W=12, kernel=2, stride=2),
    "softmax": dict(M=8, N=40),
    "layernorm": dict(M=8, N=48),
    "rmsnorm": dict(M=8, N=48),
    "add_relu": dict(shape=(6, 40)),
    "bias_add_gelu": dict(M=8, N=40),
    "scale_shift_tanh": dict(shape=(4, 6, 16)),
    "conv2d_transpose_nchw": dict(N=1, C=4, H=5, W=5, K=8, R=4, S=4, stride=2, padding=1,
                                  bias=True, act="relu"),
    "add": dict(shape=(6, 40)),
    "silu_mul": dict(M=8, N=40),
}


def test_every_op_has_a_case():
    assert set(CASES) == set(ops.OPS)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("name", list(CASES))
def test_op_under_schedule(name, schedule):
    check_op(ops.make(name, **CASES[name]), SCHEDULES[schedule])
