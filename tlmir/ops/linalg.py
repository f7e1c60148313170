"""Matrix products: matmul, batch_matmul, dense (PyTorch Linear with bias / activation),
and their baselines: numpy's BLAS sgemm, PyTorch's MKL sgemm and its oneDNN linear."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .. import te
from ..errors import DefinitionError
from .base import OpDef, baseline, count_flops, pos_int, torch_act

ACTIVATIONS = (None, "relu", "gelu")


def gelu_expr(x):
    """Exact (erf) GELU, as torch.nn.functional.gelu(approximate='none')."""
    return x * 0.5 * (1.0 + te.erf(x * (1.0 / math.sqrt(2.0))))


def gelu_ref(x: np.ndarray) -> np.ndarray:
    from math import erf
    verf = np.vectorize(erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + verf(x / math.sqrt(2.0)))


_F32 = np.float32


def _erfc_pos_f32(a: np.ndarray) -> np.ndarray:
    """erfc(a) for a >= 0, float32 (Numerical Recipes' erfcc: relative error < 1.2e-7,
    so the tail stays accurate where 1 + erf(-a) would cancel)."""
    t = _F32(1.0) / (_F32(1.0) + _F32(0.5) * a)
    p = _F32(0.17087277)
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
              0.37409196, 1.00002368, -1.26551223):
        p = p * t + _F32(c)
    return t * np.exp(p - a * a)


def gelu_f32(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU of a float32 array, as a new float32 array (the numpy baselines'
    GELU: numpy has no erf): 0.5 * x * (1 + erf(x / sqrt(2))) computed as
    0.5 * x * erfc(-x / sqrt(2)) so both tails stay accurate."""
    z = x * _F32(1.0 / math.sqrt(2.0))
    e = _erfc_pos_f32(np.abs(z))                     # erfc(|z|)
    one_plus_erf = np.where(z >= 0, _F32(2.0) - e, e)   # erfc(-z) = 1 + erf(z)
    one_plus_erf *= x
    one_plus_erf *= _F32(0.5)
    return one_plus_erf


def matmul(M: int, N: int, K: int) -> OpDef:
    """C[i, j] = sum_k A[i, k] * B[k, j]; A: MxK, B: KxN."""
    M, N, K = (pos_int("matmul", n, v) for n, v in (("M", M), ("N", N), ("K", K)))
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    def ref(a, b):
        return [a.astype(np.float64) @ b.astype(np.float64)]
    return OpDef("matmul", [A, B], [C], ref, count_flops([C]), dict(M=M, N=N, K=K))


def batch_matmul(B: int, M: int, N: int, K: int, scale: float | None = None,
                 mask: int | None = None) -> OpDef:
    """C[b, i, j] = sum_k A[b, i, k] * W[b, k, j]; A: BxMxK, W: BxKxN (torch.bmm).

    Attention's scores take their scale and additive mask as an epilogue stage, "scores",
    rather than a pass of their own: C * scale (if scale), + Mask[b // (B // mask), i, j]
    (if mask: Mask is mask x M x N, mask dividing B; 1 for one mask of every batch, the
    batch size when B is batch x heads)."""
    B, M, N, K = (pos_int("batch_matmul", n, v)
                  for n, v in (("B", B), ("M", M), ("N", N), ("K", K)))
    if mask is not None and (pos_int("batch_matmul", "mask", mask) > B or B % mask):
        raise DefinitionError(f"batch_matmul: mask={mask} masks must divide B={B}")
    if scale is not None:
        scale = float(scale)
    A = te.placeholder((B, M, K), name="A")
    W = te.placeholder((B, K, N), name="B")
    inputs = [A, W]
    k = te.reduce_axis(K, "k")
    C = te.compute((B, M, N), lambda b, i, j: te.sum(A[b, i, k] * W[b, k, j], axis=k), name="C")
    out = C
    if scale is not None or mask is not None:
        per = B // mask if mask is not None else B
        Mk = te.placeholder((mask, M, N), name="Mask") if mask is not None else None
        if Mk is not None:
            inputs.append(Mk)

        def scores(b, i, j):
            v = C[b, i, j] * scale if scale is not None else C[b, i, j]
            return v + Mk[b // per, i, j] if Mk is not None else v
        out = te.compute((B, M, N), scores, name="scores")

    def ref(a, w, *rest):
        r = np.matmul(a.astype(np.float64), w.astype(np.float64))
        if scale is not None:
            r = r * scale
        if mask is not None:
            r = r + np.repeat(rest[0].astype(np.float64), B // mask, axis=0)
        return [r]
    return OpDef("batch_matmul", inputs, [out], ref, count_flops([out]),
                 dict(B=B, M=M, N=N, K=K, scale=scale, mask=mask))


def dense(M: int, N: int, K: int, bias: bool = False, act: str | None = None) -> OpDef:
    """out = act(X @ W.T + b) with X: MxK, W: NxK (torch Linear), b: N.

    Stages: D (the reduction), then `bias` (if bias), then `relu` / `gelu` (if act)."""
    M, N, K = (pos_int("dense", n, v) for n, v in (("M", M), ("N", N), ("K", K)))
    if act not in ACTIVATIONS:
        raise DefinitionError(f"dense: act must be one of {ACTIVATIONS}, got {act!r}")
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((N, K), name="W")
    inputs = [X, W]
    k = te.reduce_axis(K, "k")
    out = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="D")
    if bias:
        b = te.placeholder((N,), name="b")
        inputs.append(b)
        d = out
        out = te.compute((M, N), lambda i, j: d[i, j] + b[j], name="bias")
    if act == "relu":
        y = out
        out = te.compute((M, N), lambda i, j: te.max(y[i, j], 0.0), name="relu")
    elif act == "gelu":
        y = out
        out = te.compute((M, N), lambda i, j: gelu_expr(y[i, j]), name="gelu")

    def ref(x, w, *rest):
        r = x.astype(np.float64) @ w.astype(np.float64).T
        if bias:
            r = r + rest[0].astype(np.float64)
        if act == "relu":
            r = np.maximum(r, 0.0)
        elif act == "gelu":
            r = gelu_ref(r)
        return [r]
    return OpDef("dense", inputs, [out], ref, count_flops([out]),
                 dict(M=M, N=N, K=K, bias=bool(bias), act=act))


# ------------------------------------------------------------------ baselines

@baseline("numpy", "matmul")
def _matmul_numpy(p: dict) -> Callable:
    return np.matmul


@baseline("numpy", "batch_matmul")
def _batch_matmul_numpy(p: dict) -> Callable:
    B, M, N, scale, mask = p["B"], p["M"], p["N"], p.get("scale"), p.get("mask")

    def bmm(a, w, *rest):
        r = np.matmul(a, w)
        if scale is not None:
            r *= _F32(scale)
        if mask is not None:
            r.reshape(mask, B // mask, M, N)[...] += rest[0][:, None]
        return r
    return bmm


@baseline("torch", "matmul")
def _matmul_torch(p: dict) -> Callable:
    import torch
    return torch.matmul


@baseline("torch", "batch_matmul")
def _batch_matmul_torch(p: dict) -> Callable:
    import torch
    B, M, N, scale, mask = p["B"], p["M"], p["N"], p.get("scale"), p.get("mask")
    if scale is None and mask is None:
        return torch.bmm

    def bmm(a, w, *rest):
        r = torch.bmm(a, w)
        if scale is not None:
            r.mul_(scale)
        if mask is not None:
            r.view(mask, B // mask, M, N).add_(rest[0][:, None])
        return r
    return bmm


@baseline("numpy", "dense")
def _dense_numpy(p: dict) -> Callable:
    bias, act = p.get("bias", False), p.get("act")

    def dense(x, w, *rest):
        r = x @ w.T                                  # sgemm with a transposed operand
        if bias:
            r += rest[0]
        if act == "relu":
            np.maximum(r, _F32(0.0), out=r)
        elif act == "gelu":
            r = gelu_f32(r)
        return r
    return dense


@baseline("torch", "dense")
def _dense_torch(p: dict) -> Callable:
    import torch.nn.functional as F
    bias, act = p.get("bias", False), torch_act(p.get("act"))
    return lambda x, w, *rest: act(F.linear(x, w, rest[0] if bias else None))


def _onednn_linear() -> Callable | None:
    """PyTorch's oneDNN linear (`torch.ops.mkldnn._linear_pointwise`, the kernel its
    compiler's CPU fusions call), or None where this torch build lacks it. torch runs
    matmul and dense through MKL's sgemm, which picks its kernels by CPU vendor (on an AMD
    Zen 5 host dense 128x768x3072 took 6.7 ms, oneDNN 3.3 ms: docs/benchmarks.md)."""
    import torch
    linear = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
    if linear is None or not torch.backends.mkldnn.is_available():
        return None
    return linear


@baseline("onednn", "matmul")
def _matmul_onednn(p: dict) -> Callable | None:
    linear = _onednn_linear()
    return None if linear is None else lambda a, b: linear(a, b.t(), None, "none", [], "")


# dense's activation -> oneDNN's fused post-op: attr, scalars, algorithm ("none": exact erf GELU)
_POST_OPS = {None: ("none", [], ""), "relu": ("relu", [], ""), "gelu": ("gelu", [None], "none")}


@baseline("onednn", "dense")
def _dense_onednn(p: dict) -> Callable | None:
    linear = _onednn_linear()
    if linear is None or p.get("act") not in _POST_OPS:
        return None
    bias, post = p.get("bias", False), _POST_OPS[p.get("act")]
    return lambda x, w, *rest: linear(x, w, rest[0] if bias else None, *post)
