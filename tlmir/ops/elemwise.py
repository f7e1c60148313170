"""Injective fusion chains: several element-wise stages, some reading broadcast vectors;
their baselines are PyTorch's element-wise ops and vectorized float32 numpy formulas."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import te
from .base import OpDef, baseline, count_flops, pos_int, shape_tuple
from .linalg import gelu_expr, gelu_f32, gelu_ref

_F32 = np.float32


def add_relu(shape) -> OpDef:
    """out = relu(A + B), A and B of `shape`; stages `add`, `relu`."""
    shape = shape_tuple("add_relu", shape)
    A = te.placeholder(shape, name="A")
    B = te.placeholder(shape, name="B")
    s = te.compute(shape, lambda *i: A[i] + B[i], name="add")
    out = te.compute(shape, lambda *i: te.max(s[i], 0.0), name="relu")

    def ref(a, b):
        return [np.maximum(a.astype(np.float64) + b, 0.0)]
    return OpDef("add_relu", [A, B], [out], ref, count_flops([out]), dict(shape=shape))


def bias_add_gelu(M: int, N: int) -> OpDef:
    """out = gelu(X + b[j]) (exact erf GELU), X: M x N, b: N; stages `bias`, `gelu`."""
    M, N = pos_int("bias_add_gelu", "M", M), pos_int("bias_add_gelu", "N", N)
    X = te.placeholder((M, N), name="X")
    b = te.placeholder((N,), name="b")
    y = te.compute((M, N), lambda i, j: X[i, j] + b[j], name="bias")
    out = te.compute((M, N), lambda i, j: gelu_expr(y[i, j]), name="gelu")

    def ref(x, bb):
        return [gelu_ref(x.astype(np.float64) + bb)]
    return OpDef("bias_add_gelu", [X, b], [out], ref, count_flops([out]), dict(M=M, N=N),
                 input_ranges=[(-3.0, 3.0), (-1.0, 1.0)])


def scale_shift_tanh(shape) -> OpDef:
    """out = tanh(X * scale[c] + shift[c]) with c the last axis of `shape`;
    stages `scale`, `shift`, `tanh`."""
    shape = shape_tuple("scale_shift_tanh", shape)
    X = te.placeholder(shape, name="X")
    scale = te.placeholder((shape[-1],), name="gamma")
    shift = te.placeholder((shape[-1],), name="beta")
    sc = te.compute(shape, lambda *i: X[i] * scale[i[-1]], name="scale")
    sh = te.compute(shape, lambda *i: sc[i] + shift[i[-1]], name="shift")
    out = te.compute(shape, lambda *i: te.tanh(sh[i]), name="tanh")

    def ref(x, g, b):
        return [np.tanh(x.astype(np.float64) * g + b)]
    return OpDef("scale_shift_tanh", [X, scale, shift], [out], ref, count_flops([out]),
                 dict(shape=shape), input_ranges=[(-2.0, 2.0), (0.5, 1.5), (-0.5, 0.5)])


def add(shape) -> OpDef:
    """out = A + B, A and B of `shape` (a residual connection without activation);
    one stage `add`."""
    shape = shape_tuple("add", shape)
    A = te.placeholder(shape, name="A")
    B = te.placeholder(shape, name="B")
    out = te.compute(shape, lambda *i: A[i] + B[i], name="add")

    def ref(a, b):
        return [a.astype(np.float64) + b]
    return OpDef("add", [A, B], [out], ref, count_flops([out]), dict(shape=shape))


def silu_mul(M: int, N: int) -> OpDef:
    """out = silu(A) * B = A * sigmoid(A) * B, A and B: M x N (the gated MLP of LLaMA:
    silu(x W_gate^T) * (x W_up^T)); stages `silu`, `mul`."""
    M, N = pos_int("silu_mul", "M", M), pos_int("silu_mul", "N", N)
    A = te.placeholder((M, N), name="A")
    B = te.placeholder((M, N), name="B")
    s = te.compute((M, N), lambda i, j: A[i, j] * te.sigmoid(A[i, j]), name="silu")
    out = te.compute((M, N), lambda i, j: s[i, j] * B[i, j], name="mul")

    def ref(a, b):
        a = a.astype(np.float64)
        return [a / (1.0 + np.exp(-a)) * b]
    return OpDef("silu_mul", [A, B], [out], ref, count_flops([out]), dict(M=M, N=N),
                 input_ranges=[(-4.0, 4.0), (-1.0, 1.0)])


# ------------------------------------------------------------------ baselines

@baseline("numpy", "add")
def _add_numpy(p: dict) -> Callable:
    return np.add


@baseline("torch", "add")
def _add_torch(p: dict) -> Callable:
    import torch
    return torch.add


@baseline("numpy", "add_relu")
def _add_relu_numpy(p: dict) -> Callable:
    def add_relu(a, b):
        r = a + b
        np.maximum(r, _F32(0.0), out=r)
        return r
    return add_relu


@baseline("torch", "add_relu")
def _add_relu_torch(p: dict) -> Callable:
    import torch
    return lambda a, b: torch.relu_(torch.add(a, b))


@baseline("numpy", "bias_add_gelu")
def _bias_add_gelu_numpy(p: dict) -> Callable:
    def bias_add_gelu(x, b):
        return gelu_f32(x + b)
    return bias_add_gelu


@baseline("torch", "bias_add_gelu")
def _bias_add_gelu_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    return lambda x, b: F.gelu(x + b)


@baseline("numpy", "scale_shift_tanh")
def _scale_shift_tanh_numpy(p: dict) -> Callable:
    def scale_shift_tanh(x, g, b):
        r = x * g
        r += b
        np.tanh(r, out=r)
        return r
    return scale_shift_tanh


@baseline("torch", "scale_shift_tanh")
def _scale_shift_tanh_torch(p: dict) -> Callable:
    import torch
    return lambda x, g, b: torch.tanh_(torch.addcmul(b, x, g))


@baseline("numpy", "silu_mul")
def _silu_mul_numpy(p: dict) -> Callable:
    def silu_mul(a, b):
        # a * sigmoid(a) with sigmoid(a) = 0.5 * (1 + tanh(a / 2)): no exp overflow
        s = a * _F32(0.5)
        np.tanh(s, out=s)
        s += _F32(1.0)
        s *= _F32(0.5)
        s *= a
        s *= b
        return s
    return silu_mul


@baseline("torch", "silu_mul")
def _silu_mul_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    return lambda a, b: F.silu(a).mul_(b)
