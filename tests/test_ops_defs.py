"""The operator library: shapes, flop counts, references vs PyTorch, and the TE definitions
themselves (lowered naively here, run by the reference interpreter) vs the references."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tlmir import ops
from tlmir.errors import DefinitionError, ShapeError
from tlmir.ir import expr as E
from tlmir.ir import stmt as S
from tlmir.ir.tensor import ComputeOp
from tlmir.runtime.interpreter import run_interpreted


def T(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def check_vs_torch(op: ops.OpDef, torch_fn, seed: int = 0, tol: float = 1e-5):
    xs = op.random_inputs(seed)
    got = op.run_reference(*xs)
    want = torch_fn(*[T(x) for x in xs])
    want = want if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want) == len(op.outputs)
    for g, w, t in zip(got, want, op.outputs):
        assert g.shape == t.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w.numpy(), rtol=tol, atol=tol)


# ------------------------------------------------------------------ naive lowering

def _flat(shape, idx) -> E.Expr:
    acc = E.const(idx[0])
    for s, i in zip(shape[1:], idx[1:]):
        acc = acc * s + i
    return acc


def naive_lower(op: ops.OpDef) -> S.PrimFunc:
    """Every stage as its own full loop nest into its own buffer (no schedule)."""
    bufs = {id(t.op): S.Buffer(t.name, t.shape, t.dtype) for t in op.args}
    temps = []
    for st in op.stages:
        if id(st) not in bufs:
            bufs[id(st)] = S.Buffer(st.name, st.shape, st.dtype)
            temps.append(bufs[id(st)])

    def lower(e: E.Expr) -> E.Expr:
        return E.transform(e, lambda n: E.Load(bufs[id(n.tensor.op)], _flat(n.tensor.shape, n.indices))
                           if isinstance(n, E.TensorRead) else None)

    nests = []
    for st in op.stages:
        buf = bufs[id(st)]
        idx = _flat(st.shape, [a.var for a in st.axis])
        body = st.body
        if isinstance(body, E.Reduce):
            upd: S.Stmt = S.Store(buf, idx, E.REDUCERS[body.combiner](E.Load(buf, idx), lower(body.source)))
            if body.condition is not None:
                upd = S.IfThenElse(lower(body.condition), upd)
            for a in reversed(body.axes):
                upd = S.For(a.var, E.const(0), E.const(a.extent), "serial", upd)
            inner: S.Stmt = S.seq(S.Store(buf, idx, body.identity()), upd)
        else:
            inner = S.Store(buf, idx, lower(body))
        for a in reversed(st.axis):
            inner = S.For(a.var, E.const(0), E.const(a.extent), "serial", inner)
        nests.append(inner)
    prog = S.seq(*nests)
    for b in temps:
        prog = S.Allocate(b, prog)
    return S.PrimFunc(op.family, [bufs[id(t.op)] for t in op.args], prog)


SMALL = [
    ("matmul", dict(M=3, N=5, K=4)),
    ("batch_matmul", dict(B=2, M=3, N=4, K=5)),
    ("dense", dict(M=3, N=4, K=5)),
    ("dense", dict(M=3, N=4, K=5, bias=True, act="relu")),
    ("dense", dict(M=3, N=4, K=5, bias=True, act="gelu")),
    ("conv2d_nchw", dict(N=1, C=4, H=7, W=6, K=4, R=3, S=3, stride=2, padding=1, dilation=1, groups=2)),
    ("conv2d_nchw", dict(N=2, C=2, H=6, W=6, K=3, R=3, S=2, stride=1, padding=(2, 1), dilation=2)),
    ("conv2d_nhwc", dict(N=1, C=4, H=6, W=5, K=6, R=3, S=3, stride=(1, 2), padding=1, groups=2)),
    ("depthwise_conv2d_nchw", dict(N=1, C=3, H=6, W=6, R=3, S=3, stride=2, padding=1, multiplier=2)),
    ("conv2d_bias_relu", dict(N=1, C=2, H=5, W=5, K=3, R=3, S=3, padding=1)),
    ("max_pool2d", dict(N=1, C=2, H=7, W=6, kernel=3, stride=2, padding=1)),
    ("avg_pool2d", dict(N=1, C=2, H=7, W=6, kernel=3, stride=2, padding=1)),
    ("softmax", dict(M=3, N=7)),
    ("layernorm", dict(M=3, N=8)),
    ("rmsnorm", dict(M=3, N=8)),
    ("add_relu", dict(shape=(2, 3, 4))),
    ("bias_add_gelu", dict(M=3, N=5)),
    ("scale_shift_tanh", dict(shape=(3, 5))),
    ("conv2d_transpose_nchw", dict(N=1, C=2, H=3, W=4, K=3, R=4, S=3, stride=(2, 1), padding=1,
                                   output_padding=(1, 0), bias=True, act="tanh")),
    ("add", dict(shape=(2, 3, 4))),
    ("silu_mul", dict(M=3, N=5)),
]


@pytest.mark.parametrize("name,params", SMALL, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SMALL)])
def test_te_definition_matches_reference(name, params):
    op = ops.make(name, **params)
    xs = op.random_inputs(seed=3)
    outs = op.empty_outputs()
    run_interpreted(naive_lower(op), *xs, *outs)
    for got, want in zip(outs, op.run_reference(*xs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ shapes, stages, flops

@pytest.mark.parametrize("name,params,shape,stages,flops", [
    ("matmul", dict(M=4, N=5, K=6), (4, 5), ["C"], 2 * 4 * 5 * 6),
    ("batch_matmul", dict(B=2, M=3, N=4, K=5), (2, 3, 4), ["C"], 2 * 2 * 3 * 4 * 5),
    ("dense", dict(M=4, N=5, K=6), (4, 5), ["D"], 240),
    ("dense", dict(M=4, N=5, K=6, bias=True, act="relu"), (4, 5), ["D", "bias", "relu"], 240 + 20 + 20),
    # gelu = x * 0.5 * (1 + erf(x * c)): 3 mul + 1 add + 1 erf = 5 per element
    ("dense", dict(M=4, N=5, K=6, bias=True, act="gelu"), (4, 5), ["D", "bias", "gelu"], 240 + 20 + 100),
    ("conv2d_nchw", dict(N=1, C=4, H=8, W=8, K=6, R=3, S=3, padding=1, groups=2),
     (1, 6, 8, 8), ["pad", "conv"], 1 * 6 * 8 * 8 * (2 * 3 * 3) * 2),
    ("conv2d_nchw", dict(N=2, C=3, H=9, W=9, K=4, R=3, S=3, stride=2), (2, 4, 4, 4), ["conv"],
     2 * 4 * 4 * 4 * 27 * 2),
    ("conv2d_nchw", dict(N=1, C=1, H=9, W=9, K=1, R=3, S=3, dilation=2), (1, 1, 5, 5), ["conv"],
     25 * 9 * 2),
    ("conv2d_nhwc", dict(N=1, C=4, H=8, W=8, K=6, R=3, S=3, padding=1), (1, 8, 8, 6),
     ["pad", "conv"], 64 * 6 * 36 * 2),
    ("depthwise_conv2d_nchw", dict(N=1, C=3, H=6, W=6, R=3, S=3, multiplier=2), (1, 6, 4, 4),
     ["conv"], 96 * 9 * 2),
    ("conv2d_bias_relu", dict(N=1, C=2, H=5, W=5, K=3, R=3, S=3), (1, 3, 3, 3),
     ["conv", "bias", "relu"], 27 * 18 * 2 + 27 + 27),
    ("max_pool2d", dict(N=1, C=2, H=6, W=6, kernel=2), (1, 2, 3, 3), ["pool"], 18 * 4),
    ("max_pool2d", dict(N=1, C=2, H=7, W=7, kernel=3, stride=2, padding=1), (1, 2, 4, 4),
     ["pad", "pool"], 32 * 9),
    ("avg_pool2d", dict(N=1, C=2, H=6, W=6, kernel=2), (1, 2, 3, 3), ["sum", "out"], 18 * 4 + 18),
    # max 12, exp (sub + exp) 24, sum 12, divide 12
    ("softmax", dict(M=3, N=4), (3, 4), ["max", "exp", "sum", "out"], 12 + 24 + 12 + 12),
    # mean: (mul + add) 24; var: (2 sub + 2 mul + add) 60; out: sub, add, rsqrt, 2 mul, add 72
    ("layernorm", dict(M=3, N=4), (3, 4), ["mean", "var", "out"], 24 + 60 + 72),
    ("rmsnorm", dict(M=3, N=4), (3, 4), ["ms", "out"], 36 + 48),
    ("add_relu", dict(shape=(2, 3)), (2, 3), ["add", "relu"], 12),
    ("bias_add_gelu", dict(M=3, N=4), (3, 4), ["bias", "gelu"], 12 + 60),
    ("scale_shift_tanh", dict(shape=(2, 3, 4)), (2, 3, 4), ["scale", "shift", "tanh"], 72),
    # out 2x2 -> zero-inserted + padded to 5x5, conv = stride-1 4x4 conv over it
    ("conv2d_transpose_nchw", dict(N=1, C=2, H=2, W=2, K=3, R=4, S=4, stride=2, padding=1),
     (1, 3, 4, 4), ["pad", "conv"], 48 * (2 * 16) * 2),
    ("conv2d_transpose_nchw", dict(N=1, C=2, H=2, W=2, K=3, R=3, S=3, bias=True, act="relu"),
     (1, 3, 4, 4), ["pad", "conv", "bias", "relu"], 48 * 18 * 2 + 48 + 48),
    ("add", dict(shape=(2, 3)), (2, 3), ["add"], 6),
    # silu: mul + sigmoid, mul: 1
    ("silu_mul", dict(M=3, N=4), (3, 4), ["silu", "mul"], 36),
])
def test_shapes_stages_flops(name, params, shape, stages, flops):
    op = ops.make(name, **params)
    assert [t.shape for t in op.outputs] == [shape]
    assert [s.name for s in op.stages] == stages
    assert op.flops == flops
    assert op.args == op.inputs + op.outputs
    all_ops = ops.topo_ops(op.outputs)
    assert len({o.name for o in all_ops}) == len(all_ops)  # every tensor has its own name
    assert all(isinstance(s, ComputeOp) for s in op.stages)


def test_random_inputs_deterministic_and_in_range():
    op = ops.make("layernorm", M=4, N=6)
    a, b = op.random_inputs(seed=1), op.random_inputs(seed=1)
    assert all(x.dtype == np.float32 and np.array_equal(x, y) for x, y in zip(a, b))
    assert [x.shape for x in a] == [(4, 6), (6,), (6,)]
    assert a[1].min() >= 0.5  # gamma positive
    assert not np.array_equal(op.random_inputs(seed=2)[0], a[0])


def test_registry_and_errors():
    assert set(ops.OPS) >= {"matmul", "batch_matmul", "dense", "conv2d_nchw", "conv2d_nhwc",
                            "depthwise_conv2d_nchw", "conv2d_bias_relu", "max_pool2d",
                            "avg_pool2d", "softmax", "layernorm", "rmsnorm", "add_relu",
                            "bias_add_gelu", "scale_shift_tanh"}
    with pytest.raises(DefinitionError, match="'conv3d'.*conv2d_nchw"):
        ops.make("conv3d", N=1)
    with pytest.raises(DefinitionError, match="matmul"):
        ops.make("matmul", M=2, N=2)
    with pytest.raises(DefinitionError, match="groups"):
        ops.make("conv2d_nchw", N=1, C=3, H=5, W=5, K=4, R=3, S=3, groups=2)
    with pytest.raises(ShapeError, match="does not fit"):
        ops.make("conv2d_nchw", N=1, C=3, H=2, W=5, K=4, R=3, S=3)
    with pytest.raises(DefinitionError, match="act"):
        ops.make("dense", M=2, N=2, K=2, act="tanh")
    with pytest.raises(DefinitionError, match="batch_matmul: mask=4 masks must divide B=6"):
        ops.make("batch_matmul", B=6, M=2, N=2, K=2, mask=4)
    with pytest.raises(DefinitionError, match="padding"):
        ops.make("max_pool2d", N=1, C=1, H=6, W=6, kernel=2, padding=2)
    with pytest.raises(DefinitionError, match="M"):
        ops.make("softmax", M=0, N=3)
    with pytest.raises(DefinitionError, match="padding"):
        ops.make("conv2d_transpose_nchw", N=1, C=1, H=4, W=4, K=1, R=3, S=3, padding=3)
    with pytest.raises(DefinitionError, match="output_padding"):
        ops.make("conv2d_transpose_nchw", N=1, C=1, H=4, W=4, K=1, R=3, S=3, output_padding=1)
    with pytest.raises(DefinitionError, match="act"):
        ops.make("conv2d_transpose_nchw", N=1, C=1, H=4, W=4, K=1, R=3, S=3, act="gelu")


# ------------------------------------------------------------------ references vs torch

def test_linalg_vs_torch():
    check_vs_torch(ops.matmul(5, 6, 7), torch.matmul)
    check_vs_torch(ops.batch_matmul(3, 4, 5, 6), torch.bmm)
    check_vs_torch(ops.dense(4, 5, 6), lambda x, w: F.linear(x, w))
    check_vs_torch(ops.dense(4, 5, 6, bias=True, act="relu"), lambda x, w, b: F.relu(F.linear(x, w, b)))
    check_vs_torch(ops.dense(8, 5, 6, bias=True, act="gelu"), lambda x, w, b: F.gelu(F.linear(x, w, b)))
    check_vs_torch(ops.dense(8, 5, 6, act="gelu"), lambda x, w: F.gelu(F.linear(x, w)))


CONV_CASES = [
    dict(N=2, C=3, H=8, W=7, K=4, R=3, S=3),
    dict(N=1, C=4, H=9, W=9, K=6, R=3, S=3, stride=2, padding=1),
    dict(N=1, C=4, H=10, W=9, K=4, R=3, S=2, stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
    dict(N=2, C=6, H=7, W=7, K=9, R=3, S=3, padding=1, groups=3),
    dict(N=1, C=4, H=11, W=11, K=8, R=5, S=5, stride=3, padding=2, dilation=2, groups=4),
    dict(N=1, C=8, H=6, W=6, K=8, R=1, S=1, groups=8),
]


def _conv_kw(p):
    return dict(stride=p.get("stride", 1), padding=p.get("padding", 0),
                dilation=p.get("dilation", 1), groups=p.get("groups", 1))


@pytest.mark.parametrize("p", CONV_CASES)
def test_conv_variants_vs_torch(p):
    kw = _conv_kw(p)
    check_vs_torch(ops.conv2d_nchw(**p), lambda x, w: F.conv2d(x, w, **kw))
    check_vs_torch(ops.conv2d_nhwc(**p), lambda x, w: F.conv2d(
        x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), **kw).permute(0, 2, 3, 1))
    check_vs_torch(ops.conv2d_bias_relu(**p), lambda x, w, b: F.relu(F.conv2d(x, w, b, **kw)))


@pytest.mark.parametrize("m,stride,padding,dilation", [(1, 1, 0, 1), (2, 2, 1, 1), (3, 1, 2, 2)])
def test_depthwise_vs_torch(m, stride, padding, dilation):
    C, R = 3, 3
    op = ops.depthwise_conv2d_nchw(2, C, 8, 7, R, R, stride, padding, dilation, multiplier=m)
    assert op.outputs[0].shape[1] == C * m
    check_vs_torch(op, lambda x, w: F.conv2d(x, w.reshape(C * m, 1, R, R), stride=stride,
                                             padding=padding, dilation=dilation, groups=C))


@pytest.mark.parametrize("kernel,stride,padding", [(2, None, 0), (3, 2, 1), ((3, 2), (1, 2), (1, 0)),
                                                   (3, 1, 1)])
def test_pooling_vs_torch(kernel, stride, padding):
    p = dict(N=2, C=3, H=9, W=8, kernel=kernel, stride=stride, padding=padding)
    check_vs_torch(ops.max_pool2d(**p), lambda x: F.max_pool2d(x, kernel, stride, padding))
    check_vs_torch(ops.avg_pool2d(**p), lambda x: F.avg_pool2d(
        x, kernel, stride, padding, count_include_pad=True))


def test_norms_vs_torch():
    check_vs_torch(ops.softmax(5, 17), lambda x: F.softmax(x, dim=-1))
    check_vs_torch(ops.layernorm(4, 32), lambda x, g, b: F.layer_norm(x, (32,), g, b, eps=1e-5))
    check_vs_torch(ops.layernorm(4, 8, eps=1e-3), lambda x, g, b: F.layer_norm(x, (8,), g, b, eps=1e-3))
    check_vs_torch(ops.rmsnorm(4, 16, eps=1e-6), lambda x, g: F.rms_norm(x, (16,), g, eps=1e-6))


def test_elementwise_vs_torch():
    check_vs_torch(ops.add_relu((3, 4, 5)), lambda a, b: F.relu(a + b))
    check_vs_torch(ops.bias_add_gelu(6, 7), lambda x, b: F.gelu(x + b))
    check_vs_torch(ops.scale_shift_tanh((2, 3, 4)), lambda x, g, b: torch.tanh(x * g + b))
    check_vs_torch(ops.add((3, 4, 5)), lambda a, b: a + b)
    check_vs_torch(ops.silu_mul(6, 7), lambda a, b: F.silu(a) * b)


@pytest.mark.parametrize("p", [
    dict(N=1, C=4, H=4, W=4, K=3, R=4, S=4, stride=2, padding=1),           # DCGAN layer
    dict(N=2, C=3, H=5, W=4, K=2, R=3, S=2, stride=(2, 3), padding=(1, 0), output_padding=(1, 2)),
    dict(N=1, C=2, H=5, W=6, K=3, R=3, S=3),
    dict(N=1, C=3, H=3, W=3, K=4, R=5, S=5, stride=3, padding=2, output_padding=2),
])
@pytest.mark.parametrize("act", [None, "relu", "tanh"])
def test_conv_transpose_vs_torch(p, act):
    kw = dict(stride=p.get("stride", 1), padding=p.get("padding", 0),
              output_padding=p.get("output_padding", 0))
    post = {None: lambda y: y, "relu": F.relu, "tanh": torch.tanh}[act]
    check_vs_torch(ops.conv2d_transpose_nchw(**p, act=act),
                   lambda x, w: post(F.conv_transpose2d(x, w, **kw)))
    check_vs_torch(ops.conv2d_transpose_nchw(**p, bias=True, act=act),
                   lambda x, w, b: post(F.conv_transpose2d(x, w, b, **kw)))
