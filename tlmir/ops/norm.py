"""Row-wise normalisations over the last axis of an M x N input: softmax, layernorm, rmsnorm;
their baselines are PyTorch's functional ops and float32 numpy formulas."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import te
from ..errors import DefinitionError
from .base import OpDef, baseline, count_flops, pos_int

_F32 = np.float32


def _eps(op: str, eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise DefinitionError(f"{op}: eps must be a positive number, got {eps!r}")
    return float(eps)


def softmax(M: int, N: int) -> OpDef:
    """Softmax over the last axis, as topi: stages `max` (reduce), `exp` = exp(x - max),
    `sum` (reduce), `out` = exp / sum."""
    M, N = pos_int("softmax", "M", M), pos_int("softmax", "N", N)
    X = te.placeholder((M, N), name="X")
    k1 = te.reduce_axis(N, "k")
    mx = te.compute((M,), lambda i: te.max(X[i, k1], axis=k1), name="max")
    ex = te.compute((M, N), lambda i, j: te.exp(X[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis(N, "k")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="sum")
    out = te.compute((M, N), lambda i, j: ex[i, j] / sm[i], name="out")

    def ref(x):
        x = x.astype(np.float64)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return [e / e.sum(axis=-1, keepdims=True)]
    return OpDef("softmax", [X], [out], ref, count_flops([out]), dict(M=M, N=N),
                 input_ranges=[(-4.0, 4.0)])


def layernorm(M: int, N: int, eps: float = 1e-5) -> OpDef:
    """LayerNorm over the last axis with gamma / beta (biased variance, as PyTorch).

    Stages: `mean` = sum(x / N), `var` = sum((x - mean)^2 / N) (two-pass: no cancellation),
    `out` = (x - mean) * rsqrt(var + eps) * gamma + beta."""
    M, N = pos_int("layernorm", "M", M), pos_int("layernorm", "N", N)
    eps = _eps("layernorm", eps)
    X = te.placeholder((M, N), name="X")
    gamma = te.placeholder((N,), name="gamma")
    beta = te.placeholder((N,), name="beta")
    inv_n = 1.0 / N
    k1 = te.reduce_axis(N, "k")
    mean = te.compute((M,), lambda i: te.sum(X[i, k1] * inv_n, axis=k1), name="mean")
    k2 = te.reduce_axis(N, "k")

    def sq_dev(i):
        d = X[i, k2] - mean[i]
        return te.sum(d * d * inv_n, axis=k2)
    var = te.compute((M,), sq_dev, name="var")
    out = te.compute((M, N), lambda i, j: (X[i, j] - mean[i]) * te.rsqrt(var[i] + eps)
                     * gamma[j] + beta[j], name="out")

    def ref(x, g, b):
        x = x.astype(np.float64)
        mu = x.mean(axis=-1, keepdims=True)
        v = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return [(x - mu) / np.sqrt(v + eps) * g.astype(np.float64) + b.astype(np.float64)]
    return OpDef("layernorm", [X, gamma, beta], [out], ref, count_flops([out]),
                 dict(M=M, N=N, eps=eps), input_ranges=[(-2.0, 2.0), (0.5, 1.5), (-0.5, 0.5)])


def rmsnorm(M: int, N: int, eps: float = 1e-6) -> OpDef:
    """RMSNorm over the last axis: out = x * rsqrt(mean(x^2) + eps) * gamma.

    Stages: `ms` = sum(x * x / N), `out`."""
    M, N = pos_int("rmsnorm", "M", M), pos_int("rmsnorm", "N", N)
    eps = _eps("rmsnorm", eps)
    X = te.placeholder((M, N), name="X")
    gamma = te.placeholder((N,), name="gamma")
    inv_n = 1.0 / N
    k = te.reduce_axis(N, "k")
    ms = te.compute((M,), lambda i: te.sum(X[i, k] * X[i, k] * inv_n, axis=k), name="ms")
    out = te.compute((M, N), lambda i, j: X[i, j] * te.rsqrt(ms[i] + eps) * gamma[j],
                     name="out")

    def ref(x, g):
        x = x.astype(np.float64)
        r = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
        return [x * r * g.astype(np.float64)]
    return OpDef("rmsnorm", [X, gamma], [out], ref, count_flops([out]),
                 dict(M=M, N=N, eps=eps), input_ranges=[(-2.0, 2.0), (0.5, 1.5)])


# ------------------------------------------------------------------ baselines

@baseline("numpy", "softmax")
def _softmax_numpy(p: dict) -> Callable:
    def softmax(x):
        e = x - x.max(axis=-1, keepdims=True)
        np.exp(e, out=e)
        e /= e.sum(axis=-1, keepdims=True)
        return e
    return softmax


@baseline("torch", "softmax")
def _softmax_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    return lambda x: F.softmax(x, dim=-1)


@baseline("numpy", "layernorm")
def _layernorm_numpy(p: dict) -> Callable:
    eps = _F32(p["eps"])

    def layernorm(x, g, b):
        d = x - x.mean(axis=-1, keepdims=True)
        var = np.mean(d * d, axis=-1, keepdims=True)
        d *= _F32(1.0) / np.sqrt(var + eps)
        d *= g
        d += b
        return d
    return layernorm


@baseline("torch", "layernorm")
def _layernorm_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    N, eps = p["N"], p["eps"]
    return lambda x, g, b: F.layer_norm(x, (N,), g, b, eps)


@baseline("numpy", "rmsnorm")
def _rmsnorm_numpy(p: dict) -> Callable:
    eps = _F32(p["eps"])

    def rmsnorm(x, g):
        ms = np.mean(x * x, axis=-1, keepdims=True)
        r = x * (_F32(1.0) / np.sqrt(ms + eps))
        r *= g
        return r
    return rmsnorm


@baseline("torch", "rmsnorm")
def _rmsnorm_torch(p: dict) -> Callable:
    import torch
    N, eps = p["N"], p["eps"]
    if hasattr(torch, "rms_norm"):
        return lambda x, g: torch.rms_norm(x, (N,), g, eps)
    return lambda x, g: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g
